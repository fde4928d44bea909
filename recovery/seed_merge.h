// Seed merge: how a re-registered server's empty dense range is rebuilt from
// the workers' copies under --recovery=stateless.
//
// While the range's server was lost, each live worker trained on its own
// copy x_w of the range, starting from the parameters b_w it last pulled (at
// base clock p_w). It reports x_w, its accumulated change d_w = x_w - b_w,
// its clock c_w and its local step count. The merged range is
//
//   x = sum_w e_w * x_w + sum_w (a_w - e_w) * d_w
//     = sum_w e_w * b_w + sum_w a_w * d_w
//
// where the seeding rule picks the base weights e (summing to 1) and the
// merge rule picks how much of each worker's change a_w survives. Every
// change therefore counts exactly a_w times: the seeding worker's own
// changes, already inside its copy, are not added twice.
//
// Seeding rules:
//   kFreshest: e = 1 for the freshest copy (highest clock, then most local
//     steps, then lowest worker id), 0 for the others.
//   kWeightedAverage: e_w proportional to 1 / (1 + c_max - c_w): fresher
//     copies weigh more; equal clocks give the plain average.
// Merge rules (s is the freshest worker):
//   kStaleness: staleness-aware async SGD (Zhang et al., IJCAI'16): a change
//     is scaled by 1 / its staleness, the clocks of progress of the seed it
//     did not see: a_s = 1, a_w = 1 / max(1, c_s - p_w).
//   kAverage: local SGD / model averaging: a_w = 1 / n for every copy.
//   kSum: TTF's blind sum, a_w = 1 (kept as a baseline to measure against).
// The merged range reflects max_w c_w: clocks never roll back.
//
// Optimizer slot: a worker that trained a momentum table locally reports its
// velocity v_w (zero when the range went local). The merged velocity is
// sum_w e_w v_w, with the seeding weights: the velocity belongs to the
// trajectory the seed continues. It is rebuilt only if every copy with
// e_w > 0 has one; otherwise the server resets the slot.
//
// Change-only copies (hybrid: a worker that never pulled the range trained
// on the table's initializer values, from the clock at which the range was
// lost, its p_w): their change counts with its a_w, but they are never
// seeds (e_w = 0) and the freshest copy is chosen among the real ones. If
// every copy is change-only there is no base to seed from: the server keeps
// what it loaded (its checkpoint or the initializer) and adds sum_w a_w d_w,
// as for sparse rows (MergeChanges).
//
// Thread-safety: pure functions.
#ifndef RELAXPS_RECOVERY_SEED_MERGE_H_
#define RELAXPS_RECOVERY_SEED_MERGE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace relaxps {

enum class SeedRule { kFreshest, kWeightedAverage };
enum class MergeRule { kStaleness, kAverage, kSum };

// "freshest" | "average"; InvalidArgument naming the value otherwise.
StatusOr<SeedRule> ParseSeedRule(const std::string& name);
const char* SeedRuleName(SeedRule rule);
// "staleness" | "average" | "sum".
StatusOr<MergeRule> ParseMergeRule(const std::string& name);
const char* MergeRuleName(MergeRule rule);

// One worker's copy of a range. Pointers are not owned and hold n floats.
struct WorkerCopy {
  int worker = -1;
  int64_t clock = 0;        // c_w: the worker's clock when it reported.
  int64_t base_clock = 0;   // p_w: clock of the parameters it last pulled.
  int64_t local_steps = 0;  // Updates it applied locally since then.
  const float* params = nullptr;  // x_w.
  const float* delta = nullptr;   // d_w.
  bool change_only = false;       // x_w is no seed candidate (see above).
  const float* velocity = nullptr;  // v_w, or null: none kept (see above).
};

struct MergeResult {
  std::vector<float> params;
  std::vector<float> velocity;  // sum_w e_w v_w; empty: the slot is reset.
  int64_t clock = 0;        // max_w c_w.
  int seed_worker = -1;     // The freshest worker (the seed under kFreshest).
  // Parallel to the input: e_w and a_w.
  std::vector<double> seed_weights;
  std::vector<double> change_weights;
};

// The change weights a_w of `copies` under `merge_rule` (their params and
// delta are not read): sparse rows, of which no worker holds a base copy, are
// rebuilt as the server's own rows plus sum_w a_w d_w.
std::vector<double> ChangeWeights(const std::vector<WorkerCopy>& copies, MergeRule merge_rule);

// Merges `copies` of an n-float range. InvalidArgument if copies is empty,
// a pointer is null, or every copy is change-only (use MergeChanges).
StatusOr<MergeResult> MergeCopies(const std::vector<WorkerCopy>& copies, size_t n,
                                  SeedRule seed_rule, MergeRule merge_rule);

// sum_w a_w d_w over `copies` (their params are not read), the change
// weights in *weights. InvalidArgument if copies is empty or a delta is null.
StatusOr<std::vector<float>> MergeChanges(const std::vector<WorkerCopy>& copies, size_t n,
                                          MergeRule merge_rule, std::vector<double>* weights);

}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_SEED_MERGE_H_
