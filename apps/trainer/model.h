// Model: a classifier of fixed-size images whose parameters live in ONE flat
// float vector (one dense parameter-server table) and whose gradients come
// out in a flat vector of the same layout.
//
// A model owns no parameters: the caller hands in a device pointer to the
// parameters and one to write the gradients to, so the same model serves a
// local trainer, a parameter-server worker, or a test. It does own the
// per-batch-size workspaces (activations, im2col columns, masks) in the
// device's memory; they are allocated on first use of a (device, batch
// capacity) and reused, so the training loop allocates nothing per step.
//
// All math runs through kernels::Device, so the same model runs on the CPU
// back end (OpenBLAS) and on CUDA (cuBLAS). On CUDA, each batch's images and
// labels cross to the device through a page-locked staging buffer on the
// device's copy stream (one per device and batch capacity, owned by the
// model), so the host does not wait for the transfer.
//
// Thread-safety: a Model is used by one thread at a time. The devices it
// was used with must outlive it (the workspaces are freed through them).
#ifndef RELAXPS_APPS_TRAINER_MODEL_H_
#define RELAXPS_APPS_TRAINER_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/initializer.h"
#include "common/status.h"
#include "kernels/device.h"

namespace relaxps {
namespace trainer {

struct ModelOptions {
  // "mlp" (784-256-10), "mlp-H1-H2-..." (hidden widths, e.g. "mlp-512-256")
  // or "cnn" (the paper's: conv3x3x16, pool, conv3x3x32, pool, fc512,
  // dropout, fc10).
  std::string name = "cnn";
  // Training mini-batch size; the training workspace is sized for it.
  int batch_size = 32;
  // Dropout probability after the CNN's fc512 (0 disables it). Higher
  // regularizes more but slows early training.
  float dropout = 0.25f;
  // Input geometry and class count (Fashion-MNIST defaults).
  int image_rows = 28;
  int image_cols = 28;
  int num_classes = 10;
};

// One parameter tensor inside the flat vector, and how it is initialized.
struct ParamRange {
  std::string name;  // e.g. "conv1.weight"
  size_t offset = 0;
  size_t size = 0;
  InitKind init = InitKind::kZeros;
  // kUniform: U(a, b); kNormal: N(a, b); kConstant: a.
  float a = 0.0f;
  float b = 0.0f;
};

struct StepOptions {
  // Dropout on when true; off (inference) when false.
  bool training = true;
  // Seed of the dropout masks; derive it from (run seed, worker, step) so a
  // step is reproducible.
  uint64_t dropout_seed = 0;
};

struct StepResult {
  float loss = 0.0f;  // mean cross-entropy over the batch
  int correct = 0;    // rows whose argmax equals the label
};

struct EvalResult {
  double loss = 0.0;      // mean cross-entropy
  double accuracy = 0.0;  // fraction correct
  size_t examples = 0;
};

class Model {
 public:
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  virtual ~Model();

  // "mlp-256" / "cnn", for logs and metadata.
  virtual std::string Name() const = 0;

  // The tensors, in order, tiling [0, num_params()).
  const std::vector<ParamRange>& layout() const { return layout_; }
  size_t num_params() const { return num_params_; }
  // The per-tensor initialization as table segments: He-uniform for weights
  // feeding a ReLU, Glorot-uniform for the output layer, zeros for biases.
  Initializer MakeInitializer(uint64_t seed) const;

  int batch_size() const { return options_.batch_size; }
  int input_size() const { return options_.image_rows * options_.image_cols; }
  int num_classes() const { return options_.num_classes; }
  const ModelOptions& options() const { return options_; }

  // One training step's math: forward pass, loss, backward pass.
  // `params` and `grads` are num_params() floats in `device` memory; grads
  // is overwritten with d(mean loss)/d(params). `images` (batch *
  // input_size() floats) and `labels` (batch ints in [0, num_classes())) are
  // in host memory. REQUIRES: 0 < batch.
  StepResult ForwardBackward(kernels::Device* device, const float* params, const float* images,
                             const int32_t* labels, int batch, float* grads,
                             const StepOptions& step = StepOptions());

  // Forward pass only (no dropout): the loss and correct count of a batch.
  StepResult Forward(kernels::Device* device, const float* params, const float* images,
                     const int32_t* labels, int batch);

  // Mean loss and accuracy over n examples (host memory) in mini-batches of
  // `eval_batch`, without dropout. REQUIRES: eval_batch > 0.
  EvalResult Evaluate(kernels::Device* device, const float* params, const float* images,
                      const int32_t* labels, size_t n, int eval_batch = 256);

 protected:
  explicit Model(const ModelOptions& options);

  // Appends a tensor to the layout.
  void AddParam(const std::string& name, size_t size, InitKind init, float a, float b);
  // Offset of the tensor added with AddParam under `name`. CHECK-fails on
  // an unknown name (a programming error).
  size_t OffsetOf(const std::string& name) const;

  // The model's math on `batch` <= capacity examples, with `capacity` the
  // workspace size to use (the implementation keeps one workspace per
  // capacity). grads == nullptr: forward only.
  virtual StepResult Compute(kernels::Device* device, int capacity, const float* params,
                             const float* images, const int32_t* labels, int batch,
                             float* grads, const StepOptions& step) = 0;

  // For Compute: copies `batch` <= capacity examples, `images` (batch *
  // input_size() floats) and `labels` (batch ints) in host memory, to
  // `images_dst` / `labels_dst` in `device` memory, ordered before the
  // computation queued after this call. CPU: plain copies. CUDA: through
  // the (device, capacity) page-locked staging buffer on the copy stream,
  // after the computation queued so far (which may still read the
  // destinations); the host does not wait for the transfer. Falls back to
  // the synchronous copies if page-locked memory runs out.
  void UploadBatch(kernels::Device* device, int capacity, const float* images,
                   const int32_t* labels, int batch, float* images_dst, int32_t* labels_dst);

  const ModelOptions options_;

 private:
  struct BatchStaging;  // model.cc

  // The staging buffers of (device, capacity), created on first use; nullptr
  // if page-locked memory ran out (not retried).
  BatchStaging* Staging(kernels::Device* device, int capacity);

  std::vector<ParamRange> layout_;
  size_t num_params_ = 0;
  std::vector<std::unique_ptr<BatchStaging>> staging_;  // CUDA only.
};

// Creates a model. InvalidArgument for an unknown name, a non-positive batch
// size or a dropout outside [0, 1).
StatusOr<std::unique_ptr<Model>> NewModel(const ModelOptions& options);
StatusOr<std::unique_ptr<Model>> NewModel(const std::string& name, int batch_size);

}  // namespace trainer
}  // namespace relaxps

#endif  // RELAXPS_APPS_TRAINER_MODEL_H_
