// LocalParams: the "no parameter server" baseline. Parameters and optimizer
// state live in the trainer's device memory; Update applies the optimizer
// there with the same kernels a server shard uses.
#include <vector>

#include "apps/trainer/param_source.h"
#include "kernels/optimizer.h"

namespace relaxps {
namespace trainer {
namespace {

using kernels::Device;
using kernels::DeviceBuffer;

class LocalParams final : public ParamSource {
 public:
  LocalParams(Device* device, size_t size, std::unique_ptr<kernels::Optimizer> optimizer)
      : device_(device),
        optimizer_(std::move(optimizer)),
        params_(device, size),
        grads_(device, size) {
    for (int s = 0; s < optimizer_->num_state_slots(); ++s) {
      state_.emplace_back(device, size);
      device_->Fill(state_.back().data(), size, optimizer_->state_init(s));
      state_ptrs_.push_back(state_.back().data());
    }
  }

  // Copies the initial values (host memory) in.
  void Load(const std::vector<float>& host) {
    device_->CopyToDevice(params_.data(), host.data(), host.size() * sizeof(float));
  }

  std::string Name() const override { return "local"; }
  size_t size() const override { return params_.size(); }
  const float* params() const override { return params_.data(); }

  float* grads() override { return grads_.data(); }

  Status Update() override {
    optimizer_->Apply(device_, params_.data(), state_ptrs_.data(), grads_.data(), params_.size(),
                      updates_ + 1, 1.0f);
    ++updates_;
    return Status::OK();
  }

  Status Clock() override {
    ++clock_;
    return Status::OK();
  }
  int64_t clock() const override { return clock_; }
  TrafficStats stats() const override { return TrafficStats(); }

 private:
  // Constant after construction.
  Device* const device_;
  const std::unique_ptr<kernels::Optimizer> optimizer_;
  DeviceBuffer<float> params_;
  DeviceBuffer<float> grads_;
  std::vector<DeviceBuffer<float>> state_;
  std::vector<float*> state_ptrs_;

  int64_t updates_ = 0;
  int64_t clock_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<ParamSource>> NewLocalParams(Device* device,
                                                      const LocalParamsOptions& options) {
  if (options.size == 0) return InvalidArgumentError("local parameters: size must be positive");
  RETURN_IF_ERROR(options.init.Validate(options.size));
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> optimizer,
                   kernels::NewOptimizer(options.optimizer));
  auto local = std::make_unique<LocalParams>(device, options.size, std::move(optimizer));
  std::vector<float> host(options.size);
  options.init.Fill(0, host.size(), host.data());
  local->Load(host);
  return std::unique_ptr<ParamSource>(std::move(local));
}

}  // namespace trainer
}  // namespace relaxps
