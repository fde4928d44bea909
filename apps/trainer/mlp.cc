// The multi-layer perceptron: input -> [fc + ReLU] x hidden -> fc -> softmax.
//
// Layout per layer l: fc<l>.weight (in x out, row-major, so y = x W) then
// fc<l>.bias (out).
#include <cmath>
#include <string>
#include <vector>

#include "apps/trainer/internal/models.h"

namespace relaxps {
namespace trainer {
namespace internal {
namespace {

using kernels::Device;
using kernels::DeviceBuffer;

class MlpModel : public Model {
 public:
  MlpModel(const ModelOptions& options, std::vector<int> hidden)
      : Model(options), hidden_(std::move(hidden)) {
    dims_.push_back(input_size());
    for (int h : hidden_) dims_.push_back(h);
    dims_.push_back(num_classes());
    const int layers = num_layers();
    for (int l = 0; l < layers; ++l) {
      const int in = dims_[l], out = dims_[l + 1];
      const std::string prefix = "fc" + std::to_string(l + 1);
      // He-uniform before a ReLU, Glorot-uniform for the logits.
      const float bound = l + 1 < layers ? std::sqrt(6.0f / in) : std::sqrt(6.0f / (in + out));
      AddParam(prefix + ".weight", static_cast<size_t>(in) * out, InitKind::kUniform, -bound,
               bound);
      AddParam(prefix + ".bias", out, InitKind::kZeros, 0, 0);
      weight_offset_.push_back(OffsetOf(prefix + ".weight"));
      bias_offset_.push_back(OffsetOf(prefix + ".bias"));
    }
  }

  std::string Name() const override {
    std::string name = "mlp";
    for (int h : hidden_) name += "-" + std::to_string(h);
    return name;
  }

 protected:
  StepResult Compute(Device* device, int capacity, const float* params, const float* images,
                     const int32_t* labels, int batch, float* grads,
                     const StepOptions& step) override {
    CHECK_LE(batch, capacity);
    Workspace* ws = workspaces_.Get(device, capacity);
    Workspace::Init(ws, dims_);
    const int layers = num_layers();
    const int b = batch;
    UploadBatch(device, capacity, images, labels, b, ws->input.data(), ws->labels.data());

    // ---- Forward ----
    const float* x = ws->input.data();
    for (int l = 0; l < layers; ++l) {
      const int in = dims_[l], out = dims_[l + 1];
      float* y = ws->act[l].data();
      device->Gemm(false, false, b, out, in, 1.0f, x, in, params + weight_offset_[l], out, 0.0f,
                   y, out);
      device->AddBias(y, params + bias_offset_[l], b, out);
      if (l + 1 < layers) device->ReluForward(y, static_cast<size_t>(b) * out);
      x = y;
    }
    StepResult result;
    const int classes = dims_.back();
    float* dlogits = ws->grad[layers - 1].data();
    result.loss = device->SoftmaxCrossEntropy(ws->act[layers - 1].data(), ws->labels.data(), b,
                                              classes, dlogits, &result.correct);
    if (grads == nullptr) return result;

    // ---- Backward ----
    for (int l = layers - 1; l >= 0; --l) {
      const int in = dims_[l], out = dims_[l + 1];
      const float* dy = ws->grad[l].data();
      const float* in_act = l == 0 ? ws->input.data() : ws->act[l - 1].data();
      device->Gemm(true, false, in, out, b, 1.0f, in_act, in, dy, out, 0.0f,
                   grads + weight_offset_[l], out);
      device->BiasGrad(dy, grads + bias_offset_[l], b, out);
      if (l > 0) {
        float* dx = ws->grad[l - 1].data();
        device->Gemm(false, true, b, in, out, 1.0f, dy, out, params + weight_offset_[l], out,
                     0.0f, dx, in);
        device->ReluBackward(ws->act[l - 1].data(), dx, static_cast<size_t>(b) * in);
      }
    }
    return result;
  }

 private:
  struct Workspace {
    Workspace(Device* device, int capacity) : device(device), capacity(capacity) {}
    // Allocates on first use (the layer widths are known only to the model).
    static void Init(Workspace* ws, const std::vector<int>& dims) {
      if (!ws->act.empty()) return;
      const size_t cap = ws->capacity;
      ws->input = DeviceBuffer<float>(ws->device, cap * dims[0]);
      ws->labels = DeviceBuffer<int32_t>(ws->device, cap);
      for (size_t l = 1; l < dims.size(); ++l) {
        ws->act.emplace_back(ws->device, cap * dims[l]);
        ws->grad.emplace_back(ws->device, cap * dims[l]);
      }
    }
    Device* device;
    int capacity;
    DeviceBuffer<float> input;
    DeviceBuffer<int32_t> labels;
    // act[l], grad[l]: output of layer l (post-ReLU) and d(loss)/d(pre-ReLU
    // output) of layer l; grad of the last layer is dlogits.
    std::vector<DeviceBuffer<float>> act;
    std::vector<DeviceBuffer<float>> grad;
  };

  int num_layers() const { return static_cast<int>(dims_.size()) - 1; }

  // Constant after construction.
  const std::vector<int> hidden_;
  std::vector<int> dims_;  // input, hidden..., classes
  std::vector<size_t> weight_offset_;
  std::vector<size_t> bias_offset_;

  WorkspaceCache<Workspace> workspaces_;
};

}  // namespace

std::unique_ptr<Model> NewMlpModel(const ModelOptions& options, std::vector<int> hidden) {
  return std::make_unique<MlpModel>(options, std::move(hidden));
}

}  // namespace internal
}  // namespace trainer
}  // namespace relaxps
