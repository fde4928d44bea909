#include "server/internal/consistency_gate.h"

#include <utility>

#include "server/internal/waiters.h"

namespace relaxps {
namespace server_internal {

ConsistencyGate::ConsistencyGate(const ConsistencyPolicy* policy, std::string label, Hooks hooks)
    : policy_(policy), label_(std::move(label)), hooks_(std::move(hooks)) {
  CHECK(hooks_.visible_clock) << "a consistency gate needs the owner's visible clock";
  CHECK(!aggregates() || hooks_.complete_rounds) << "a BSP gate needs a complete_rounds hook";
}

int64_t ConsistencyGate::RequiredClock(int64_t worker_clock) const {
  return policy_ != nullptr ? policy_->RequiredMinClock(worker_clock)
                            : std::numeric_limits<int64_t>::min();
}

void ConsistencyGate::Park(int64_t required, int64_t deadline_ms, Answer answer) {
  waiters_.push_back(Waiter{required, deadline_ms, std::move(answer)});
}

void ConsistencyGate::ServeWaiters() {
  if (waiters_.empty()) return;
  const int64_t visible = hooks_.visible_clock();
  std::vector<Waiter> still;
  std::vector<Waiter> ready;
  for (Waiter& w : waiters_) (w.required <= visible ? ready : still).push_back(std::move(w));
  waiters_.swap(still);
  for (Waiter& w : ready) w.answer(Status::OK(), visible);
}

void ConsistencyGate::ExpireWaiters(int64_t now_ms) {
  if (waiters_.empty()) return;
  for (Waiter& w : TakeExpired(&waiters_, now_ms)) {
    const int64_t visible = hooks_.visible_clock();
    w.answer(DeadlineExceededError("pull" + label_ + " waited for clock " +
                                   std::to_string(w.required) +
                                   " but the slowest live worker is at " +
                                   std::to_string(visible)),
             visible);
  }
}

void ConsistencyGate::SetLiveWorkers(const std::vector<int>& ids,
                                     const std::vector<int64_t>& clocks) {
  clocks_.SetLive(ids, clocks);
  ClocksMoved();
}

void ConsistencyGate::HoldWorkerClocks(const std::vector<int>& ids, int64_t start) {
  clocks_.Hold(ids, start);
}

void ConsistencyGate::ReleaseWorkerClock(int worker) {
  if (clocks_.Release(worker)) ClocksMoved();
}

void ConsistencyGate::AdvanceClock(int worker, int64_t clock) {
  clocks_.Advance(worker, clock);
  ClocksMoved();
}

size_t ConsistencyGate::RoundWorkers(const std::vector<int>& contributors) const {
  size_t n = clocks_.size();
  for (int w : contributors) n += clocks_.IsLive(w) ? 0 : 1;
  return n > 0 ? n : 1;
}

void ConsistencyGate::ClocksMoved() {
  if (aggregates()) {
    Status s = hooks_.complete_rounds();
    if (!s.ok()) LOG(ERROR) << "completing BSP rounds" << label_ << ": " << s;
  }
  ServeWaiters();
}

}  // namespace server_internal
}  // namespace relaxps
