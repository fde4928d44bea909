#include "coordinator/leadership.h"

#include <utility>

#include <glog/logging.h>

namespace relaxps {

Status Leadership::Open(const CoordinatorOptions& options, const std::string& endpoint,
                        std::function<void()> on_elected,
                        std::function<void(ZkEvent)> on_zk_event) {
  CHECK(store_ == nullptr) << "Leadership::Open twice";
  if (!options.coordination.empty()) {
    coordinated_ = true;
    ASSIGN_OR_RETURN(ZkAddress address, ParseZkAddress(options.coordination));
    ZkSessionOptions zo;
    zo.hosts = address.hosts;
    zo.session_timeout_ms = options.zk_session_timeout_ms;
    ASSIGN_OR_RETURN(zk_, ZkSession::Connect(zo));
    ASSIGN_OR_RETURN(store_, NewZkStateStore(zk_.get(), address.path));
    zk_->OnEvent(std::move(on_zk_event));
    LOG(INFO) << "coordinator " << endpoint << ": ZooKeeper " << address.hosts << " session "
              << zk_->session_timeout_ms() << " ms, job " << address.path
              << "; standby until elected";
    ASSIGN_OR_RETURN(election_, LeaderElection::Start(zk_.get(), address.path, endpoint,
                                                      std::move(on_elected)));
    return Status::OK();
  }
  if (!options.data_dir.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorStateStore> store,
                     NewRocksDbStateStore(options.data_dir, options.file_system));
    OpenWith(std::move(store), /*coordinated=*/false);
  } else {
    OpenWith(NewMemoryStateStore(), /*coordinated=*/false);
  }
  return Status::OK();
}

void Leadership::OpenWith(std::unique_ptr<CoordinatorStateStore> store, bool coordinated) {
  CHECK(store_ == nullptr) << "Leadership opened twice";
  store_ = std::move(store);
  coordinated_ = coordinated;
}

StatusOr<StateRecords> Leadership::Claim() {
  CHECK(store_ != nullptr && !stepped_down_);
  ASSIGN_OR_RETURN(ClaimedState claimed, store_->Claim());
  term_ = claimed.term;
  return std::move(claimed.records);
}

void Leadership::Lead(StateRecords written) {
  CHECK(term_ > 0 && !stepped_down_);
  written_ = std::move(written);
  leading_.store(true);
}

Status Leadership::Write(StateRecords snapshot) {
  CHECK(leading_.load());
  StateRecords changed;
  for (auto& [name, value] : snapshot) {
    auto it = written_.find(name);
    if (it == written_.end() || it->second != value) changed[name] = std::move(value);
  }
  if (changed.empty()) return Status::OK();
  RETURN_IF_ERROR(store_->Write(changed));
  for (auto& [name, value] : changed) written_[name] = std::move(value);
  return Status::OK();
}

bool Leadership::StepDown(bool rejoin) {
  if (stepped_down_) return false;
  stepped_down_ = true;
  rejoin_ = rejoin && coordinated_;
  suspended_ = false;
  leading_.store(false);
  return true;
}

Leadership::ZkChange Leadership::OnZkEvent(ZkEvent e) {
  switch (e) {
    case ZkEvent::kExpired:
      return ZkChange::kExpired;
    case ZkEvent::kDisconnected:
      // Another coordinator may lead once the session expires: stop serving
      // at once. But the session (and with it this leader's election node,
      // which keeps every other candidate from leading) may well survive a
      // short disconnection: stepping down here would hand the job to a
      // standby and make a second term out of one takeover. So it only
      // pauses, and resumes the same term if it reconnects within its
      // session; if the session expired instead, kExpired steps it down.
      if (!leading_.load()) return ZkChange::kNone;
      suspended_ = true;
      leading_.store(false);
      return ZkChange::kSuspended;
    case ZkEvent::kReconnected:
      if (!suspended_ || stepped_down_) return ZkChange::kNone;
      suspended_ = false;
      leading_.store(true);
      return ZkChange::kResumed;
  }
  return ZkChange::kNone;
}

std::string Leadership::leader_endpoint() const {
  return election_ != nullptr ? election_->leader_endpoint() : "";
}

std::vector<std::string> Leadership::candidates() const {
  return election_ != nullptr ? election_->candidates() : std::vector<std::string>{};
}

}  // namespace relaxps
