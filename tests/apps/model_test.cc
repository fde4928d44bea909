// Tests of the trainer's models: analytic gradients against central finite
// differences, training progress, determinism, evaluation and the factory.
// All on the CPU device (host memory), so parameters can be poked directly.
#include "apps/trainer/model.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "apps/trainer/mnist.h"
#include "kernels/device.h"

namespace relaxps {
namespace trainer {
namespace {

std::unique_ptr<kernels::Device> CpuDevice() {
  kernels::DeviceOptions options;
  options.type = kernels::DeviceType::kCpu;
  options.cpu_threads = 1;
  auto device = kernels::NewDevice(options);
  EXPECT_TRUE(device.ok()) << device.status();
  return std::move(*device);
}

// Structured synthetic images: each class lights up its own band of rows,
// plus noise, so a few steps of SGD visibly fit them.
void MakeBatch(int batch, int pixels, uint64_t seed, std::vector<float>* images,
               std::vector<int32_t>* labels) {
  SplitMix64 rng(seed);
  images->assign(static_cast<size_t>(batch) * pixels, 0.0f);
  labels->resize(batch);
  for (int i = 0; i < batch; ++i) {
    const int label = static_cast<int>(rng.Below(10));
    (*labels)[i] = label;
    for (int p = 0; p < pixels; ++p) {
      const float noise = static_cast<float>(rng.Next() >> 40) / static_cast<float>(1 << 24);
      const bool band = (p / 28) / 3 == label;
      (*images)[static_cast<size_t>(i) * pixels + p] = 0.3f * noise + (band ? 0.7f : 0.0f);
    }
  }
}

std::unique_ptr<Model> MakeModel(const std::string& name, int batch, float dropout = 0.25f) {
  ModelOptions options;
  options.name = name;
  options.batch_size = batch;
  options.dropout = dropout;
  auto model = NewModel(options);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

std::vector<float> InitialParams(const Model& model, uint64_t seed) {
  std::vector<float> params(model.num_params());
  Initializer init = model.MakeInitializer(seed);
  EXPECT_TRUE(init.Validate(params.size()).ok());
  init.Fill(0, params.size(), params.data());
  return params;
}

// Tolerances of a gradient check; see CheckGradients.
struct GradTolerance {
  double rel;         // relative error accepted per entry
  double abs;         // absolute error accepted per entry
  double min_pass;    // fraction of entries that must pass
  double min_cosine;  // cosine similarity of the sampled vectors
};

// The loss is float32: with a loss near 2.3 every evaluation carries about
// 1e-7 of rounding, i.e. ~1e-4 of noise in a difference quotient with
// h = 1e-3. ReLU and max-pool kinks inside [w - h, w + h] add a further
// error that shrinks only linearly with h (the CNN has thousands of units
// per channel, so a conv bias step always crosses a few). Hence:
//  - the MLP (few kinks): 2% relative + 3e-4 absolute per entry;
//  - the CNN: 5% relative + 1e-3 absolute per entry;
// both with the "double check": an entry that misses at h = 1e-3 is retried
// at h = 3e-4 (rounding and kinks rarely spoil both), at least 90% of the
// entries of every tensor must pass, and the sampled analytic and numeric
// vectors of every tensor must have cosine similarity >= 0.99 (0.999 for the
// MLP). A real bug (wrong transpose, missing bias or mask, bad scatter)
// breaks nearly every entry of its tensor and the cosine with it.
constexpr GradTolerance kMlpTolerance = {2e-2, 3e-4, 0.9, 0.999};
constexpr GradTolerance kCnnTolerance = {5e-2, 1e-3, 0.9, 0.99};

// Checks d(loss)/d(param) for `per_tensor` random entries of every tensor of
// the model against central differences (loss(w + h) - loss(w - h)) / 2h.
void CheckGradients(const std::string& name, float dropout, int per_tensor,
                    const GradTolerance& tol) {
  constexpr int kBatch = 4;
  auto device = CpuDevice();
  auto model = MakeModel(name, kBatch, dropout);
  std::vector<float> params = InitialParams(*model, 7);
  // Non-zero biases so their gradients are not trivially at a kink.
  SplitMix64 rng(99);
  for (const ParamRange& p : model->layout()) {
    if (p.init != InitKind::kZeros) continue;
    for (size_t i = 0; i < p.size; ++i) {
      params[p.offset + i] = 0.05f * (static_cast<float>(rng.Below(1000)) / 1000.0f - 0.5f);
    }
  }
  std::vector<float> images;
  std::vector<int32_t> labels;
  MakeBatch(kBatch, model->input_size(), 5, &images, &labels);

  StepOptions step;
  step.training = true;  // dropout on (if the model has it), with a fixed mask
  step.dropout_seed = 1234;
  std::vector<float> grads(model->num_params());
  std::vector<float> scratch(model->num_params());
  const StepResult base = model->ForwardBackward(device.get(), params.data(), images.data(),
                                                 labels.data(), kBatch, grads.data(), step);
  ASSERT_TRUE(std::isfinite(base.loss));

  auto loss_at = [&](size_t index, float value) {
    const float saved = params[index];
    params[index] = value;
    const StepResult r = model->ForwardBackward(device.get(), params.data(), images.data(),
                                                labels.data(), kBatch, scratch.data(), step);
    params[index] = saved;
    return static_cast<double>(r.loss);
  };
  auto numeric_at = [&](size_t index, float h) {
    const float w = params[index];
    // Divide by the step actually taken in float.
    return (loss_at(index, w + h) - loss_at(index, w - h)) /
           (static_cast<double>(w + h) - static_cast<double>(w - h));
  };
  auto within = [&](double a, double n) {
    return std::fabs(a - n) <= tol.abs + tol.rel * std::max(std::fabs(a), std::fabs(n));
  };

  for (const ParamRange& p : model->layout()) {
    int passed = 0;
    double dot = 0.0, norm_a = 0.0, norm_n = 0.0;
    std::string report;
    for (int k = 0; k < per_tensor; ++k) {
      const size_t index = p.offset + rng.Below(p.size);
      const double analytic = grads[index];
      double numeric = numeric_at(index, 1e-3f);
      if (!within(analytic, numeric)) {
        const double retry = numeric_at(index, 3e-4f);
        if (std::fabs(retry - analytic) < std::fabs(numeric - analytic)) numeric = retry;
      }
      if (within(analytic, numeric)) {
        ++passed;
      } else {
        report += " [" + std::to_string(index - p.offset) + "] " + std::to_string(analytic) +
                  " vs " + std::to_string(numeric);
      }
      dot += analytic * numeric;
      norm_a += analytic * analytic;
      norm_n += numeric * numeric;
    }
    EXPECT_GE(passed, static_cast<int>(std::ceil(tol.min_pass * per_tensor)))
        << name << " " << p.name << ": " << passed << "/" << per_tensor
        << " entries within tolerance; misses (analytic vs numeric):" << report;
    // Every tensor here has real gradients; an all-zero one would pass the
    // absolute tolerance trivially.
    ASSERT_GT(norm_a, 1e-10) << name << " " << p.name << " has no gradient";
    const double cosine = dot / std::sqrt(norm_a * norm_n);
    EXPECT_GE(cosine, tol.min_cosine) << name << " " << p.name;
  }
}

TEST(ModelTest, MlpGradientsMatchFiniteDifferences) {
  CheckGradients("mlp", 0.0f, 40, kMlpTolerance);
}

TEST(ModelTest, DeepMlpGradientsMatchFiniteDifferences) {
  CheckGradients("mlp-64-32", 0.0f, 40, kMlpTolerance);
}

// Dropout on with a fixed seed: the mask is identical in every evaluation.
TEST(ModelTest, CnnGradientsMatchFiniteDifferences) {
  CheckGradients("cnn", 0.25f, 30, kCnnTolerance);
}

TEST(ModelTest, CnnGradientsMatchWithoutDropout) {
  CheckGradients("cnn", 0.0f, 20, kCnnTolerance);
}

// A few steps of plain SGD on one fixed batch must drive its loss down.
void CheckLossDecreases(const std::string& name, float lr) {
  constexpr int kBatch = 16;
  auto device = CpuDevice();
  auto model = MakeModel(name, kBatch);
  std::vector<float> params = InitialParams(*model, 3);
  std::vector<float> grads(model->num_params());
  std::vector<float> images;
  std::vector<int32_t> labels;
  MakeBatch(kBatch, model->input_size(), 11, &images, &labels);
  const float initial = model->Forward(device.get(), params.data(), images.data(),
                                       labels.data(), kBatch).loss;
  for (int step = 0; step < 30; ++step) {
    StepOptions options;
    options.dropout_seed = step;
    model->ForwardBackward(device.get(), params.data(), images.data(), labels.data(), kBatch,
                           grads.data(), options);
    device->SgdUpdate(params.data(), grads.data(), params.size(), lr);
  }
  const StepResult final_result =
      model->Forward(device.get(), params.data(), images.data(), labels.data(), kBatch);
  EXPECT_LT(final_result.loss, 0.3f * initial) << name << ": " << initial << " -> "
                                               << final_result.loss;
  EXPECT_EQ(final_result.correct, kBatch) << name;
}

TEST(ModelTest, MlpLossDecreasesOnAFixedBatch) { CheckLossDecreases("mlp", 0.1f); }
TEST(ModelTest, CnnLossDecreasesOnAFixedBatch) { CheckLossDecreases("cnn", 0.05f); }

TEST(ModelTest, StepIsDeterministicAndDropoutFollowsItsSeed) {
  constexpr int kBatch = 8;
  auto device = CpuDevice();
  auto model = MakeModel("cnn", kBatch);
  std::vector<float> params = InitialParams(*model, 1);
  std::vector<float> images;
  std::vector<int32_t> labels;
  MakeBatch(kBatch, model->input_size(), 2, &images, &labels);
  std::vector<float> g1(params.size()), g2(params.size()), g3(params.size());
  StepOptions a;
  a.dropout_seed = 10;
  StepOptions b;
  b.dropout_seed = 11;
  const float l1 = model->ForwardBackward(device.get(), params.data(), images.data(),
                                          labels.data(), kBatch, g1.data(), a).loss;
  const float l2 = model->ForwardBackward(device.get(), params.data(), images.data(),
                                          labels.data(), kBatch, g2.data(), a).loss;
  const float l3 = model->ForwardBackward(device.get(), params.data(), images.data(),
                                          labels.data(), kBatch, g3.data(), b).loss;
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(g1, g2);  // workspace reuse leaves no state behind
  EXPECT_NE(g1, g3);  // another dropout mask
  EXPECT_NE(l1, l3);
  // Inference ignores dropout: Forward is the same whatever the seed.
  const float f1 = model->Forward(device.get(), params.data(), images.data(), labels.data(),
                                  kBatch).loss;
  const float f2 = model->Forward(device.get(), params.data(), images.data(), labels.data(),
                                  kBatch).loss;
  EXPECT_EQ(f1, f2);
  EXPECT_NE(f1, l1);
}

TEST(ModelTest, EvaluateAveragesOverUnevenBatches) {
  auto device = CpuDevice();
  auto model = MakeModel("mlp", 32);
  std::vector<float> params = InitialParams(*model, 4);
  constexpr int kN = 37;
  std::vector<float> images;
  std::vector<int32_t> labels;
  MakeBatch(kN, model->input_size(), 8, &images, &labels);
  // One pass over all 37 at once vs batches of 10 (the last has 7).
  const StepResult whole =
      model->Forward(device.get(), params.data(), images.data(), labels.data(), kN);
  const EvalResult eval = model->Evaluate(device.get(), params.data(), images.data(),
                                          labels.data(), kN, /*eval_batch=*/10);
  EXPECT_EQ(eval.examples, static_cast<size_t>(kN));
  EXPECT_NEAR(eval.loss, whole.loss, 1e-5);
  EXPECT_DOUBLE_EQ(eval.accuracy, static_cast<double>(whole.correct) / kN);
}

TEST(ModelTest, LayoutTilesTheVectorAndInitializerFollowsIt) {
  for (const std::string name : {"mlp", "mlp-512-256", "cnn"}) {
    auto model = MakeModel(name, 32);
    size_t next = 0;
    for (const ParamRange& p : model->layout()) {
      EXPECT_EQ(p.offset, next) << name << " " << p.name;
      next += p.size;
    }
    EXPECT_EQ(next, model->num_params()) << name;
    std::vector<float> params = InitialParams(*model, 9);
    for (const ParamRange& p : model->layout()) {
      float lo = 1e30f, hi = -1e30f;
      for (size_t i = 0; i < p.size; ++i) {
        lo = std::min(lo, params[p.offset + i]);
        hi = std::max(hi, params[p.offset + i]);
      }
      if (p.init == InitKind::kZeros) {
        EXPECT_EQ(lo, 0.0f) << name << " " << p.name;
        EXPECT_EQ(hi, 0.0f) << name << " " << p.name;
      } else {
        ASSERT_EQ(p.init, InitKind::kUniform);
        EXPECT_GE(lo, p.a) << p.name;
        EXPECT_LE(hi, p.b) << p.name;
        // Spread over most of the range, not a constant.
        EXPECT_LT(lo, 0.8f * p.a) << p.name;
        EXPECT_GT(hi, 0.8f * p.b) << p.name;
      }
    }
  }
  auto cnn = MakeModel("cnn", 32);
  // conv 16*9+16, conv 32*144+32, fc 1568*512+512, fc 512*10+10.
  EXPECT_EQ(cnn->num_params(), 160u + 4640u + 803328u + 5130u);
  EXPECT_EQ(MakeModel("mlp", 32)->num_params(), 784u * 256 + 256 + 256 * 10 + 10);
  EXPECT_EQ(MakeModel("mlp-512-256", 32)->Name(), "mlp-512-256");
}

// The same model on the CUDA back end (when this machine has a GPU) gives
// the CPU's loss and gradients within float tolerance, and the same
// evaluation. Dropout is off: the back ends need not share a random stream.
TEST(ModelTest, CudaMatchesCpu) {
  if (!kernels::BuiltWithCuda() || kernels::CudaDeviceCount() == 0) {
    GTEST_SKIP() << "no CUDA device";
  }
  kernels::DeviceOptions cuda_options;
  cuda_options.type = kernels::DeviceType::kCuda;
  auto cuda = kernels::NewDevice(cuda_options);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  auto cpu = CpuDevice();
  for (const std::string name : {"mlp", "cnn"}) {
    constexpr int kBatch = 32;
    auto model = MakeModel(name, kBatch, /*dropout=*/0.0f);
    std::vector<float> params = InitialParams(*model, 21);
    std::vector<float> images;
    std::vector<int32_t> labels;
    MakeBatch(kBatch, model->input_size(), 4, &images, &labels);
    const size_t n = params.size();

    std::vector<float> cpu_grads(n);
    const StepResult on_cpu = model->ForwardBackward(cpu.get(), params.data(), images.data(),
                                                     labels.data(), kBatch, cpu_grads.data());
    kernels::DeviceBuffer<float> d_params(cuda->get(), n), d_grads(cuda->get(), n);
    (*cuda)->CopyToDevice(d_params.data(), params.data(), n * sizeof(float));
    const StepResult on_gpu = model->ForwardBackward(
        cuda->get(), d_params.data(), images.data(), labels.data(), kBatch, d_grads.data());
    std::vector<float> gpu_grads(n);
    (*cuda)->CopyToHost(gpu_grads.data(), d_grads.data(), n * sizeof(float));

    EXPECT_NEAR(on_gpu.loss, on_cpu.loss, 1e-4f * std::max(1.0f, on_cpu.loss)) << name;
    EXPECT_EQ(on_gpu.correct, on_cpu.correct) << name;
    for (const ParamRange& p : model->layout()) {
      float scale = 0.0f, worst = 0.0f;
      for (size_t i = p.offset; i < p.offset + p.size; ++i) {
        scale = std::max(scale, std::fabs(cpu_grads[i]));
        worst = std::max(worst, std::fabs(cpu_grads[i] - gpu_grads[i]));
      }
      // TF32 or a different summation order: 1e-3 of the tensor's largest entry.
      EXPECT_LE(worst, 1e-3f * scale + 1e-6f) << name << " " << p.name;
    }
    const EvalResult e_cpu = model->Evaluate(cpu.get(), params.data(), images.data(),
                                             labels.data(), kBatch, 10);
    const EvalResult e_gpu = model->Evaluate(cuda->get(), d_params.data(), images.data(),
                                             labels.data(), kBatch, 10);
    EXPECT_NEAR(e_gpu.loss, e_cpu.loss, 1e-4 * std::max(1.0, e_cpu.loss)) << name;
    EXPECT_NEAR(e_gpu.accuracy, e_cpu.accuracy, 1.0 / kBatch + 1e-9) << name;
    model.reset();  // frees its CUDA workspaces before the device goes
  }
}

TEST(ModelTest, FactoryRejectsBadOptions) {
  EXPECT_FALSE(NewModel("resnet", 32).ok());
  EXPECT_FALSE(NewModel("mlp-", 32).ok());
  EXPECT_FALSE(NewModel("mlp-12x", 32).ok());
  EXPECT_FALSE(NewModel("mlp-0", 32).ok());
  EXPECT_FALSE(NewModel("cnn", 0).ok());
  ModelOptions options;
  options.dropout = 1.0f;
  EXPECT_EQ(NewModel(options).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainer
}  // namespace relaxps
