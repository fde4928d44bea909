#include "apps/trainer/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "apps/trainer/internal/models.h"

namespace relaxps {
namespace trainer {

// Page-locked copies of one batch for a (device, capacity), and the events
// that order their reuse.
struct Model::BatchStaging {
  BatchStaging(kernels::Device* device, int capacity, int input_size)
      : device(device),
        capacity(capacity),
        images(static_cast<float*>(
            device->AllocHost(sizeof(float) * static_cast<size_t>(capacity) * input_size))),
        labels(static_cast<int32_t*>(
            device->AllocHost(sizeof(int32_t) * static_cast<size_t>(capacity)))),
        consumed(device->NewEvent()),
        uploaded(device->NewEvent()) {}
  BatchStaging(const BatchStaging&) = delete;
  BatchStaging& operator=(const BatchStaging&) = delete;
  ~BatchStaging() {
    device->HostWaitEvent(uploaded.get());  // The last transfer reads the memory.
    device->FreeHost(images);
    device->FreeHost(labels);
  }

  kernels::Device* const device;
  const int capacity;
  float* const images;    // capacity * input_size floats, or nullptr.
  int32_t* const labels;  // capacity ints, or nullptr.
  // The computation that may read the destinations (compute stream).
  const std::unique_ptr<kernels::DeviceEvent> consumed;
  // The last transfer out of images/labels (copy stream).
  const std::unique_ptr<kernels::DeviceEvent> uploaded;
};

Model::Model(const ModelOptions& options) : options_(options) {}

Model::~Model() = default;

Model::BatchStaging* Model::Staging(kernels::Device* device, int capacity) {
  for (const auto& s : staging_) {
    if (s->device == device && s->capacity == capacity) {
      return s->images != nullptr && s->labels != nullptr ? s.get() : nullptr;
    }
  }
  staging_.push_back(std::make_unique<BatchStaging>(device, capacity, input_size()));
  const BatchStaging& s = *staging_.back();
  if (s.images == nullptr || s.labels == nullptr) {
    LOG(WARNING) << "no page-locked host memory for a batch of " << capacity << " on "
                 << device->Name() << "; copying batches synchronously";
    return nullptr;
  }
  return staging_.back().get();
}

void Model::UploadBatch(kernels::Device* device, int capacity, const float* images,
                        const int32_t* labels, int batch, float* images_dst,
                        int32_t* labels_dst) {
  CHECK_LE(batch, capacity);
  const size_t image_bytes = sizeof(float) * static_cast<size_t>(batch) * input_size();
  const size_t label_bytes = sizeof(int32_t) * static_cast<size_t>(batch);
  BatchStaging* staging =
      device->type() == kernels::DeviceType::kCpu ? nullptr : Staging(device, capacity);
  if (staging == nullptr) {
    device->CopyToDevice(images_dst, images, image_bytes);
    device->CopyToDevice(labels_dst, labels, label_bytes);
    return;
  }
  using kernels::Stream;
  device->HostWaitEvent(staging->uploaded.get());  // Before overwriting its source.
  std::memcpy(staging->images, images, image_bytes);
  std::memcpy(staging->labels, labels, label_bytes);
  // The previous batch's computation (still queued when the parameter source
  // does not wait for it, e.g. local training) may read the destinations.
  device->RecordEvent(Stream::kCompute, staging->consumed.get());
  device->WaitEvent(Stream::kCopy, staging->consumed.get());
  device->CopyToDeviceAsync(images_dst, staging->images, image_bytes);
  device->CopyToDeviceAsync(labels_dst, staging->labels, label_bytes);
  device->RecordEvent(Stream::kCopy, staging->uploaded.get());
  device->WaitEvent(Stream::kCompute, staging->uploaded.get());
}

Initializer Model::MakeInitializer(uint64_t seed) const {
  Initializer init;
  init.seed = seed;
  for (const ParamRange& p : layout_) {
    if (p.init == InitKind::kZeros) continue;  // keys outside segments are zero
    InitSegment s;
    s.begin = p.offset;
    s.end = p.offset + p.size;
    s.kind = p.init;
    s.a = p.a;
    s.b = p.b;
    init.segments.push_back(s);
  }
  return init;
}

void Model::AddParam(const std::string& name, size_t size, InitKind init, float a, float b) {
  CHECK_GT(size, 0u) << name;
  ParamRange p;
  p.name = name;
  p.offset = num_params_;
  p.size = size;
  p.init = init;
  p.a = a;
  p.b = b;
  layout_.push_back(p);
  num_params_ += size;
}

size_t Model::OffsetOf(const std::string& name) const {
  for (const ParamRange& p : layout_) {
    if (p.name == name) return p.offset;
  }
  LOG(FATAL) << "model " << Name() << " has no parameter " << name;
  return 0;
}

StepResult Model::ForwardBackward(kernels::Device* device, const float* params,
                                  const float* images, const int32_t* labels, int batch,
                                  float* grads, const StepOptions& step) {
  CHECK_GT(batch, 0);
  CHECK(grads != nullptr);
  return Compute(device, batch, params, images, labels, batch, grads, step);
}

StepResult Model::Forward(kernels::Device* device, const float* params, const float* images,
                          const int32_t* labels, int batch) {
  CHECK_GT(batch, 0);
  StepOptions inference;
  inference.training = false;
  return Compute(device, batch, params, images, labels, batch, nullptr, inference);
}

EvalResult Model::Evaluate(kernels::Device* device, const float* params, const float* images,
                           const int32_t* labels, size_t n, int eval_batch) {
  CHECK_GT(eval_batch, 0);
  StepOptions inference;
  inference.training = false;
  EvalResult result;
  double loss_sum = 0.0;
  size_t correct = 0;
  const size_t stride = static_cast<size_t>(input_size());
  for (size_t begin = 0; begin < n; begin += eval_batch) {
    const int b = static_cast<int>(std::min<size_t>(eval_batch, n - begin));
    // The last, smaller batch reuses the eval_batch workspace.
    StepResult r = Compute(device, eval_batch, params, images + begin * stride, labels + begin,
                           b, nullptr, inference);
    loss_sum += static_cast<double>(r.loss) * b;
    correct += r.correct;
  }
  result.examples = n;
  if (n > 0) {
    result.loss = loss_sum / n;
    result.accuracy = static_cast<double>(correct) / n;
  }
  return result;
}

namespace {

// "mlp" -> {256}; "mlp-512-256" -> {512, 256}.
StatusOr<std::vector<int>> ParseMlpHidden(const std::string& name) {
  if (name == "mlp") return std::vector<int>{256};
  std::vector<int> hidden;
  size_t pos = 3;
  while (pos < name.size()) {
    if (name[pos] != '-') break;
    const size_t next = name.find('-', pos + 1);
    const std::string field = name.substr(pos + 1, next == std::string::npos ? std::string::npos
                                                                             : next - pos - 1);
    char* end = nullptr;
    const long width = std::strtol(field.c_str(), &end, 10);
    if (field.empty() || *end != '\0' || width <= 0 || width > (1 << 16)) break;
    hidden.push_back(static_cast<int>(width));
    pos = next == std::string::npos ? name.size() : next;
    if (pos == name.size()) return hidden;
  }
  return InvalidArgumentError("bad MLP model name '" + name +
                              "' (expected mlp or mlp-<width>[-<width>...])");
}

}  // namespace

StatusOr<std::unique_ptr<Model>> NewModel(const ModelOptions& options) {
  if (options.batch_size <= 0) {
    return InvalidArgumentError("batch size must be positive, got " +
                                std::to_string(options.batch_size));
  }
  if (!(options.dropout >= 0.0f && options.dropout < 1.0f)) {
    return InvalidArgumentError("dropout must be in [0, 1)");
  }
  if (options.image_rows <= 0 || options.image_cols <= 0 || options.num_classes < 2) {
    return InvalidArgumentError("bad input geometry or class count");
  }
  if (options.name == "cnn") {
    if (options.image_rows % 4 != 0 || options.image_cols % 4 != 0) {
      return InvalidArgumentError("cnn needs image sides divisible by 4");
    }
    return internal::NewCnnModel(options);
  }
  if (options.name.compare(0, 3, "mlp") == 0) {
    ASSIGN_OR_RETURN(std::vector<int> hidden, ParseMlpHidden(options.name));
    return internal::NewMlpModel(options, std::move(hidden));
  }
  return InvalidArgumentError("unknown model '" + options.name + "' (expected mlp or cnn)");
}

StatusOr<std::unique_ptr<Model>> NewModel(const std::string& name, int batch_size) {
  ModelOptions options;
  options.name = name;
  options.batch_size = batch_size;
  return NewModel(options);
}

}  // namespace trainer
}  // namespace relaxps
