// Tests of the training loop on a small synthetic data set: stopping rules,
// metrics rows and lines, local parameters, and error propagation from a
// failing parameter source.
#include "apps/trainer/trainer.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "apps/trainer/param_source.h"
#include "tests/apps/synthetic_data.h"

namespace relaxps {
namespace trainer {
namespace {

using test_data::MakeDataset;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kernels::DeviceOptions options;
    auto device = kernels::NewDevice(options);
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
    data_.train = MakeDataset(640, 1);
    data_.test = MakeDataset(200, 2);
    auto model = NewModel("mlp", 16);
    ASSERT_TRUE(model.ok());
    model_ = std::move(*model);
    char tmpl[] = "/tmp/relaxps_trainer_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) {
      std::remove((dir_ + "/metrics.csv").c_str());
      rmdir(dir_.c_str());
    }
  }

  std::unique_ptr<ParamSource> Local(float lr = 0.05f) {
    LocalParamsOptions options;
    options.size = model_->num_params();
    options.init = model_->MakeInitializer(3);
    options.optimizer.name = "momentum";
    options.optimizer.lr = lr;
    auto source = NewLocalParams(device_.get(), options);
    EXPECT_TRUE(source.ok()) << source.status();
    return std::move(*source);
  }

  // Progress output goes to a temporary FILE we read back.
  std::string ReadAll(FILE* f) {
    std::fflush(f);
    std::rewind(f);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    return out;
  }

  std::unique_ptr<kernels::Device> device_;
  FashionMnist data_;
  std::unique_ptr<Model> model_;
  std::string dir_;
};

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

TEST_F(TrainerTest, TrainsForEpochsAndWritesMetrics) {
  auto source = Local();
  FILE* progress = std::tmpfile();
  TrainerOptions options;
  options.epochs = 3;
  options.eval_every_s = 0;
  options.log_every_s = 0;
  options.metrics_csv = dir_ + "/metrics.csv";
  options.progress = progress;
  auto trainer = Trainer::Create(options, device_.get(), model_.get(), source.get(), &data_);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  StatusOr<TrainResult> result = (*trainer)->Run();
  ASSERT_TRUE(result.ok()) << result.status();
  // 640 examples, batch 16: 40 steps per epoch.
  EXPECT_EQ(result->steps, 120);
  EXPECT_EQ(result->samples, 120 * 16);
  EXPECT_EQ(result->epochs, 3);
  EXPECT_EQ(source->clock(), 120);
  EXPECT_GT(result->test_acc, 0.9) << "the synthetic classes are easy";
  EXPECT_FALSE(result->stopped);

  const std::vector<std::string> out = Lines(ReadAll(progress));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].rfind("final worker=0 ", 0), 0u) << out[0];
  EXPECT_NE(out[0].find(" clock=120 "), std::string::npos) << out[0];
  EXPECT_NE(out[0].find(" test_acc="), std::string::npos) << out[0];
  std::fclose(progress);

  std::ifstream csv(options.metrics_csv);
  std::stringstream text;
  text << csv.rdbuf();
  const std::vector<std::string> rows = Lines(text.str());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0],
            "time_s,worker,clock,samples,loss,train_acc,test_acc,samples_per_s,bytes_sent,"
            "bytes_received,epoch,test_loss,staleness_mean,staleness_max,gate_wait_s,cache_hits");
  // time_s,worker,clock,samples,...
  EXPECT_NE(rows[1].find(",0,120,1920,"), std::string::npos) << rows[1];
}

TEST_F(TrainerTest, PeriodicRowsAndEvaluationsOnlyOnWorkerZero) {
  for (int worker : {0, 1}) {
    auto source = Local();
    FILE* progress = std::tmpfile();
    TrainerOptions options;
    options.worker_index = worker;
    options.num_workers = 2;
    options.duration_s = 0.6;
    options.eval_every_s = 0.2;
    options.eval_examples = 50;
    options.log_every_s = 0.1;
    options.straggle_ms = 5;  // keeps the run to a modest number of steps
    options.progress = progress;
    auto trainer = Trainer::Create(options, device_.get(), model_.get(), source.get(), &data_);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    StatusOr<TrainResult> result = (*trainer)->Run();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_GE(result->elapsed_s, 0.6);
    EXPECT_LT(result->elapsed_s, 5.0);
    const std::vector<std::string> out = Lines(ReadAll(progress));
    std::fclose(progress);
    ASSERT_GE(out.size(), 3u) << worker;
    const std::string worker_key = "worker=" + std::to_string(worker) + " ";
    for (size_t i = 0; i + 1 < out.size(); ++i) {
      EXPECT_EQ(out[i].rfind("progress " + worker_key, 0), 0u) << out[i];
    }
    EXPECT_EQ(out.back().rfind("final " + worker_key, 0), 0u) << out.back();
    const bool evaluated = out.back().find("test_acc=nan") == std::string::npos;
    EXPECT_EQ(evaluated, worker == 0) << out.back();
    if (worker == 1) {
      EXPECT_TRUE(std::isnan(result->test_acc));
    }
  }
}

TEST_F(TrainerTest, StopFlagEndsAfterTheCurrentStep) {
  auto source = Local();
  FILE* progress = std::tmpfile();
  TrainerOptions options;
  options.duration_s = 60;
  options.progress = progress;
  auto trainer = Trainer::Create(options, device_.get(), model_.get(), source.get(), &data_);
  ASSERT_TRUE(trainer.ok());
  std::atomic<bool> stop{true};
  StatusOr<TrainResult> result = (*trainer)->Run(&stop);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->stopped);
  EXPECT_EQ(result->steps, 0);
  const std::string out = ReadAll(progress);
  std::fclose(progress);
  EXPECT_NE(out.find("stopped=1"), std::string::npos) << out;
}

// Forwards every call to `inner` (leveldb's EnvWrapper): a fake overrides
// only what it changes.
class ForwardingSource : public ParamSource {
 public:
  explicit ForwardingSource(ParamSource* inner) : inner_(inner) {}
  std::string Name() const override { return "forwarding"; }
  size_t size() const override { return inner_->size(); }
  const float* params() const override { return inner_->params(); }
  float* grads() override { return inner_->grads(); }
  Status Update() override { return inner_->Update(); }
  Status Clock() override { return inner_->Clock(); }
  int64_t clock() const override { return inner_->clock(); }
  TrafficStats stats() const override { return inner_->stats(); }

 private:
  ParamSource* inner_;
};

// A parameter source whose Update fails at a given step.
class FailingSource : public ForwardingSource {
 public:
  FailingSource(ParamSource* inner, int fail_at) : ForwardingSource(inner), fail_at_(fail_at) {}
  Status Update() override {
    if (updates_++ == fail_at_) return UnavailableError("server 1 at tcp://x:1 is down");
    return ForwardingSource::Update();
  }

 private:
  int fail_at_;
  int updates_ = 0;
};

// A parameter source on a fake clock: writing the gradient "takes"
// compute_ms, the parameter server's answer wait_ms.
class TimedSource : public ForwardingSource {
 public:
  TimedSource(ParamSource* inner, FakeClock* clock, int compute_ms, int wait_ms)
      : ForwardingSource(inner), clock_(clock), compute_ms_(compute_ms), wait_ms_(wait_ms) {}
  float* grads() override {
    clock_->AdvanceMs(compute_ms_);
    return ForwardingSource::grads();
  }
  Status Update() override {
    clock_->AdvanceMs(wait_ms_);
    return ForwardingSource::Update();
  }

 private:
  FakeClock* clock_;
  const int compute_ms_, wait_ms_;
};

TEST_F(TrainerTest, StepLogMeasuresComputeTimeWithoutWaitsOnTheServer) {
  auto local = Local();
  FakeClock clock;
  TimedSource source(local.get(), &clock, /*compute_ms=*/3, /*wait_ms=*/7);
  TrainerOptions options;
  options.epochs = 1;  // 40 steps
  options.eval_every_s = 0;
  options.log_every_s = 0;
  options.final_eval = false;
  options.steps_csv = dir_ + "/steps.csv";
  options.progress = std::tmpfile();
  options.clock = &clock;
  EventLogOptions events;
  events.path = dir_ + "/events.jsonl";
  StatusOr<std::shared_ptr<EventLog>> log = EventLog::Open(events);
  ASSERT_TRUE(log.ok()) << log.status();
  options.events = *log;
  {
    auto trainer = Trainer::Create(options, device_.get(), model_.get(), &source, &data_);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    StatusOr<TrainResult> result = (*trainer)->Run();
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->steps, 40);
  }  // The step log is flushed.
  std::fclose(options.progress);

  std::ifstream csv(options.steps_csv);
  std::stringstream text;
  text << csv.rdbuf();
  const std::vector<std::string> rows = Lines(text.str());
  ASSERT_EQ(rows.size(), 41u);
  EXPECT_EQ(rows[0], "time_s,clock,staleness,gate_wait_ms,cache_hit,loss,compute_ms");
  for (size_t i = 1; i < rows.size(); ++i) {
    // Step i ends 10 ms after step i-1; 3 of them computing.
    char expected_time[32];
    std::snprintf(expected_time, sizeof(expected_time), "%.4f,", 0.010 * i);
    EXPECT_EQ(rows[i].rfind(expected_time, 0), 0u) << rows[i];
    EXPECT_EQ(rows[i].substr(rows[i].rfind(',')), ",3.000") << rows[i];
  }
  std::ifstream jsonl(events.path);
  std::stringstream lines;
  lines << jsonl.rdbuf();
  const size_t at = lines.str().find("\"compute_s\":");
  ASSERT_NE(at, std::string::npos) << lines.str();
  EXPECT_NEAR(std::strtod(lines.str().c_str() + at + 12, nullptr), 40 * 0.003, 1e-9);
  std::remove(options.steps_csv.c_str());
  std::remove(events.path.c_str());
}

TEST_F(TrainerTest, ParameterServerFailureIsReturnedWithItsCode) {
  auto local = Local();
  FailingSource source(local.get(), 5);
  TrainerOptions options;
  options.duration_s = 60;
  options.progress = std::tmpfile();
  auto trainer = Trainer::Create(options, device_.get(), model_.get(), &source, &data_);
  ASSERT_TRUE(trainer.ok());
  StatusOr<TrainResult> result = (*trainer)->Run();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(result.status().message().find("worker 0 at step 5"), std::string::npos)
      << result.status();
  EXPECT_NE(result.status().message().find("server 1"), std::string::npos);
  std::fclose(options.progress);
}

TEST_F(TrainerTest, DivergenceIsReported) {
  auto source = Local(/*lr=*/1e6f);
  TrainerOptions options;
  options.epochs = 5;
  options.progress = std::tmpfile();
  auto trainer = Trainer::Create(options, device_.get(), model_.get(), source.get(), &data_);
  ASSERT_TRUE(trainer.ok());
  StatusOr<TrainResult> result = (*trainer)->Run();
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("diverged"), std::string::npos) << result.status();
  std::fclose(options.progress);
}

TEST_F(TrainerTest, CreateRejectsInconsistentOptions) {
  auto source = Local();
  TrainerOptions options;
  options.worker_index = 2;
  options.num_workers = 2;
  EXPECT_FALSE(Trainer::Create(options, device_.get(), model_.get(), source.get(), &data_).ok());
  options.worker_index = 0;
  options.metrics_csv = "/nonexistent-dir/metrics.csv";
  auto bad_csv = Trainer::Create(options, device_.get(), model_.get(), source.get(), &data_);
  ASSERT_FALSE(bad_csv.ok());
  EXPECT_NE(bad_csv.status().message().find("/nonexistent-dir/metrics.csv"), std::string::npos);
  auto cnn = NewModel("cnn", 16);
  ASSERT_TRUE(cnn.ok());
  options.metrics_csv.clear();
  EXPECT_FALSE(Trainer::Create(options, device_.get(), cnn->get(), source.get(), &data_).ok())
      << "source size does not match the model";
}

}  // namespace
}  // namespace trainer
}  // namespace relaxps
