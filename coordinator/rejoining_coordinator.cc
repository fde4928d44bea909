// A ZooKeeper-coordinated coordinator that outlives its leadership: when it
// is deposed (its ZooKeeper session expired or dropped, e.g. after a
// SIGSTOP, or another coordinator claimed the state store), the
// CoordinatorImpl that led is thrown away whole (its membership, map and
// in-flight work belong to a term that is over) and a fresh one binds the
// same endpoint, with a new ZooKeeper session, as a standby: it redirects
// clients to the new leader and may lead again after it.
#include "coordinator/internal/coordinator_impl.h"

#include <chrono>
#include <thread>

namespace relaxps {
namespace coordinator_internal {
namespace {

class RejoiningCoordinator final : public Coordinator {
 public:
  RejoiningCoordinator(const CoordinatorOptions& options, std::unique_ptr<CoordinatorImpl> first)
      : options_(options),
        bound_(first->bound_endpoint()),
        endpoint_(first->endpoint()),
        current_(std::move(first)) {
    if (options_.metrics == nullptr) return;
    // One collector for the process: GET_STATUS's figures of whichever
    // CoordinatorImpl runs now, built on its loop (Run()'s thread, which is
    // also where current_ changes, so it cannot change under the task).
    options_.metrics->AddCollector(metrics::PostedCollector(
        [this](std::function<void()> task) {
          MutexLock l(&mu_);
          if (current_ != nullptr) current_->Post(std::move(task));
        },
        [this](metrics::MetricSink* sink) {
          CoordinatorImpl* c;
          {
            MutexLock l(&mu_);
            c = current_.get();
          }
          if (c != nullptr) CollectStatusMetrics(c->StatusForMetrics(), sink);
        },
        CoordinatorMetrics::kCollectTimeoutMs));
  }

  const std::string& endpoint() const override { return endpoint_; }
  bool leading() const override {
    MutexLock l(&mu_);
    return current_ != nullptr && current_->leading();
  }

  void Run() override {
    while (true) {
      CoordinatorImpl* c;
      {
        MutexLock l(&mu_);
        c = current_.get();
      }
      c->Run();
      result_ = c->result();
      job_end_ = c->job_end();
      if (stop_.load() || !c->rejoins()) return;
      LOG(WARNING) << "coordinator " << endpoint_ << " was deposed (" << job_end_.reason
                   << "); joining the election again as a standby";
      std::unique_ptr<CoordinatorImpl> old;
      {
        MutexLock l(&mu_);
        old = std::move(current_);
      }
      old.reset();  // Unbinds, ends its ZooKeeper session, joins its threads.
      std::unique_ptr<CoordinatorImpl> next = StartStandby();
      if (next == nullptr) return;  // Stopped meanwhile.
      MutexLock l(&mu_);
      current_ = std::move(next);
      if (stop_.load()) current_->Stop();
    }
  }

  void Stop() override {
    stop_.store(true);
    MutexLock l(&mu_);
    if (current_ != nullptr) current_->Stop();
  }
  Status result() const override { return result_; }
  JobEnd job_end() const override { return job_end_; }

 private:
  // A new standby on bound_; retried every second (ZooKeeper may be
  // unreachable, the port briefly held) until it starts or Stop() is called.
  std::unique_ptr<CoordinatorImpl> StartStandby() {
    CoordinatorOptions o = options_;
    o.bind = bound_;
    for (int attempt = 0; !stop_.load(); ++attempt) {
      auto next = std::make_unique<CoordinatorImpl>(o, /*status_collector=*/false);
      Status s = next->Init();
      if (s.ok()) return next;
      next.reset();
      if (attempt % 10 == 0) LOG(WARNING) << "coordinator " << endpoint_ << " rejoining: " << s;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    return nullptr;
  }

  // Constant after construction.
  const CoordinatorOptions options_;
  const std::string bound_;     // What the first one bound (a concrete port).
  const std::string endpoint_;  // What it advertised.
  std::atomic<bool> stop_{false};
  // Run()'s thread only.
  Status result_;
  JobEnd job_end_;
  mutable Mutex mu_;
  std::unique_ptr<CoordinatorImpl> current_ GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Coordinator> RejoinWhenDeposed(const CoordinatorOptions& options,
                                               std::unique_ptr<CoordinatorImpl> first) {
  return std::make_unique<RejoiningCoordinator>(options, std::move(first));
}

}  // namespace coordinator_internal
}  // namespace relaxps
