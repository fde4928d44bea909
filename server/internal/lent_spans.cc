#include "server/internal/lent_spans.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <utility>

namespace relaxps {
namespace server_internal {

struct LentSpans::Core {
  std::mutex mu;
  std::condition_variable returned;
  std::map<uint64_t, Span> out;  // Lent now, by handle number. Guarded by mu.
  uint64_t next_id = 0;          // Guarded by mu.
  std::vector<Span> torn;        // Guarded by mu.
  Stats stats;                   // Guarded by mu.
  // out.size(), read without the lock by the writers' fast path.
  std::atomic<size_t> lent{0};

  void Return(uint64_t id) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (out.erase(id) == 0) return;  // Torn: let go of already.
      lent.store(out.size(), std::memory_order_release);
    }
    returned.notify_all();
  }
};

// Gives its span back when the last reference is dropped.
struct LentSpans::Handle {
  Handle(std::shared_ptr<Core> c, uint64_t i) : core(std::move(c)), id(i) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { core->Return(id); }

  const std::shared_ptr<Core> core;
  const uint64_t id;
};

namespace {

bool Overlap(const LentSpans::Span& s, uint64_t offset, uint64_t n) {
  return s.offset < offset + n && offset < s.offset + s.count;
}

}  // namespace

LentSpans::LentSpans() : core_(std::make_shared<Core>()) {}

LentSpans::~LentSpans() = default;

std::shared_ptr<void> LentSpans::Lend(uint64_t offset, uint64_t n) {
  std::lock_guard<std::mutex> lock(core_->mu);
  const uint64_t id = core_->next_id++;
  core_->out.emplace(id, Span{offset, n});
  core_->lent.store(core_->out.size(), std::memory_order_release);
  ++core_->stats.lent;
  core_->stats.lent_keys += n;
  return std::make_shared<Handle>(core_, id);
}

void LentSpans::WaitUntilReturned(uint64_t offset, uint64_t n, int64_t wait_ms) {
  if (core_->lent.load(std::memory_order_acquire) == 0 || n == 0) return;
  Core& c = *core_;
  std::unique_lock<std::mutex> lock(c.mu);
  auto overlapping = [&] {
    return std::any_of(c.out.begin(), c.out.end(),
                       [&](const auto& entry) { return Overlap(entry.second, offset, n); });
  };
  if (!overlapping()) return;
  const auto start = std::chrono::steady_clock::now();
  ++c.stats.waits;
  const bool back = c.returned.wait_until(
      lock, start + std::chrono::milliseconds(std::max<int64_t>(0, wait_ms)),
      [&] { return !overlapping(); });
  c.stats.wait_us += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                               std::chrono::steady_clock::now() - start)
                                               .count());
  if (back) return;
  for (auto it = c.out.begin(); it != c.out.end();) {
    if (Overlap(it->second, offset, n)) {
      c.torn.push_back(it->second);
      ++c.stats.torn;
      it = c.out.erase(it);
    } else {
      ++it;
    }
  }
  c.lent.store(c.out.size(), std::memory_order_release);
}

bool LentSpans::Any() const { return core_->lent.load(std::memory_order_acquire) > 0; }

std::vector<LentSpans::Span> LentSpans::TakeTorn() {
  std::vector<Span> torn;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    torn.swap(core_->torn);
  }
  std::sort(torn.begin(), torn.end(),
            [](const Span& a, const Span& b) { return a.offset < b.offset; });
  return torn;
}

LentSpans::Stats LentSpans::stats() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->stats;
}

}  // namespace server_internal
}  // namespace relaxps
