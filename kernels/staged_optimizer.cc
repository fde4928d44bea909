#include "kernels/staged_optimizer.h"

#include <cstring>
#include <vector>

namespace relaxps {
namespace kernels {
namespace {

class StagedOptimizer final : public Optimizer {
 public:
  StagedOptimizer(std::unique_ptr<Optimizer> inner, Device* device)
      : inner_(std::move(inner)), device_(device) {
    options_ = inner_->options();
    const int slots = 2 + inner_->num_state_slots();  // params, grads, state...
    staging_.resize(slots);
  }

  const char* Name() const override { return inner_->Name(); }
  int num_state_slots() const override { return inner_->num_state_slots(); }
  float state_init(int slot) const override { return inner_->state_init(slot); }

  void Apply(Device* /*host*/, float* w, float* const* state, const float* g, size_t n,
             int64_t step, float lr_scale) const override {
    const int slots = inner_->num_state_slots();
    const size_t bytes = n * sizeof(float);
    if (staging_[0].size() < n) {
      for (auto& b : staging_) b = DeviceBuffer<float>(device_, n);
    }
    device_->CopyToDevice(staging_[0].data(), w, bytes);
    device_->CopyToDevice(staging_[1].data(), g, bytes);
    std::vector<float*> dstate(slots);
    for (int s = 0; s < slots; ++s) {
      dstate[s] = staging_[2 + s].data();
      device_->CopyToDevice(dstate[s], state[s], bytes);
    }
    inner_->Apply(device_, staging_[0].data(), dstate.data(), staging_[1].data(), n, step,
                  lr_scale);
    device_->CopyToHost(w, staging_[0].data(), bytes);
    for (int s = 0; s < slots; ++s) device_->CopyToHost(state[s], dstate[s], bytes);
    device_->Synchronize();
  }
  // One staged update, then the copy: blocks would each pay the transfers.
  void ApplyAndCopy(Device* host, float* w, float* const* state, const float* g, size_t n,
                    int64_t step, float lr_scale, float* w_copy) const override {
    Apply(host, w, state, g, n, step, lr_scale);
    std::memcpy(w_copy, w, n * sizeof(float));
  }

 private:
  const std::unique_ptr<Optimizer> inner_;
  Device* const device_;
  // Grown on demand inside the const Apply (see the thread-safety note).
  mutable std::vector<DeviceBuffer<float>> staging_;
};

}  // namespace

std::unique_ptr<Optimizer> NewStagedOptimizer(std::unique_ptr<Optimizer> inner, Device* device) {
  return std::make_unique<StagedOptimizer>(std::move(inner), device);
}

}  // namespace kernels
}  // namespace relaxps
