#include "coordinator/leader_election.h"

#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace relaxps {

LeaderElection::LeaderElection(ZkSession* session, std::string path, std::string endpoint,
                               std::function<void()> on_elected)
    : session_(session),
      dir_(std::move(path) + "/election"),
      endpoint_(std::move(endpoint)),
      on_elected_(std::move(on_elected)) {}

StatusOr<std::unique_ptr<LeaderElection>> LeaderElection::Start(
    ZkSession* session, const std::string& path, const std::string& endpoint,
    std::function<void()> on_elected) {
  std::unique_ptr<LeaderElection> e(
      new LeaderElection(session, path, endpoint, std::move(on_elected)));
  // Watches may fire after the election is gone: they hold a weak_ptr.
  e->watch_ctx_ = session->WatchContext([weak = std::weak_ptr<Signal>(e->signal_)] {
    if (std::shared_ptr<Signal> s = weak.lock()) {
      MutexLock l(&s->mu);
      s->woken = true;
      s->cv.notify_all();
    }
  });
  RETURN_IF_ERROR(session->EnsurePath(e->dir_));
  char created[1024];
  const std::string prefix = e->dir_ + "/n_";
  const int rc = zoo_create(session->handle(), prefix.c_str(), endpoint.data(),
                            static_cast<int>(endpoint.size()), &ZOO_OPEN_ACL_UNSAFE,
                            ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof(created));
  RETURN_IF_ERROR(ZkStatus(rc, "joining the election under " + e->dir_));
  e->node_ = std::string(created).substr(e->dir_.size() + 1);
  LOG(INFO) << "coordinator " << endpoint << " is candidate " << e->node_ << " under " << e->dir_;
  e->thread_ = std::thread([raw = e.get()] { raw->Loop(); });
  return e;
}

LeaderElection::~LeaderElection() {
  {
    MutexLock l(&signal_->mu);
    signal_->stop = true;
    signal_->cv.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (!session_->expired()) {
    zoo_delete(session_->handle(), (dir_ + "/" + node_).c_str(), -1);  // Best effort.
  }
}

std::string LeaderElection::leader_endpoint() const {
  MutexLock l(&signal_->mu);
  return signal_->leader;
}

std::vector<std::string> LeaderElection::candidates() const {
  MutexLock l(&signal_->mu);
  return signal_->candidates;
}

StatusOr<bool> LeaderElection::Check(bool elected) {
  // A leader watches the children (the candidate list it hands to clients);
  // a standby its predecessor only (no herd when the leader goes).
  StatusOr<std::vector<ZkCandidate>> listed =
      ListCandidates(session_, dir_, elected ? watch_ctx_ : nullptr);
  RETURN_IF_ERROR(listed.status());
  const std::vector<ZkCandidate>& nodes = *listed;
  auto mine = std::find_if(nodes.begin(), nodes.end(),
                           [&](const ZkCandidate& c) { return c.node == node_; });
  if (mine == nodes.end()) {
    return AbortedError("election node " + dir_ + "/" + node_ + " is gone (session expired)");
  }
  {
    MutexLock l(&signal_->mu);
    signal_->leader = nodes.front().endpoint;
    signal_->candidates.clear();
    for (const ZkCandidate& c : nodes) signal_->candidates.push_back(c.endpoint);
  }
  if (mine == nodes.begin() && !elected) return true;
  if (!elected) {
    const std::string pred = dir_ + "/" + (mine - 1)->node;
    Stat stat;
    const int rc =
        zoo_wexists(session_->handle(), pred.c_str(), &ZkSession::WakeWatch, watch_ctx_, &stat);
    if (rc == ZNONODE) {
      // Gone already; the watch stays set on the absent node and may fire
      // later (it only wakes this loop once more).
      return false;
    }
    if (rc != ZOK) return ZkStatus(rc, "watching " + pred);
  }
  std::unique_lock<Mutex> l(signal_->mu);
  // The poll bounds the wait should a watch be lost with a reconnection, and
  // refreshes a standby's view of the leader and the candidates.
  signal_->cv.wait_for(l, std::chrono::milliseconds(1000),
                       [&] { return signal_->stop || signal_->woken; });
  signal_->woken = false;
  return false;
}

void LeaderElection::Loop() {
  bool elected = false;
  while (true) {
    {
      MutexLock l(&signal_->mu);
      if (signal_->stop) return;
    }
    StatusOr<bool> lead = Check(elected);
    if (lead.ok() && *lead) {
      LOG(INFO) << "coordinator " << endpoint_ << " (" << node_ << ") leads the election";
      elected = true;
      on_elected_();
      continue;  // Keeps the candidate list fresh while it leads.
    }
    if (!lead.ok()) {
      if (session_->expired()) {
        LOG(WARNING) << "leaving the election: " << lead.status();
        return;
      }
      LOG_EVERY_T(WARNING, 1) << "election: " << lead.status();
      std::unique_lock<Mutex> l(signal_->mu);
      signal_->cv.wait_for(l, std::chrono::milliseconds(200), [&] { return signal_->stop; });
    }
  }
}

}  // namespace relaxps
