// Optimizer: a server-side update rule applied to a slice of parameters with
// a kernels::Device.
//
// An optimizer owns no parameter memory: the caller (a shard) keeps the
// parameters and `num_state_slots()` state arrays of the same length
// (momentum velocity, Adam moments, Adagrad accumulator) and hands them in.
// This keeps optimizer state next to the parameters in the ParamStore, so it
// is flushed and checkpointed with them.
//
// Thread-safety: Apply is const and may be called concurrently on disjoint
// slices.
#ifndef RELAXPS_KERNELS_OPTIMIZER_H_
#define RELAXPS_KERNELS_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/optimizer_options.h"
#include "common/status.h"
#include "kernels/device.h"

namespace relaxps {
namespace kernels {

using OptimizerOptions = ::relaxps::OptimizerOptions;

class Optimizer {
 public:
  Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  virtual ~Optimizer() = default;

  virtual const char* Name() const = 0;
  // Number of float state arrays per parameter array (0 for SGD, 1 for
  // momentum and Adagrad, 2 for Adam).
  virtual int num_state_slots() const = 0;
  // Initial value of each state slot (0 for all built-ins).
  virtual float state_init(int slot) const { (void)slot; return 0.0f; }

  // Applies one step to n parameters.
  // REQUIRES: state has num_state_slots() arrays of n floats; step >= 1 is
  // the number of updates this slice has received including this one;
  // lr_scale multiplies the learning rate (e.g. for staleness-aware steps).
  virtual void Apply(Device* device, float* w, float* const* state, const float* g, size_t n,
                     int64_t step, float lr_scale) const = 0;
  // Apply(), and the updated w[0, n) copied to w_copy (the parameters a
  // PUSH_PULL's reply carries). This implementation updates and copies in
  // blocks small enough for the L1 cache; it requires Apply to be element-wise
  // (every built-in rule is). A rule whose Apply leaves host memory (a GPU
  // staging one) overrides it, and so do the built-in rules on a CPU device:
  // one pass that stores each updated w to w_copy too (bit-identical).
  virtual void ApplyAndCopy(Device* device, float* w, float* const* state, const float* g,
                            size_t n, int64_t step, float lr_scale, float* w_copy) const;

  const OptimizerOptions& options() const { return options_; }

 protected:
  OptimizerOptions options_;
};

// Returns InvalidArgument for an unknown name or a non-positive / non-finite
// learning rate.
StatusOr<std::unique_ptr<Optimizer>> NewOptimizer(const OptimizerOptions& options);

}  // namespace kernels
}  // namespace relaxps

#endif  // RELAXPS_KERNELS_OPTIMIZER_H_
