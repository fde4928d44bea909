// StagedOptimizer: applies an optimizer on a device whose memory is not the
// caller's (a server's shards live in host memory, its updates run on a GPU).
//
// Each Apply copies the parameters, the state slots and the gradient into
// the device's memory, runs the wrapped optimizer there, and copies the
// parameters and state back. The staging buffers grow to the largest slice
// seen and are reused. Worth it when the update is compute-heavy relative to
// the copies (Adam on large slices); for SGD the copies dominate.
//
// Thread-safety: Apply is NOT safe to call concurrently on one instance
// (shared staging buffers); a server shard calls it from its loop only.
#ifndef RELAXPS_KERNELS_STAGED_OPTIMIZER_H_
#define RELAXPS_KERNELS_STAGED_OPTIMIZER_H_

#include <memory>

#include "kernels/device.h"
#include "kernels/optimizer.h"

namespace relaxps {
namespace kernels {

// Wraps `inner` so that it runs on `device` (which must outlive the result)
// while callers pass host pointers. The `device` argument of the returned
// optimizer's Apply is ignored.
std::unique_ptr<Optimizer> NewStagedOptimizer(std::unique_ptr<Optimizer> inner, Device* device);

}  // namespace kernels
}  // namespace relaxps

#endif  // RELAXPS_KERNELS_STAGED_OPTIMIZER_H_
