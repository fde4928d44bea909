#include "apps/trainer/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "apps/trainer/internal/models.h"

namespace relaxps {
namespace trainer {

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
