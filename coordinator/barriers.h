// Barriers: the coordinator's start barrier and Client::Barrier() rounds.
//
// Start barrier: under BSP and SSP with --num_workers=N > 0, a worker's
// Connect() waits (START_BARRIER) until N workers are live at once, so that
// no worker runs rounds alone while the others are still starting. The
// barrier opens once and stays open: a worker that joins later (a
// replacement, an extra worker) does not wait and starts at the slowest live
// worker's clock.
//
// Worker barriers: the g-th barrier of the job is passed when every live
// worker has arrived at it (a worker that dies or leaves is no longer waited
// for). A worker that registers after barrier g was passed starts at g + 1
// (RegisterReply.barrier_generation), so a late joiner never blocks the
// others at a barrier they already passed.
//
// Held requests are answered through their Release callback: OK when the
// barrier is passed, DeadlineExceeded (with who was missing) at their
// deadline.
//
// Thread-safety: not synchronized; used on the coordinator's loop thread.
#ifndef RELAXPS_COORDINATOR_BARRIERS_H_
#define RELAXPS_COORDINATOR_BARRIERS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "common/status.h"

namespace relaxps {

class Barriers {
 public:
  using Release = std::function<void(const Status&)>;

  // `start_workers`: workers the start barrier waits for (0: open at once).
  explicit Barriers(int start_workers) : start_workers_(start_workers) {}

  // Holds `release` until the start barrier opens or `deadline_ms` passes.
  void WaitStart(int64_t deadline_ms, Release release);
  // `worker` arrived at barrier `generation`; held until every live worker
  // has, or `deadline_ms`. A generation already passed is released at once;
  // one ahead of the current is InvalidArgument.
  void Arrive(int worker, int64_t generation, int64_t deadline_ms, Release release);
  // The live worker set changed or time passed: releases what is complete
  // and expires what waited past its deadline.
  void Update(const std::vector<int>& live_workers, int64_t now_ms);

  bool start_open() const { return start_open_; }
  // Barriers passed so far (the generation a new worker starts at).
  int64_t generation() const { return generation_; }

 private:
  struct Held {
    int64_t deadline_ms;
    Release release;
  };

  const int start_workers_;
  bool start_open_ = start_workers_ <= 0;
  std::vector<Held> start_waiters_;
  int64_t generation_ = 0;
  std::map<int, Held> arrived_;  // Worker -> its held request, this generation.
  std::vector<int> live_;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_BARRIERS_H_
