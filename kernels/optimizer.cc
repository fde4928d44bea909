// The built-in update rules. Each is a thin adapter from OptimizerOptions to
// one fused Device update, so the same rule runs on CPU and CUDA. On a CPU
// device their ApplyAndCopy is one pass too: the CPU back end's update loop
// stores each updated parameter to the copy as it writes it.
#include "kernels/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "kernels/internal/cpu_device.h"

namespace relaxps {
namespace kernels {
namespace {

// A built-in rule: ApplyAndCopy on a CPU device runs the rule's fused
// update-and-copy loop; elsewhere the blocked Optimizer::ApplyAndCopy.
class BuiltinOptimizer : public Optimizer {
 public:
  void ApplyAndCopy(Device* device, float* w, float* const* state, const float* g, size_t n,
                    int64_t step, float lr_scale, float* w_copy) const final {
    if (device->type() != DeviceType::kCpu) {
      Optimizer::ApplyAndCopy(device, w, state, g, n, step, lr_scale, w_copy);
      return;
    }
    CpuApplyAndCopy(w, state, g, n, step, lr_scale, w_copy);
  }

 protected:
  // ApplyAndCopy in one pass on host memory (the CPU device's arrays).
  virtual void CpuApplyAndCopy(float* w, float* const* state, const float* g, size_t n,
                               int64_t step, float lr_scale, float* w_copy) const = 0;
};

class SgdOptimizer final : public BuiltinOptimizer {
 public:
  explicit SgdOptimizer(const OptimizerOptions& options) { options_ = options; }
  const char* Name() const override { return "sgd"; }
  int num_state_slots() const override { return 0; }
  void Apply(Device* device, float* w, float* const* state, const float* g, size_t n, int64_t step,
             float lr_scale) const override {
    device->SgdUpdate(w, g, n, options_.lr * lr_scale);
  }

 protected:
  void CpuApplyAndCopy(float* w, float* const* state, const float* g, size_t n, int64_t step,
                       float lr_scale, float* w_copy) const override {
    CpuSgdUpdateAndCopy(w, g, n, options_.lr * lr_scale, w_copy);
  }
};

class MomentumOptimizer final : public BuiltinOptimizer {
 public:
  explicit MomentumOptimizer(const OptimizerOptions& options) { options_ = options; }
  const char* Name() const override { return "momentum"; }
  int num_state_slots() const override { return 1; }
  void Apply(Device* device, float* w, float* const* state, const float* g, size_t n, int64_t step,
             float lr_scale) const override {
    device->MomentumUpdate(w, state[0], g, n, options_.lr * lr_scale, options_.momentum);
  }

 protected:
  void CpuApplyAndCopy(float* w, float* const* state, const float* g, size_t n, int64_t step,
                       float lr_scale, float* w_copy) const override {
    CpuMomentumUpdateAndCopy(w, state[0], g, n, options_.lr * lr_scale, options_.momentum,
                             w_copy);
  }
};

class AdamOptimizer final : public BuiltinOptimizer {
 public:
  explicit AdamOptimizer(const OptimizerOptions& options) { options_ = options; }
  const char* Name() const override { return "adam"; }
  int num_state_slots() const override { return 2; }
  void Apply(Device* device, float* w, float* const* state, const float* g, size_t n, int64_t step,
             float lr_scale) const override {
    device->AdamUpdate(w, state[0], state[1], g, n, ParamsOf(step, lr_scale));
  }

 protected:
  void CpuApplyAndCopy(float* w, float* const* state, const float* g, size_t n, int64_t step,
                       float lr_scale, float* w_copy) const override {
    CpuAdamUpdateAndCopy(w, state[0], state[1], g, n, ParamsOf(step, lr_scale), w_copy);
  }

 private:
  AdamParams ParamsOf(int64_t step, float lr_scale) const {
    CHECK_GE(step, 1) << "Optimizer::Apply: step is 1-based";
    AdamParams p;
    p.lr = options_.lr * lr_scale;
    p.beta1 = options_.beta1;
    p.beta2 = options_.beta2;
    p.eps = options_.eps;
    p.step = step;
    return p;
  }
};

class AdagradOptimizer final : public BuiltinOptimizer {
 public:
  explicit AdagradOptimizer(const OptimizerOptions& options) { options_ = options; }
  const char* Name() const override { return "adagrad"; }
  int num_state_slots() const override { return 1; }
  void Apply(Device* device, float* w, float* const* state, const float* g, size_t n, int64_t step,
             float lr_scale) const override {
    device->AdagradUpdate(w, state[0], g, n, options_.lr * lr_scale, options_.eps);
  }

 protected:
  void CpuApplyAndCopy(float* w, float* const* state, const float* g, size_t n, int64_t step,
                       float lr_scale, float* w_copy) const override {
    CpuAdagradUpdateAndCopy(w, state[0], g, n, options_.lr * lr_scale, options_.eps, w_copy);
  }
};

}  // namespace

void Optimizer::ApplyAndCopy(Device* device, float* w, float* const* state, const float* g,
                             size_t n, int64_t step, float lr_scale, float* w_copy) const {
  // 2,048 floats: w, g and two state slots take 32 KiB, within L1.
  constexpr size_t kBlock = 2048;
  constexpr int kMaxSlots = 4;
  const int slots = num_state_slots();
  CHECK_LE(slots, kMaxSlots) << Name() << " has more state slots than ApplyAndCopy handles";
  float* block_state[kMaxSlots];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t len = std::min(kBlock, n - i);
    for (int s = 0; s < slots; ++s) block_state[s] = state[s] + i;
    Apply(device, w + i, block_state, g + i, len, step, lr_scale);
    std::memcpy(w_copy + i, w + i, len * sizeof(float));
  }
}

StatusOr<std::unique_ptr<Optimizer>> NewOptimizer(const OptimizerOptions& options) {
  RETURN_IF_ERROR(ValidateOptimizerOptions(options));
  if (options.name == "momentum") return std::unique_ptr<Optimizer>(new MomentumOptimizer(options));
  if (options.name == "adam") return std::unique_ptr<Optimizer>(new AdamOptimizer(options));
  if (options.name == "adagrad") return std::unique_ptr<Optimizer>(new AdagradOptimizer(options));
  return std::unique_ptr<Optimizer>(new SgdOptimizer(options));
}

}  // namespace kernels
}  // namespace relaxps
