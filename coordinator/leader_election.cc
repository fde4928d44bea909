#include "coordinator/leader_election.h"

#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace relaxps {
namespace {

// A one-shot watch: wakes the election (if it still exists) and frees its
// context.
template <typename Signal>
void OnWatch(zhandle_t*, int, int, const char*, void* ctx) {
  auto* ref = static_cast<std::weak_ptr<Signal>*>(ctx);
  if (std::shared_ptr<Signal> s = ref->lock()) {
    std::lock_guard<Mutex> l(s->mu);
    s->woken = true;
    s->cv.notify_all();
  }
  delete ref;
}

}  // namespace

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

StatusOr<bool> LeaderElection::Check() {
  String_vector children{0, nullptr};
  int rc = zoo_get_children(session_->handle(), dir_.c_str(), 0, &children);
  RETURN_IF_ERROR(ZkStatus(rc, "listing " + dir_));
  std::vector<std::string> nodes;
  for (int i = 0; i < children.count; ++i) nodes.emplace_back(children.data[i]);
  deallocate_String_vector(&children);
  // Sequence numbers are zero-padded: names sort in creation order.
  std::sort(nodes.begin(), nodes.end());
  auto mine = std::find(nodes.begin(), nodes.end(), node_);
  if (mine == nodes.end()) {
    return AbortedError("election node " + dir_ + "/" + node_ + " is gone (session expired)");
  }
  char buf[1024];
  int len = sizeof(buf);
  rc = zoo_get(session_->handle(), (dir_ + "/" + nodes.front()).c_str(), 0, buf, &len, nullptr);
  if (rc == ZOK) {
    MutexLock l(&signal_->mu);
    signal_->leader.assign(buf, std::max(0, len));
  }
  if (mine == nodes.begin()) return true;
  // Watch the predecessor only.
  const std::string pred = dir_ + "/" + *(mine - 1);
  auto* ref = new std::weak_ptr<Signal>(signal_);
  Stat stat;
  rc = zoo_wexists(session_->handle(), pred.c_str(), OnWatch<Signal>, ref, &stat);
  if (rc == ZNONODE) {
    // Gone already; the watch stays set on the absent node and may fire
    // later (it only wakes this loop once more).
    return false;
  }
  if (rc != ZOK) {
    delete ref;
    return ZkStatus(rc, "watching " + pred);
  }
  std::unique_lock<Mutex> l(signal_->mu);
  // The poll bounds the wait should a watch be lost with a reconnection.
  signal_->cv.wait_for(l, std::chrono::milliseconds(1000),
                       [&] { return signal_->stop || signal_->woken; });
  signal_->woken = false;
  return false;
}

void LeaderElection::Loop() {
  while (true) {
    {
      MutexLock l(&signal_->mu);
      if (signal_->stop) return;
    }
    StatusOr<bool> lead = Check();
    if (lead.ok() && *lead) {
      LOG(INFO) << "coordinator " << endpoint_ << " (" << node_ << ") leads the election";
      on_elected_();
      return;
    }
    if (!lead.ok()) {
      if (session_->expired()) {
        LOG(ERROR) << "leaving the election: " << lead.status();
        return;
      }
      LOG_EVERY_T(WARNING, 1) << "election: " << lead.status();
      std::unique_lock<Mutex> l(signal_->mu);
      signal_->cv.wait_for(l, std::chrono::milliseconds(200), [&] { return signal_->stop; });
    }
  }
}

}  // namespace relaxps
