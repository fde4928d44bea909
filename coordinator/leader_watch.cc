#include "coordinator/leader_watch.h"

#include <zookeeper/zookeeper.h>

#include <chrono>
#include <condition_variable>
#include <thread>

#include "common/thread_annotations.h"
#include "coordinator/zk_session.h"

namespace relaxps {

class LeaderWatch::Impl {
 public:
  Impl(LeaderWatchOptions options, ZkAddress address)
      : options_(std::move(options)), address_(std::move(address)),
        dir_(address_.path + "/election") {}

  // A new session, whose watches wake this watch (if it still exists).
  Status Connect(int timeout_ms, const std::weak_ptr<Impl>& self) {
    ZkSessionOptions zo;
    zo.hosts = address_.hosts;
    zo.session_timeout_ms = options_.session_timeout_ms;
    zo.connect_timeout_ms = timeout_ms;
    ASSIGN_OR_RETURN(session_, ZkSession::Connect(zo));
    watch_ctx_ = session_->WatchContext([self] {
      if (std::shared_ptr<Impl> s = self.lock()) {
        MutexLock l(&s->mu_);
        s->woken_ = true;
        s->cv_.notify_all();
      }
    });
    return Status::OK();
  }

  void Run(const std::weak_ptr<Impl>& self) {
    while (true) {
      {
        MutexLock l(&mu_);
        if (stop_) return;
      }
      if (session_ == nullptr || session_->expired()) {
        session_.reset();
        if (Status s = Connect(2000, self); !s.ok()) {
          LOG_EVERY_T(WARNING, 5) << "following the coordinator leader: " << s;
          Wait(1000);
          continue;
        }
        LOG(INFO) << "following the coordinator leader under " << dir_ << " with a new session";
      }
      StatusOr<std::vector<ZkCandidate>> nodes = ListCandidates(session_.get(), dir_, watch_ctx_);
      if (nodes.ok() && !nodes->empty()) Update(nodes->front().endpoint);
      if (!nodes.ok()) {
        LOG_EVERY_T(WARNING, 5) << "reading the coordinator leader: " << nodes.status();
      }
      Wait(1000);
    }
  }

  void Update(const std::string& leader) {
    {
      MutexLock l(&mu_);
      if (leader == leader_) return;
      leader_ = leader;
      cv_.notify_all();
    }
    LOG(INFO) << "the coordinator leader is " << leader << " (ZooKeeper " << dir_ << ")";
    if (options_.on_leader) options_.on_leader(leader);
  }

  void Wait(int ms) {
    std::unique_lock<Mutex> l(mu_);
    cv_.wait_for(l, std::chrono::milliseconds(ms), [&] { return stop_ || woken_; });
    woken_ = false;
  }

  void Stop() {
    MutexLock l(&mu_);
    stop_ = true;
    cv_.notify_all();
  }

  std::string leader() const {
    MutexLock l(&mu_);
    return leader_;
  }

  StatusOr<std::string> WaitForLeader(int timeout_ms) const {
    std::unique_lock<Mutex> l(mu_);
    cv_.wait_for(l, std::chrono::milliseconds(timeout_ms),
                 [&] { return stop_ || !leader_.empty(); });
    if (!leader_.empty()) return leader_;
    return DeadlineExceededError("no coordinator leads under zk://" + address_.hosts + dir_ +
                                 " after " + std::to_string(timeout_ms) + " ms");
  }

  std::thread thread;

 private:
  // Constant after construction.
  const LeaderWatchOptions options_;
  const ZkAddress address_;
  const std::string dir_;
  // The watch thread's (and Connect()'s before it starts).
  std::unique_ptr<ZkSession> session_;
  void* watch_ctx_ = nullptr;  // session_'s WatchContext.

  mutable Mutex mu_;
  mutable std::condition_variable_any cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool woken_ GUARDED_BY(mu_) = false;
  std::string leader_ GUARDED_BY(mu_);
};

StatusOr<std::unique_ptr<LeaderWatch>> LeaderWatch::Start(LeaderWatchOptions options,
                                                          int connect_timeout_ms) {
  ASSIGN_OR_RETURN(ZkAddress address, ParseZkAddress(options.coordination));
  auto impl = std::make_shared<Impl>(std::move(options), std::move(address));
  std::weak_ptr<Impl> weak = impl;
  RETURN_IF_ERROR(impl->Connect(connect_timeout_ms, weak));
  impl->thread = std::thread([raw = impl.get(), weak] { raw->Run(weak); });
  return std::unique_ptr<LeaderWatch>(new LeaderWatch(std::move(impl)));
}

LeaderWatch::~LeaderWatch() {
  impl_->Stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::string LeaderWatch::leader() const { return impl_->leader(); }

StatusOr<std::string> LeaderWatch::WaitForLeader(int timeout_ms) const {
  return impl_->WaitForLeader(timeout_ms);
}

}  // namespace relaxps
