// The paper's convolutional network:
//   conv3x3 (1 -> 16, pad 1) + ReLU + maxpool 2
//   conv3x3 (16 -> 32, pad 1) + ReLU + maxpool 2
//   fc (32 * H/4 * W/4 -> 512) + ReLU + dropout(p)
//   fc (512 -> classes)
// Convolutions are im2col + GEMM per image, through kernels::Device.
// Activations are NCHW. Conv weights are (out_channels x in_channels*3*3),
// matching Im2Col's row order; fc weights are (in x out), so y = x W.
#include <cmath>
#include <string>

#include "apps/trainer/internal/models.h"

namespace relaxps {
namespace trainer {
namespace internal {
namespace {

using kernels::Device;
using kernels::DeviceBuffer;

constexpr int kKernel = 3;
constexpr int kPad = 1;
constexpr int kPool = 2;
constexpr int kConv1 = 16;
constexpr int kConv2 = 32;
constexpr int kFc1 = 512;

class CnnModel : public Model {
 public:
  explicit CnnModel(const ModelOptions& options)
      : Model(options),
        h1_(options.image_rows),
        w1_(options.image_cols),
        h2_(h1_ / kPool),
        w2_(w1_ / kPool),
        h3_(h2_ / kPool),
        w3_(w2_ / kPool),
        col1_rows_(1 * kKernel * kKernel),
        col2_rows_(kConv1 * kKernel * kKernel),
        flat_(kConv2 * h3_ * w3_),
        classes_(options.num_classes) {
    // He-uniform (fan_in) for layers followed by ReLU; Glorot for logits.
    auto he = [](int fan_in) { return std::sqrt(6.0f / fan_in); };
    AddParam("conv1.weight", size_t{kConv1} * col1_rows_, InitKind::kUniform, -he(col1_rows_),
             he(col1_rows_));
    AddParam("conv1.bias", kConv1, InitKind::kZeros, 0, 0);
    AddParam("conv2.weight", size_t{kConv2} * col2_rows_, InitKind::kUniform, -he(col2_rows_),
             he(col2_rows_));
    AddParam("conv2.bias", kConv2, InitKind::kZeros, 0, 0);
    AddParam("fc1.weight", static_cast<size_t>(flat_) * kFc1, InitKind::kUniform, -he(flat_), he(flat_));
    AddParam("fc1.bias", kFc1, InitKind::kZeros, 0, 0);
    const float glorot = std::sqrt(6.0f / (kFc1 + classes_));
    AddParam("fc2.weight", size_t{kFc1} * classes_, InitKind::kUniform, -glorot, glorot);
    AddParam("fc2.bias", classes_, InitKind::kZeros, 0, 0);
    w_conv1_ = OffsetOf("conv1.weight");
    b_conv1_ = OffsetOf("conv1.bias");
    w_conv2_ = OffsetOf("conv2.weight");
    b_conv2_ = OffsetOf("conv2.bias");
    w_fc1_ = OffsetOf("fc1.weight");
    b_fc1_ = OffsetOf("fc1.bias");
    w_fc2_ = OffsetOf("fc2.weight");
    b_fc2_ = OffsetOf("fc2.bias");
  }

  std::string Name() const override { return "cnn"; }

 protected:
  StepResult Compute(Device* device, int capacity, const float* params, const float* images,
                     const int32_t* labels, int batch, float* grads,
                     const StepOptions& step) override;

 private:
  struct Workspace;

  // Constant after construction: geometry (h1/w1 input, h2/w2 after the
  // first pool, h3/w3 after the second) and parameter offsets.
  const int h1_, w1_, h2_, w2_, h3_, w3_;
  const int col1_rows_, col2_rows_, flat_, classes_;
  size_t w_conv1_, b_conv1_, w_conv2_, b_conv2_, w_fc1_, b_fc1_, w_fc2_, b_fc2_;

  WorkspaceCache<Workspace> workspaces_;
};

// Activations and scratch for up to `capacity` images. Sized lazily by
// Init() because the geometry belongs to the model.
struct CnnModel::Workspace {
  Workspace(Device* device, int capacity) : device(device), capacity(capacity) {}

  void Init(const CnnModel& m) {
    if (input.size() > 0) return;
    const size_t b = capacity;
    const size_t s1 = size_t(m.h1_) * m.w1_, s2 = size_t(m.h2_) * m.w2_;
    const size_t s3 = size_t(m.h3_) * m.w3_;
    input = DeviceBuffer<float>(device, b * s1);
    labels = DeviceBuffer<int32_t>(device, b);
    col1 = DeviceBuffer<float>(device, b * m.col1_rows_ * s1);
    a1 = DeviceBuffer<float>(device, b * kConv1 * s1);
    p1 = DeviceBuffer<float>(device, b * kConv1 * s2);
    argmax1 = DeviceBuffer<int32_t>(device, b * kConv1 * s2);
    col2 = DeviceBuffer<float>(device, b * m.col2_rows_ * s2);
    a2 = DeviceBuffer<float>(device, b * kConv2 * s2);
    p2 = DeviceBuffer<float>(device, b * kConv2 * s3);
    argmax2 = DeviceBuffer<int32_t>(device, b * kConv2 * s3);
    h = DeviceBuffer<float>(device, b * kFc1);
    mask = DeviceBuffer<float>(device, b * kFc1);
    logits = DeviceBuffer<float>(device, b * m.classes_);
    dlogits = DeviceBuffer<float>(device, b * m.classes_);
    dh = DeviceBuffer<float>(device, b * kFc1);
    dp2 = DeviceBuffer<float>(device, b * kConv2 * s3);
    da2 = DeviceBuffer<float>(device, b * kConv2 * s2);
    dcol2 = DeviceBuffer<float>(device, size_t(m.col2_rows_) * s2);
    dp1 = DeviceBuffer<float>(device, b * kConv1 * s2);
    da1 = DeviceBuffer<float>(device, b * kConv1 * s1);
  }

  Device* device;
  int capacity;
  DeviceBuffer<float> input;
  DeviceBuffer<int32_t> labels;
  // Forward. col1/col2 keep one im2col matrix per image while training (the
  // weight gradients need them); inference reuses the first slot.
  DeviceBuffer<float> col1, a1, p1, col2, a2, p2, h, mask, logits;
  DeviceBuffer<int32_t> argmax1, argmax2;
  // Backward.
  DeviceBuffer<float> dlogits, dh, dp2, da2, dcol2, dp1, da1;
};

StepResult CnnModel::Compute(Device* device, int capacity, const float* params,
                             const float* images, const int32_t* labels, int batch,
                             float* grads, const StepOptions& step) {
  CHECK_LE(batch, capacity);
  Workspace* ws = workspaces_.Get(device, capacity);
  ws->Init(*this);
  const int b = batch;
  const bool keep_cols = grads != nullptr;
  const int s1 = h1_ * w1_, s2 = h2_ * w2_, s3 = h3_ * w3_;
  const size_t col1_size = size_t(col1_rows_) * s1, col2_size = size_t(col2_rows_) * s2;
  const float* W1 = params + w_conv1_;
  const float* W2 = params + w_conv2_;
  const float* W3 = params + w_fc1_;
  const float* W4 = params + w_fc2_;

  UploadBatch(device, capacity, images, labels, b, ws->input.data(), ws->labels.data());

  // ---- conv1 + ReLU + pool ----
  for (int i = 0; i < b; ++i) {
    float* col = ws->col1.data() + (keep_cols ? i * col1_size : 0);
    float* out = ws->a1.data() + size_t(i) * kConv1 * s1;
    device->Im2Col(ws->input.data() + size_t(i) * s1, 1, h1_, w1_, kKernel, kPad, col);
    device->Gemm(false, false, kConv1, s1, col1_rows_, 1.0f, W1, col1_rows_, col, s1, 0.0f, out,
                 s1);
    device->AddChannelBias(out, params + b_conv1_, kConv1, s1);
  }
  device->ReluForward(ws->a1.data(), size_t(b) * kConv1 * s1);
  device->MaxPoolForward(ws->a1.data(), b * kConv1, h1_, w1_, kPool, ws->p1.data(),
                         ws->argmax1.data());

  // ---- conv2 + ReLU + pool ----
  for (int i = 0; i < b; ++i) {
    float* col = ws->col2.data() + (keep_cols ? i * col2_size : 0);
    float* out = ws->a2.data() + size_t(i) * kConv2 * s2;
    device->Im2Col(ws->p1.data() + size_t(i) * kConv1 * s2, kConv1, h2_, w2_, kKernel, kPad,
                   col);
    device->Gemm(false, false, kConv2, s2, col2_rows_, 1.0f, W2, col2_rows_, col, s2, 0.0f, out,
                 s2);
    device->AddChannelBias(out, params + b_conv2_, kConv2, s2);
  }
  device->ReluForward(ws->a2.data(), size_t(b) * kConv2 * s2);
  device->MaxPoolForward(ws->a2.data(), b * kConv2, h2_, w2_, kPool, ws->p2.data(),
                         ws->argmax2.data());

  // ---- fc1 + ReLU + dropout ----
  device->Gemm(false, false, b, kFc1, flat_, 1.0f, ws->p2.data(), flat_, W3, kFc1, 0.0f,
               ws->h.data(), kFc1);
  device->AddBias(ws->h.data(), params + b_fc1_, b, kFc1);
  device->ReluForward(ws->h.data(), size_t(b) * kFc1);
  const bool dropout = step.training && options_.dropout > 0.0f;
  if (dropout) {
    device->DropoutForward(ws->h.data(), ws->mask.data(), size_t(b) * kFc1, options_.dropout,
                           step.dropout_seed);
  }

  // ---- fc2 + softmax cross-entropy ----
  device->Gemm(false, false, b, classes_, kFc1, 1.0f, ws->h.data(), kFc1, W4, classes_, 0.0f,
               ws->logits.data(), classes_);
  device->AddBias(ws->logits.data(), params + b_fc2_, b, classes_);
  StepResult result;
  result.loss = device->SoftmaxCrossEntropy(ws->logits.data(), ws->labels.data(), b, classes_,
                                            ws->dlogits.data(), &result.correct);
  if (grads == nullptr) return result;

  // ---- Backward: fc2 ----
  device->Gemm(true, false, kFc1, classes_, b, 1.0f, ws->h.data(), kFc1, ws->dlogits.data(),
               classes_, 0.0f, grads + w_fc2_, classes_);
  device->BiasGrad(ws->dlogits.data(), grads + b_fc2_, b, classes_);
  device->Gemm(false, true, b, kFc1, classes_, 1.0f, ws->dlogits.data(), classes_, W4, classes_,
               0.0f, ws->dh.data(), kFc1);

  // ---- dropout + ReLU + fc1 ----
  // h is the post-dropout output: zero wherever the ReLU or the mask was.
  if (dropout) device->Multiply(ws->dh.data(), ws->mask.data(), size_t(b) * kFc1);
  device->ReluBackward(ws->h.data(), ws->dh.data(), size_t(b) * kFc1);
  device->Gemm(true, false, flat_, kFc1, b, 1.0f, ws->p2.data(), flat_, ws->dh.data(), kFc1,
               0.0f, grads + w_fc1_, kFc1);
  device->BiasGrad(ws->dh.data(), grads + b_fc1_, b, kFc1);
  device->Gemm(false, true, b, flat_, kFc1, 1.0f, ws->dh.data(), kFc1, W3, kFc1, 0.0f,
               ws->dp2.data(), flat_);

  // ---- pool2 + ReLU + conv2 ----
  device->MaxPoolBackward(ws->dp2.data(), ws->argmax2.data(), size_t(b) * kConv2 * s3,
                          ws->da2.data(), size_t(b) * kConv2 * s2);
  device->ReluBackward(ws->a2.data(), ws->da2.data(), size_t(b) * kConv2 * s2);
  device->Fill(grads + b_conv2_, kConv2, 0.0f);
  device->Fill(ws->dp1.data(), size_t(b) * kConv1 * s2, 0.0f);
  for (int i = 0; i < b; ++i) {
    const float* dy = ws->da2.data() + size_t(i) * kConv2 * s2;
    const float* col = ws->col2.data() + i * col2_size;
    // dW2 (+)= dy_i * col_i^T
    device->Gemm(false, true, kConv2, col2_rows_, s2, 1.0f, dy, s2, col, s2,
                 i == 0 ? 0.0f : 1.0f, grads + w_conv2_, col2_rows_);
    device->ChannelBiasGradAccumulate(dy, grads + b_conv2_, kConv2, s2);
    // dcol = W2^T * dy_i, scattered back onto the pooled conv1 output.
    device->Gemm(true, false, col2_rows_, s2, kConv2, 1.0f, W2, col2_rows_, dy, s2, 0.0f,
                 ws->dcol2.data(), s2);
    device->Col2Im(ws->dcol2.data(), kConv1, h2_, w2_, kKernel, kPad,
                   ws->dp1.data() + size_t(i) * kConv1 * s2);
  }

  // ---- pool1 + ReLU + conv1 (no input gradient needed) ----
  device->MaxPoolBackward(ws->dp1.data(), ws->argmax1.data(), size_t(b) * kConv1 * s2,
                          ws->da1.data(), size_t(b) * kConv1 * s1);
  device->ReluBackward(ws->a1.data(), ws->da1.data(), size_t(b) * kConv1 * s1);
  device->Fill(grads + b_conv1_, kConv1, 0.0f);
  for (int i = 0; i < b; ++i) {
    const float* dy = ws->da1.data() + size_t(i) * kConv1 * s1;
    const float* col = ws->col1.data() + i * col1_size;
    device->Gemm(false, true, kConv1, col1_rows_, s1, 1.0f, dy, s1, col, s1,
                 i == 0 ? 0.0f : 1.0f, grads + w_conv1_, col1_rows_);
    device->ChannelBiasGradAccumulate(dy, grads + b_conv1_, kConv1, s1);
  }
  return result;
}

}  // namespace

std::unique_ptr<Model> NewCnnModel(const ModelOptions& options) {
  return std::make_unique<CnnModel>(options);
}

}  // namespace internal
}  // namespace trainer
}  // namespace relaxps
