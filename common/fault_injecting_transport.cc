#include "common/fault_injecting_transport.h"

#include "common/thread_annotations.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace relaxps {
namespace {

class FaultInjectingTransportImpl final : public FaultInjectingTransport {
 public:
  FaultInjectingTransportImpl(std::unique_ptr<Transport> base, const FaultOptions& faults)
      : base_(std::move(base)), faults_(faults), rng_(faults.seed),
        scheduler_([this] { SchedulerLoop(); }) {}

  ~FaultInjectingTransportImpl() override {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    cv_.notify_all();
    scheduler_.join();
    // Requests still waiting for their (fake) deadline or delayed send fail.
    for (auto& [when, task] : tasks_) task(/*shutdown=*/true);
    tasks_.clear();
  }

  using Transport::Connect;
  int Connect(const std::string& endpoint, const std::string& curve_server_key) override {
    return base_->Connect(endpoint, curve_server_key);
  }

  void Call(int peer, Message request, int timeout_ms, ReplyCallback done) override {
    if (timeout_ms <= 0) timeout_ms = 10000;
    bool drop, dup;
    {
      MutexLock l(&mu_);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      // Draw both every time so one fault's probability never shifts the
      // sequence of the other.
      const double d1 = u(rng_), d2 = u(rng_);
      drop = partitioned_ || (faults_.drop_prob > 0 && d1 < faults_.drop_prob);
      dup = faults_.duplicate_prob > 0 && d2 < faults_.duplicate_prob;
    }
    if (drop) {
      dropped_.fetch_add(1);
      Schedule(timeout_ms, [done = std::move(done)](bool) {
        done(DeadlineExceededError("request dropped by fault injection"), Message());
      });
      return;
    }
    if (dup) {
      Message copy;
      copy.header = request.header;
      for (const Frame& f : request.frames) copy.frames.push_back(Frame::Copy(f.data(), f.size()));
      Forward(peer, std::move(copy), timeout_ms, [](const Status&, Message&&) {});
    }
    Forward(peer, std::move(request), timeout_ms, std::move(done));
  }

  void CancelAll(const Status& status) override { base_->CancelAll(status); }
  void CancelPeer(int peer, const Status& status) override { base_->CancelPeer(peer, status); }

  TransportStats stats() const override {
    TransportStats s = base_->stats();
    s.dropped_by_faults += dropped_.load();
    return s;
  }

  void SetPartitioned(bool partitioned) override {
    MutexLock l(&mu_);
    partitioned_ = partitioned;
  }

 private:
  using Task = std::function<void(bool shutdown)>;
  using Clock = std::chrono::steady_clock;

  void Forward(int peer, Message request, int timeout_ms, ReplyCallback done) {
    if (faults_.delay_ms <= 0) {
      base_->Call(peer, std::move(request), timeout_ms, std::move(done));
      return;
    }
    auto shared = std::make_shared<Message>(std::move(request));
    Schedule(faults_.delay_ms, [this, peer, shared, timeout_ms,
                                done = std::move(done)](bool shutdown) mutable {
      if (shutdown) {
        done(AbortedError("transport is shutting down"), Message());
        return;
      }
      base_->Call(peer, std::move(*shared), std::max(1, timeout_ms - faults_.delay_ms),
                  std::move(done));
    });
  }

  void Schedule(int after_ms, Task task) {
    {
      MutexLock l(&mu_);
      // Full clock precision: a due time in whole milliseconds (the current
      // one truncated) made a delay up to 1 ms shorter than asked.
      tasks_.emplace(Clock::now() + std::chrono::milliseconds(after_ms), std::move(task));
    }
    cv_.notify_all();
  }

  void SchedulerLoop() {
    while (true) {
      Task task;
      {
        MutexLock l(&mu_);
        if (stop_) return;
        if (tasks_.empty()) {
          cv_.wait(mu_);
          continue;
        }
        const Clock::time_point due = tasks_.begin()->first;
        if (Clock::now() < due) {
          cv_.wait_until(mu_, due);
          continue;
        }
        task = std::move(tasks_.begin()->second);
        tasks_.erase(tasks_.begin());
      }
      task(/*shutdown=*/false);
    }
  }

  // Constant after construction.
  const std::unique_ptr<Transport> base_;
  const FaultOptions faults_;

  Mutex mu_;
  std::condition_variable_any cv_;
  std::mt19937_64 rng_ GUARDED_BY(mu_);
  bool partitioned_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::multimap<Clock::time_point, Task> tasks_ GUARDED_BY(mu_);  // Due time -> task.
  std::atomic<uint64_t> dropped_{0};
  std::thread scheduler_;  // Last: starts once the members above exist.
};

}  // namespace

std::unique_ptr<FaultInjectingTransport> FaultInjectingTransport::Wrap(
    std::unique_ptr<Transport> base, const FaultOptions& faults) {
  return std::make_unique<FaultInjectingTransportImpl>(std::move(base), faults);
}

}  // namespace relaxps
