// The evaluator (--role=evaluator) against a real coordinator and server
// (LocalCluster): it evaluates exactly the parameters the server holds, every
// interval, waits for the table without hanging, rejects a table that does
// not fit the model, and survives a dead server.
#include "apps/trainer/evaluator.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "apps/trainer/model.h"
#include "apps/trainer/ps_params.h"
#include "client/client.h"
#include "kernels/device.h"
#include "tests/apps/synthetic_data.h"
#include "tests/test_util.h"

namespace relaxps {
namespace trainer {
namespace {

using test::LocalCluster;
using test::LocalClusterOptions;

class EvaluatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::MakeTempDir();
    auto cluster = LocalCluster::Start(dir_, LocalClusterOptions());
    ASSERT_OK(cluster);
    cluster_ = std::move(*cluster);
    auto device = kernels::NewDevice(kernels::DeviceOptions());
    ASSERT_OK(device);
    device_ = std::move(*device);
    auto model = NewModel("mlp-16", 8);
    ASSERT_OK(model);
    model_ = std::move(*model);
    data_.train = test_data::MakeDataset(64, 1);
    data_.test = test_data::MakeDataset(300, 2);
    devnull_ = std::fopen("/dev/null", "w");
    ASSERT_NE(devnull_, nullptr);
  }
  void TearDown() override {
    if (devnull_ != nullptr) std::fclose(devnull_);
    cluster_.reset();
    test::RemoveTree(dir_);
  }

  std::unique_ptr<Client> Connect(const std::string& role) {
    ClientOptions options;
    options.coordinator = cluster_->coordinator_endpoint();
    options.role = role;
    options.request_timeout_ms = 5000;
    auto client = Client::Connect(options);
    EXPECT_OK(client);
    return client.ok() ? std::move(*client) : nullptr;
  }

  // The table as a worker creates it; returns the worker's parameter source.
  std::unique_ptr<ParamSource> CreateTable(Client* worker, size_t size) {
    PsParamsOptions options;
    options.table.name = "model";
    options.table.type = TableType::kDense;
    options.table.size = size;
    options.table.optimizer.name = "sgd";
    options.table.optimizer.lr = 0.1f;
    options.table.init = model_->MakeInitializer(7);
    auto source = NewPsParams(worker, device_.get(), options);
    EXPECT_OK(source);
    return source.ok() ? std::move(*source) : nullptr;
  }

  EvaluatorOptions Options() {
    EvaluatorOptions options;
    options.eval_every_s = 0.2;
    options.duration_s = 1.0;
    options.pull_timeout_ms = 2000;
    options.metrics_csv = dir_ + "/evaluator.csv";
    options.progress = devnull_;
    return options;
  }

  std::string dir_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<kernels::Device> device_;
  std::unique_ptr<Model> model_;
  FashionMnist data_;
  FILE* devnull_ = nullptr;
};

TEST_F(EvaluatorTest, EvaluatesTheServersParametersEveryInterval) {
  std::unique_ptr<Client> worker = Connect("worker");
  std::unique_ptr<ParamSource> source = CreateTable(worker.get(), model_->num_params());
  ASSERT_NE(source, nullptr);
  const EvalResult expected = model_->Evaluate(device_.get(), source->params(),
                                               data_.test.images.data(),
                                               data_.test.labels.data(), data_.test.size());
  std::unique_ptr<Client> observer = Connect("observer");
  auto evaluator =
      Evaluator::Create(Options(), observer.get(), device_.get(), model_.get(), &data_);
  ASSERT_OK(evaluator);
  auto result = (*evaluator)->Run(nullptr);
  ASSERT_OK(result);
  // 1 s at 0.2 s intervals, plus the final one; slack for a loaded machine.
  EXPECT_GE(result->evaluations, 3);
  EXPECT_EQ(result->failed_pulls, 0);
  EXPECT_DOUBLE_EQ(result->test_acc, expected.accuracy);
  EXPECT_NEAR(result->test_loss, expected.loss, 1e-6);

  std::ifstream csv(dir_ + "/evaluator.csv");
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  EXPECT_EQ(line, "time_s,unix_s,params_clock,test_acc,test_loss,eval_s");
  int rows = 0;
  double last_time = -1;
  while (std::getline(csv, line)) {
    ++rows;
    const double t = std::stod(line.substr(0, line.find(',')));
    EXPECT_GT(t, last_time) << line;
    last_time = t;
  }
  EXPECT_EQ(rows, result->evaluations);
}

TEST_F(EvaluatorTest, WaitsForTheTableAndStopsWhenAsked) {
  std::unique_ptr<Client> observer = Connect("observer");
  EvaluatorOptions options = Options();
  options.duration_s = 0;  // only the stop flag ends it
  auto evaluator = Evaluator::Create(options, observer.get(), device_.get(), model_.get(), &data_);
  ASSERT_OK(evaluator);
  std::atomic<bool> stop{false};
  std::thread stopper([&stop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    stop.store(true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto result = (*evaluator)->Run(&stop);
  stopper.join();
  ASSERT_OK(result);
  EXPECT_EQ(result->evaluations, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST_F(EvaluatorTest, RejectsATableThatDoesNotFitTheModel) {
  std::unique_ptr<Client> worker = Connect("worker");
  ASSERT_NE(CreateTable(worker.get(), model_->num_params() + 1), nullptr);
  std::unique_ptr<Client> observer = Connect("observer");
  auto evaluator =
      Evaluator::Create(Options(), observer.get(), device_.get(), model_.get(), &data_);
  ASSERT_OK(evaluator);
  auto result = (*evaluator)->Run(nullptr);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument) << result.status();
}

TEST_F(EvaluatorTest, CountsFailedPullsWhenTheServerDiesAndKeepsGoing) {
  std::unique_ptr<Client> worker = Connect("worker");
  ASSERT_NE(CreateTable(worker.get(), model_->num_params()), nullptr);
  std::unique_ptr<Client> observer = Connect("observer");
  EvaluatorOptions options = Options();
  options.duration_s = 3.0 * test::TimeScale();
  options.pull_timeout_ms = 500;
  auto evaluator = Evaluator::Create(options, observer.get(), device_.get(), model_.get(), &data_);
  ASSERT_OK(evaluator);
  // Killed once an evaluation is in the CSV (its header and one row): a
  // fixed delay was too short for the first one under a loaded TSan run.
  std::thread killer([this, csv = options.metrics_csv] {
    const auto give_up = std::chrono::steady_clock::now() + test::Scaled(test::Millis(2500));
    while (std::chrono::steady_clock::now() < give_up) {
      StatusOr<std::string> text = test::ReadFile(csv);
      if (text.ok() && std::count(text->begin(), text->end(), '\n') >= 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    cluster_->server(0)->Kill(SIGKILL);
  });
  auto result = (*evaluator)->Run(nullptr);
  killer.join();
  ASSERT_OK(result);
  EXPECT_GE(result->evaluations, 1);
  EXPECT_GE(result->failed_pulls, 1);
}

// A failed pull is retried retry_s later, not at the next interval: with
// evaluations due once a minute, a dead server still gets a pull every
// 0.2 s (the evaluator is blind for as long as the outage, no longer).
TEST_F(EvaluatorTest, RetriesAFailedPullSoonerThanTheNextInterval) {
  std::unique_ptr<Client> worker = Connect("worker");
  ASSERT_NE(CreateTable(worker.get(), model_->num_params()), nullptr);
  std::unique_ptr<Client> observer = Connect("observer");
  cluster_->server(0)->Kill(SIGKILL);
  EvaluatorOptions options = Options();
  options.eval_every_s = 60;
  options.retry_s = 0.2;
  options.pull_timeout_ms = 100;
  options.duration_s = 1.5;
  auto evaluator = Evaluator::Create(options, observer.get(), device_.get(), model_.get(), &data_);
  ASSERT_OK(evaluator);
  auto result = (*evaluator)->Run(nullptr);
  ASSERT_OK(result);
  // Every 0.2 s for 1.5 s, plus the final attempt; once a minute would be 2.
  EXPECT_GE(result->failed_pulls, 4);
  EXPECT_EQ(result->evaluations, 0);
  EXPECT_EQ(result->gaps, 0);  // Never closed: the server stayed dead.
}

TEST_F(EvaluatorTest, RejectsBadOptions) {
  std::unique_ptr<Client> observer = Connect("observer");
  EvaluatorOptions options = Options();
  options.eval_every_s = 0;
  auto evaluator = Evaluator::Create(options, observer.get(), device_.get(), model_.get(), &data_);
  ASSERT_FALSE(evaluator.ok());
  EXPECT_EQ(evaluator.status().code(), StatusCode::kInvalidArgument);
  options = Options();
  options.metrics_csv = dir_ + "/no/such/dir/e.csv";
  evaluator = Evaluator::Create(options, observer.get(), device_.get(), model_.get(), &data_);
  ASSERT_FALSE(evaluator.ok());
  EXPECT_EQ(evaluator.status().code(), StatusCode::kIOError);
}

}  // namespace
}  // namespace trainer
}  // namespace relaxps
