// A minimal data-parallel trainer on the relaxps client library: fits a
// linear model y = x . w* by SGD, with the weights on the parameter servers.
//
//   linear_trainer <coordinator endpoint> [steps=200]
//
// Run several copies against one job to train data-parallel. Exits 0 when the
// loss fell at least tenfold.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <relaxps/client.h>

namespace {

constexpr int kDim = 256;
constexpr int kBatch = 32;

float TrueWeight(int d) { return std::sin(0.1f * d); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <coordinator endpoint> [steps]\n", argv[0]);
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 200;

  relaxps::ClientOptions options;
  options.coordinator = argv[1];
  auto connected = relaxps::Client::Connect(options);
  if (!connected.ok()) {
    std::fprintf(stderr, "connect: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<relaxps::Client> client = std::move(connected).value();

  relaxps::TableOptions table;
  table.name = "linear";
  table.size = kDim;
  table.optimizer.name = "sgd";
  table.optimizer.lr = 0.05f;
  relaxps::Status s = client->CreateTable(table);  // Every worker may call it.
  if (!s.ok()) {
    std::fprintf(stderr, "create table: %s\n", s.ToString().c_str());
    return 1;
  }

  std::mt19937 rng(1234 + client->worker_id());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  relaxps::FloatBuffer w(kDim), grad(kDim);
  s = client->Pull("linear", 0, w).get();
  if (!s.ok()) {
    std::fprintf(stderr, "pull: %s\n", s.ToString().c_str());
    return 1;
  }
  double first_loss = -1, loss = 0;
  std::vector<float> x(kDim);
  for (int step = 0; step < steps; ++step) {
    std::fill(grad.begin(), grad.end(), 0.0f);
    loss = 0;
    for (int b = 0; b < kBatch; ++b) {
      float y = 0, pred = 0;
      for (int d = 0; d < kDim; ++d) {
        x[d] = normal(rng);
        y += x[d] * TrueWeight(d);
        pred += x[d] * w[d];
      }
      const float err = pred - y;
      loss += 0.5 * err * err / kBatch;
      for (int d = 0; d < kDim; ++d) grad[d] += err * x[d] / kBatch;
    }
    if (first_loss < 0) first_loss = loss;
    s = client->PushPull("linear", 0, grad, w).get();
    if (!s.ok()) {
      std::fprintf(stderr, "push/pull: %s\n", s.ToString().c_str());
      return 1;
    }
    s = client->Clock();
    if (!s.ok()) {
      std::fprintf(stderr, "clock: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::printf("worker %d: loss %.5f -> %.5f after %d steps\n", client->worker_id(), first_loss,
              loss, steps);
  return loss < first_loss / 10 ? 0 : 1;
}
