// LrSchedule: how a table's learning rate changes with the clock.
//
// The servers apply a push (or a BSP round) of clock c with the rate
// optimizer.lr * Factor(c). The factor is a pure function of the push's
// clock and of the table record every server holds, so every shard of a
// table switches rate at the same clock, and a restored or replicated shard
// applies the same rate.
//
//   constant   1
//   step       step_gamma ^ floor((c - warmup_clocks) / step_every_clocks)
//   cosine     min_factor + (1 - min_factor) * (1 + cos(pi * t)) / 2,
//              t = min(1, (c - warmup_clocks) / decay_clocks)
// With warmup_clocks = w > 0, clocks c < w use (c + 1) / w instead (a
// linear warm-up to the full rate at clock w - 1).
//
// Thread-safety: a plain value.
#ifndef RELAXPS_LR_SCHEDULE_H_
#define RELAXPS_LR_SCHEDULE_H_

#include <cstdint>
#include <string>

#include "relaxps/status.h"

namespace relaxps {

struct LrSchedule {
  enum class Kind { kConstant = 0, kStep = 1, kCosine = 2 };
  Kind kind = Kind::kConstant;
  // Linear warm-up over this many clocks (0: none).
  int64_t warmup_clocks = 0;
  // kStep: the rate is multiplied by step_gamma every step_every_clocks.
  int64_t step_every_clocks = 0;
  float step_gamma = 0.1f;
  // kCosine: decays from the full rate to min_factor of it over
  // decay_clocks, then stays there.
  int64_t decay_clocks = 0;
  float min_factor = 0.0f;

  // The factor on optimizer.lr for a push of clock `clock` (>= 0).
  double Factor(int64_t clock) const;
  // InvalidArgument for negative lengths, a step schedule without a period,
  // gamma or min_factor outside (0, 1] / [0, 1].
  Status Validate() const;
};

// Parses "constant", "step:every=N,gamma=G", "cosine:clocks=N[,min=M]", each
// with an optional ",warmup=W" (or "warmup=W" alone: constant after a
// warm-up). InvalidArgument, naming the problem, otherwise.
StatusOr<LrSchedule> ParseLrSchedule(const std::string& spec);

}  // namespace relaxps

#endif  // RELAXPS_LR_SCHEDULE_H_
