// PsParams against a real coordinator and server (LocalCluster), and the
// worker binary in parameter-server mode: table creation by every worker,
// initial values from the model's initializer, updates applied by the
// server-side optimizer, traffic counters, and bounded failure when the
// server dies.
#include "apps/trainer/ps_params.h"

#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "apps/trainer/model.h"
#include "client/client.h"
#include "kernels/device.h"
#include "tests/test_util.h"

namespace relaxps {
namespace trainer {
namespace {

using test::LocalCluster;
using test::LocalClusterOptions;
using test::Millis;

class PsParamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::MakeTempDir();
    LocalClusterOptions options;
    options.num_servers = 2;  // the table spans both, so requests are split
    auto cluster = LocalCluster::Start(dir_, options);
    ASSERT_OK(cluster);
    cluster_ = std::move(*cluster);
    auto device = kernels::NewDevice(kernels::DeviceOptions());
    ASSERT_OK(device);
    device_ = std::move(*device);
    auto model = NewModel("mlp-16", 8);
    ASSERT_OK(model);
    model_ = std::move(*model);
  }
  void TearDown() override {
    cluster_.reset();
    test::RemoveTree(dir_);
  }

  std::unique_ptr<Client> Connect(int timeout_ms = 5000) {
    ClientOptions options;
    options.coordinator = cluster_->coordinator_endpoint();
    options.request_timeout_ms = timeout_ms * test::TimeScale();
    auto client = Client::Connect(options);
    EXPECT_OK(client);
    return client.ok() ? std::move(*client) : nullptr;
  }

  PsParamsOptions Options(const std::string& optimizer = "sgd") {
    PsParamsOptions options;
    options.table.name = "model";
    options.table.type = TableType::kDense;
    options.table.size = model_->num_params();
    options.table.optimizer.name = optimizer;
    options.table.optimizer.lr = 0.5f;
    options.table.init = model_->MakeInitializer(42);
    options.wait_timeout_ms = 15000;
    return options;
  }

  std::string dir_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<kernels::Device> device_;
  std::unique_ptr<Model> model_;
};

TEST_F(PsParamsTest, EveryWorkerCreatesTheTableAndSeesTheInitializer) {
  auto c1 = Connect();
  auto c2 = Connect();
  ASSERT_NE(c1, nullptr);
  ASSERT_NE(c2, nullptr);
  auto p1 = NewPsParams(c1.get(), device_.get(), Options());
  ASSERT_OK(p1);
  auto p2 = NewPsParams(c2.get(), device_.get(), Options());
  ASSERT_OK(p2);
  std::vector<float> expected(model_->num_params());
  model_->MakeInitializer(42).Fill(0, expected.size(), expected.data());
  const std::vector<float> got1((*p1)->params(), (*p1)->params() + expected.size());
  const std::vector<float> got2((*p2)->params(), (*p2)->params() + expected.size());
  EXPECT_EQ(got1, expected);
  EXPECT_EQ(got2, expected);

  // Same name, other options: refused, and the error names the table.
  PsParamsOptions other = Options();
  other.table.optimizer.lr = 0.25f;
  auto bad = NewPsParams(c2.get(), device_.get(), other);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'model'"), std::string::npos) << bad.status();
}

TEST_F(PsParamsTest, UpdateAppliesTheServerOptimizerAndReturnsFreshParams) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  PsParamsOptions options = Options("sgd");
  options.pipeline_async = false;  // Each Update returns the parameters it produced.
  auto made = NewPsParams(client.get(), device_.get(), options);
  ASSERT_OK(made);
  ParamSource* ps = made->get();
  const size_t n = ps->size();
  std::vector<float> before(ps->params(), ps->params() + n);
  for (int step = 1; step <= 3; ++step) {
    float* g = ps->grads();
    for (size_t i = 0; i < n; ++i) g[i] = 0.01f * static_cast<float>(i % 7);
    ASSERT_OK(ps->Update());
    ASSERT_OK(ps->Clock());
    EXPECT_EQ(ps->clock(), step);
    for (size_t i = 0; i < n; i += 97) {
      // w = w0 - step * lr * g
      EXPECT_NEAR(ps->params()[i], before[i] - step * 0.5f * 0.01f * (i % 7), 1e-5)
          << "key " << i << " after step " << step;
    }
  }
  const TrafficStats traffic = ps->stats();
  // Three push-pulls of n floats each way, plus the initial pull.
  EXPECT_GE(traffic.bytes_sent, 3 * n * sizeof(float));
  EXPECT_GE(traffic.bytes_received, 4 * n * sizeof(float));
}

TEST_F(PsParamsTest, DeadServerFailsTheUpdateInBoundedTimeAndKeepsParams) {
  auto client = Connect(/*timeout_ms=*/1500);
  ASSERT_NE(client, nullptr);
  PsParamsOptions options = Options();
  options.wait_timeout_ms = 5000;
  options.pipeline_async = false;
  auto made = NewPsParams(client.get(), device_.get(), options);
  ASSERT_OK(made);
  ParamSource* ps = made->get();
  const std::vector<float> before(ps->params(), ps->params() + ps->size());
  cluster_->server(1)->Kill(SIGKILL);
  ASSERT_OK(cluster_->server(1)->Wait(Millis(5000)));

  std::fill(ps->grads(), ps->grads() + ps->size(), 1.0f);
  const auto start = std::chrono::steady_clock::now();
  Status s = ps->Update();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.code() == StatusCode::kUnavailable ||
              s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kAborted)
      << s;
  EXPECT_NE(s.message().find("push-pull of table 'model'"), std::string::npos) << s;
  EXPECT_LT(waited, 10.0);
  const std::vector<float> after(ps->params(), ps->params() + ps->size());
  EXPECT_EQ(after, before) << "a failed update must leave the parameters alone";
}

// Async pipelining: each Update overlaps its PushPull with the next step, so
// the parameters lag one update behind; a dead server still surfaces, at the
// next Update, within bounded time and without touching the parameters.
TEST_F(PsParamsTest, PipelinedAsyncUpdatesLagOneStepAndStillFailCleanly) {
  auto client = Connect(/*timeout_ms=*/1500);
  ASSERT_NE(client, nullptr);
  PsParamsOptions options = Options("sgd");
  options.wait_timeout_ms = 5000;
  ASSERT_TRUE(options.pipeline_async);
  auto made = NewPsParams(client.get(), device_.get(), options);
  ASSERT_OK(made);
  ParamSource* ps = made->get();
  const size_t n = ps->size();
  const std::vector<float> before(ps->params(), ps->params() + n);
  for (int step = 1; step <= 3; ++step) {
    std::fill(ps->grads(), ps->grads() + n, 0.01f);
    ASSERT_OK(ps->Update());
    ASSERT_OK(ps->Clock());
    // After Update k the parameters reflect the first k - 1 pushes.
    for (size_t i = 0; i < n; i += 97) {
      EXPECT_NEAR(ps->params()[i], before[i] - (step - 1) * 0.5f * 0.01f, 1e-5)
          << "key " << i << " after step " << step;
    }
  }
  // The trainer's end: Finish() waits for the last PushPull, so the
  // acknowledged count is every step's (the final event's acked_updates,
  // which the experiments compare with what the servers applied). It counts
  // push parts: one per server (2) and update.
  ASSERT_OK(ps->Finish());
  EXPECT_EQ(ps->stats().acked_updates, 3u * 2);
  ASSERT_OK(ps->Finish());  // Nothing left in flight: a no-op.
  EXPECT_EQ(ps->stats().acked_updates, 3u * 2);
  const std::vector<float> last(ps->params(), ps->params() + n);
  cluster_->server(1)->Kill(SIGKILL);
  ASSERT_OK(cluster_->server(1)->Wait(Millis(5000)));
  const auto start = std::chrono::steady_clock::now();
  Status s = ps->Update();  // Sends a push to the dead server ...
  if (s.ok()) s = ps->Update();  // ... and fails collecting its reply.
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(s.ok());
  EXPECT_LT(waited, 10.0);
  EXPECT_NE(s.message().find("push-pull of table 'model'"), std::string::npos) << s;
}

// SSP: each Update pushes (the two gradient buffers alternate while a push is
// in flight) and each Clock pulls; with staleness 0 and one worker the pull
// reflects every push so far. Different gradients per step expose a buffer
// reused too early.
TEST_F(PsParamsTest, SspPushesEveryGradientOnceWithAlternatingBuffers) {
  cluster_.reset();
  const std::string ssp_dir = dir_ + "/ssp";  // Fresh logs and endpoint files.
  ASSERT_EQ(::mkdir(ssp_dir.c_str(), 0755), 0);
  LocalClusterOptions cluster_options;
  cluster_options.num_servers = 2;
  cluster_options.coordinator_flags = {"--consistency=ssp", "--staleness=0"};
  auto cluster = LocalCluster::Start(ssp_dir, cluster_options);
  ASSERT_OK(cluster);
  cluster_ = std::move(*cluster);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(client->job().consistency, ConsistencyModel::kSsp);
  auto made = NewPsParams(client.get(), device_.get(), Options("sgd"));
  ASSERT_OK(made);
  ParamSource* ps = made->get();
  const size_t n = ps->size();
  const std::vector<float> before(ps->params(), ps->params() + n);
  for (int step = 1; step <= 4; ++step) {
    float* g = ps->grads();
    for (size_t i = 0; i < n; ++i) g[i] = 0.01f * step * static_cast<float>(i % 7);
    ASSERT_OK(ps->Update());
    ASSERT_OK(ps->Clock());
    const float pushed = 0.01f * step * (step + 1) / 2;  // sum of the step factors
    for (size_t i = 0; i < n; i += 97) {
      EXPECT_NEAR(ps->params()[i], before[i] - 0.5f * pushed * (i % 7), 1e-5)
          << "key " << i << " after step " << step;
    }
  }
  ASSERT_OK(ps->Finish());
  EXPECT_EQ(ps->stats().acked_updates, 4u * 2);  // A part per server and update.
}

// On CUDA the host buffers are page-locked staging buffers and the copies run
// on the device's copy stream, ordered by events; parameters come out as on
// the CPU, with the pipeline's double-buffered uploads and without.
TEST_F(PsParamsTest, CudaStagesThroughPageLockedBuffers) {
  if (kernels::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA GPU visible";
  kernels::DeviceOptions cuda;
  cuda.type = kernels::DeviceType::kCuda;
  auto gpu = kernels::NewDevice(cuda);
  ASSERT_OK(gpu);
  kernels::Device* device = gpu->get();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::vector<float> initial(model_->num_params());
  model_->MakeInitializer(42).Fill(0, initial.size(), initial.data());
  for (bool pipeline : {false, true}) {
    SCOPED_TRACE(pipeline ? "pipelined" : "one round trip per step");
    PsParamsOptions options = Options("sgd");
    options.table.name = pipeline ? "pipelined" : "plain";
    options.pipeline_async = pipeline;
    auto made = NewPsParams(client.get(), device, options);
    ASSERT_OK(made);
    ParamSource* ps = made->get();
    const size_t n = ps->size();
    auto read_params = [&] {
      std::vector<float> host(n);
      device->CopyToHost(host.data(), ps->params(), n * sizeof(float));
      return host;
    };
    EXPECT_EQ(read_params(), initial);
    std::vector<float> g(n);
    for (int step = 1; step <= 4; ++step) {
      for (size_t i = 0; i < n; ++i) g[i] = 0.01f * step * static_cast<float>(i % 7);
      device->CopyToDevice(ps->grads(), g.data(), n * sizeof(float));
      ASSERT_OK(ps->Update());
      ASSERT_OK(ps->Clock());
      // The pipeline's parameters lag one push behind.
      const int applied = pipeline ? step - 1 : step;
      const float pushed = 0.01f * applied * (applied + 1) / 2;
      const std::vector<float> now = read_params();
      for (size_t i = 0; i < n; i += 97) {
        EXPECT_NEAR(now[i], initial[i] - 0.5f * pushed * (i % 7), 1e-5)
            << "key " << i << " after step " << step;
      }
    }
  }
}

// The worker binary in PS mode: two workers share the job and the data.
TEST_F(PsParamsTest, TwoWorkerProcessesTrainThroughTheServers) {
  const char kData[] = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  if (access(kData, R_OK) != 0) GTEST_SKIP() << "Fashion-MNIST not installed";
  std::vector<std::unique_ptr<test::Subprocess>> workers;
  for (int i = 0; i < 2; ++i) {
    auto w = cluster_->StartWorker(
        "worker-" + std::to_string(i),
        // Sanitized runs train twice the scaled time: the instrumented
        // trainer is slower than the time scale (TSan, 6 s x 5: 183 steps,
        // test accuracy 0.69).
        {"--model=mlp",
         "--duration_s=" + std::to_string(6 * test::TimeScale() * (test::TimeScale() > 1 ? 2 : 1)),
         "--num_workers=2", "--log_every_s=1",
         "--eval_every_s=0", "--metrics_csv=" + dir_ + "/w" + std::to_string(i) + ".csv"});
    ASSERT_OK(w);
    workers.push_back(std::move(*w));
  }
  std::vector<std::string> finals;
  for (auto& w : workers) {
    auto code = w->Wait(Millis(90000));
    ASSERT_OK(code) << w->Log();
    EXPECT_EQ(*code, 0) << w->Log();
    const auto lines = test::GrepLines(w->Log(), "^final worker=");
    ASSERT_EQ(lines.size(), 1u) << w->Log();
    finals.push_back(lines[0]);
  }
  // Ids 0 and 1 from the coordinator; worker 0 evaluated at the end.
  const bool zero_first = finals[0].find("final worker=0 ") == 0;
  const std::string& w0 = zero_first ? finals[0] : finals[1];
  const std::string& w1 = zero_first ? finals[1] : finals[0];
  ASSERT_EQ(w0.find("final worker=0 "), 0u) << w0;
  ASSERT_EQ(w1.find("final worker=1 "), 0u) << w1;
  const size_t at = w0.find(" test_acc=");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(w0.substr(at + 10)), 0.7) << w0;
  EXPECT_NE(w1.find(" test_acc=nan"), std::string::npos) << w1;
  // Traffic shows up in the metrics.
  for (int i = 0; i < 2; ++i) {
    auto csv = test::ReadFile(dir_ + "/w" + std::to_string(i) + ".csv");
    ASSERT_OK(csv);
    const auto rows = test::GrepLines(*csv, "^[0-9]");
    ASSERT_FALSE(rows.empty());
    // bytes_sent is the 9th column.
    std::string last = rows.back();
    for (int k = 0; k < 8; ++k) last = last.substr(last.find(',') + 1);
    EXPECT_GT(std::stoull(last.substr(0, last.find(','))), 1000000u) << rows.back();
  }
}

}  // namespace
}  // namespace trainer
}  // namespace relaxps
