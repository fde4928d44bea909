// StagedOptimizer must give exactly what the wrapped optimizer gives in place.
// The staging device here is a second CPU device (so copies are memcpy); on a
// GPU machine device_cuda_test covers the kernels themselves.
#include "kernels/staged_optimizer.h"

#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace kernels {
namespace {

class StagedOptimizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StagedOptimizerTest, MatchesInPlaceUpdatesOverSeveralSteps) {
  auto host = NewDevice(DeviceOptions());
  auto staging = NewDevice(DeviceOptions());
  ASSERT_TRUE(host.ok() && staging.ok());
  OptimizerOptions o;
  o.name = GetParam();
  o.lr = 0.05f;
  auto direct = NewOptimizer(o);
  auto inner = NewOptimizer(o);
  ASSERT_TRUE(direct.ok() && inner.ok());
  std::unique_ptr<Optimizer> staged = NewStagedOptimizer(std::move(*inner), staging->get());
  EXPECT_EQ(staged->num_state_slots(), (*direct)->num_state_slots());
  EXPECT_STREQ(staged->Name(), (*direct)->Name());

  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  const int slots = (*direct)->num_state_slots();
  for (size_t n : {100u, 5000u, 37u}) {  // Grows, then reuses the staging buffers.
    std::vector<float> w1(n), w2, g(n);
    for (auto& v : w1) v = u(rng);
    w2 = w1;
    std::vector<std::vector<float>> s1(slots, std::vector<float>(n, 0.0f)), s2 = s1;
    std::vector<float*> p1(slots), p2(slots);
    for (int s = 0; s < slots; ++s) {
      p1[s] = s1[s].data();
      p2[s] = s2[s].data();
    }
    for (int step = 1; step <= 5; ++step) {
      for (auto& v : g) v = u(rng);
      (*direct)->Apply(host->get(), w1.data(), p1.data(), g.data(), n, step, 0.5f);
      if (step % 2 == 1) {
        staged->Apply(host->get(), w2.data(), p2.data(), g.data(), n, step, 0.5f);
      } else {  // A PUSH_PULL's update: one staged Apply and a copy.
        std::vector<float> copy(n, -7.0f);
        staged->ApplyAndCopy(host->get(), w2.data(), p2.data(), g.data(), n, step, 0.5f,
                             copy.data());
        ASSERT_EQ(copy, w2) << GetParam() << " n=" << n << " step " << step;
      }
    }
    ASSERT_EQ(w1, w2) << GetParam() << " n=" << n;
    for (int s = 0; s < slots; ++s) ASSERT_EQ(s1[s], s2[s]);
    // And the update did something.
    ASSERT_NE(w1[0], 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(All, StagedOptimizerTest,
                         ::testing::Values("sgd", "momentum", "adam", "adagrad"));

}  // namespace
}  // namespace kernels
}  // namespace relaxps
