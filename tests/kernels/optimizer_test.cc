// Tests of kernels::Optimizer: each rule against a hand-written double-
// precision reference over several steps on fixed inputs, the learning-rate
// scale, Adam's bias correction, and option validation.
#include "kernels/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/optimizer_rules.h"

namespace relaxps {
namespace kernels {
namespace {

constexpr int kSteps = 5;
constexpr size_t kN = 6;

// Fixed parameters and one fixed gradient per step (mixed signs, a zero, a
// large and a tiny value).
const float kInitialW[kN] = {0.5f, -1.25f, 2.0f, 0.0f, -0.01f, 3.5f};
const float kGrads[kSteps][kN] = {
    {0.1f, -0.2f, 0.3f, 0.0f, 5.0f, -1e-4f},    {-0.05f, 0.4f, 0.3f, 0.0f, -2.0f, 2e-4f},
    {0.2f, 0.1f, -0.6f, 1.0f, 0.5f, -1e-4f},    {0.0f, -0.3f, 0.1f, -1.0f, 3.0f, 0.0f},
    {0.15f, 0.25f, -0.35f, 0.5f, -0.5f, 1e-3f},
};

// Hand-written references, one step at a time, in double.
struct Reference {
  std::vector<double> w, s0, s1;
  Reference() : w(kInitialW, kInitialW + kN), s0(kN, 0.0), s1(kN, 0.0) {}

  void Sgd(const float* g, double lr) {
    for (size_t i = 0; i < kN; ++i) w[i] = w[i] - lr * g[i];
  }
  void Momentum(const float* g, double lr, double mu) {
    for (size_t i = 0; i < kN; ++i) {
      s0[i] = mu * s0[i] + g[i];
      w[i] = w[i] - lr * s0[i];
    }
  }
  void Adam(const float* g, double lr, double b1, double b2, double eps, int t) {
    for (size_t i = 0; i < kN; ++i) {
      s0[i] = b1 * s0[i] + (1 - b1) * g[i];
      s1[i] = b2 * s1[i] + (1 - b2) * g[i] * g[i];
      const double m_hat = s0[i] / (1 - std::pow(b1, t));
      const double v_hat = s1[i] / (1 - std::pow(b2, t));
      w[i] = w[i] - lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
  void Adagrad(const float* g, double lr, double eps) {
    for (size_t i = 0; i < kN; ++i) {
      s0[i] += static_cast<double>(g[i]) * g[i];
      w[i] = w[i] - lr * g[i] / (std::sqrt(s0[i]) + eps);
    }
  }
};

class OptimizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = NewDevice(DeviceOptions{});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(device).value();
  }

  std::unique_ptr<Optimizer> Make(const OptimizerOptions& options) {
    auto opt = NewOptimizer(options);
    EXPECT_TRUE(opt.ok()) << opt.status();
    return opt.ok() ? std::move(opt).value() : nullptr;
  }

  // Runs kSteps steps of `opt` from kInitialW with zero-initialized state;
  // after each step calls check(step, w, state).
  template <typename Check>
  void Run(const Optimizer& opt, float lr_scale, Check check) {
    std::vector<float> w(kInitialW, kInitialW + kN);
    std::vector<std::vector<float>> state(opt.num_state_slots());
    std::vector<float*> state_ptrs;
    for (int s = 0; s < opt.num_state_slots(); ++s) {
      state[s].assign(kN, opt.state_init(s));
      state_ptrs.push_back(state[s].data());
    }
    for (int t = 1; t <= kSteps; ++t) {
      opt.Apply(device_.get(), w.data(), state_ptrs.data(), kGrads[t - 1], kN, t, lr_scale);
      device_->Synchronize();
      check(t, w, state);
    }
  }

  std::unique_ptr<Device> device_;
};

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol,
                const char* what, int step) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i])))
        << what << "[" << i << "] after step " << step;
  }
}

TEST_F(OptimizerTest, SgdMatchesReference) {
  OptimizerOptions o;
  o.name = "sgd";
  o.lr = 0.1f;
  auto opt = Make(o);
  ASSERT_NE(opt, nullptr);
  EXPECT_STREQ(opt->Name(), "sgd");
  EXPECT_EQ(opt->num_state_slots(), 0);
  Reference ref;
  Run(*opt, 1.0f, [&](int t, const std::vector<float>& w, const auto&) {
    ref.Sgd(kGrads[t - 1], 0.1);
    ExpectNear(w, ref.w, 1e-6, "w", t);
  });
}

TEST_F(OptimizerTest, MomentumMatchesReference) {
  OptimizerOptions o;
  o.name = "momentum";
  o.lr = 0.05f;
  o.momentum = 0.9f;
  auto opt = Make(o);
  ASSERT_NE(opt, nullptr);
  EXPECT_STREQ(opt->Name(), "momentum");
  ASSERT_EQ(opt->num_state_slots(), 1);
  Reference ref;
  Run(*opt, 1.0f, [&](int t, const std::vector<float>& w, const auto& state) {
    ref.Momentum(kGrads[t - 1], 0.05, 0.9);
    ExpectNear(state[0], ref.s0, 1e-6, "velocity", t);
    ExpectNear(w, ref.w, 1e-6, "w", t);
  });
}

TEST_F(OptimizerTest, AdamMatchesReferenceWithBiasCorrection) {
  OptimizerOptions o;
  o.name = "adam";
  o.lr = 0.01f;
  auto opt = Make(o);
  ASSERT_NE(opt, nullptr);
  EXPECT_STREQ(opt->Name(), "adam");
  ASSERT_EQ(opt->num_state_slots(), 2);
  Reference ref;
  Run(*opt, 1.0f, [&](int t, const std::vector<float>& w, const auto& state) {
    ref.Adam(kGrads[t - 1], 0.01, 0.9, 0.999, 1e-8, t);
    ExpectNear(state[0], ref.s0, 1e-6, "m", t);
    ExpectNear(state[1], ref.s1, 1e-6, "v", t);
    ExpectNear(w, ref.w, 1e-5, "w", t);
  });
}

TEST_F(OptimizerTest, AdamFirstStepMovesEachWeightByLrAgainstTheGradientSign) {
  // With bias correction, step 1 is w -= lr * g / (|g| + eps): a move of lr
  // (up to eps) for every non-zero gradient, regardless of its magnitude.
  OptimizerOptions o;
  o.name = "adam";
  o.lr = 0.01f;
  auto opt = Make(o);
  ASSERT_NE(opt, nullptr);
  Run(*opt, 1.0f, [&](int t, const std::vector<float>& w, const auto&) {
    if (t != 1) return;
    for (size_t i = 0; i < kN; ++i) {
      const float g = kGrads[0][i];
      const double expected = g == 0 ? kInitialW[i] : kInitialW[i] - 0.01 * (g > 0 ? 1 : -1);
      EXPECT_NEAR(w[i], expected, 1e-5) << i;
    }
  });
}

TEST_F(OptimizerTest, AdagradMatchesReference) {
  OptimizerOptions o;
  o.name = "adagrad";
  o.lr = 0.1f;
  o.eps = 1e-6f;
  auto opt = Make(o);
  ASSERT_NE(opt, nullptr);
  EXPECT_STREQ(opt->Name(), "adagrad");
  ASSERT_EQ(opt->num_state_slots(), 1);
  Reference ref;
  Run(*opt, 1.0f, [&](int t, const std::vector<float>& w, const auto& state) {
    ref.Adagrad(kGrads[t - 1], 0.1, 1e-6);
    ExpectNear(state[0], ref.s0, 1e-6, "accumulator", t);
    ExpectNear(w, ref.w, 1e-6, "w", t);
  });
}

TEST_F(OptimizerTest, LrScaleMultipliesTheLearningRate) {
  // Every rule with lr_scale = 0.25 must equal the same rule with lr / 4.
  for (const char* name : {"sgd", "momentum", "adam", "adagrad"}) {
    SCOPED_TRACE(name);
    OptimizerOptions scaled;
    scaled.name = name;
    scaled.lr = 0.08f;
    OptimizerOptions plain = scaled;
    plain.lr = 0.02f;
    auto a = Make(scaled);
    auto b = Make(plain);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    std::vector<std::vector<float>> wa, wb;
    Run(*a, 0.25f, [&](int, const std::vector<float>& w, const auto&) { wa.push_back(w); });
    Run(*b, 1.0f, [&](int, const std::vector<float>& w, const auto&) { wb.push_back(w); });
    ASSERT_EQ(wa.size(), wb.size());
    for (size_t t = 0; t < wa.size(); ++t) {
      for (size_t i = 0; i < kN; ++i) EXPECT_NEAR(wa[t][i], wb[t][i], 1e-6) << t << "," << i;
    }
    // And differs from the unscaled rule.
    std::vector<std::vector<float>> wc;
    Run(*a, 1.0f, [&](int, const std::vector<float>& w, const auto&) { wc.push_back(w); });
    EXPECT_NE(wc.back(), wa.back());
  }
}

// ApplyAndCopy works in blocks (2,048 floats); over a length that is not a
// multiple of the block it leaves parameters and state bit for bit as Apply
// does, and the copy equals the updated parameters.
TEST_F(OptimizerTest, ApplyAndCopyMatchesApplyBitForBit) {
  constexpr size_t n = 2048 * 3 + 517;
  for (const char* name : {"sgd", "momentum", "adam", "adagrad"}) {
    SCOPED_TRACE(name);
    OptimizerOptions o;
    o.name = name;
    o.lr = 0.05f;
    auto opt = Make(o);
    ASSERT_NE(opt, nullptr);
    const int slots = opt->num_state_slots();
    std::vector<float> w(n), g(n);
    for (size_t i = 0; i < n; ++i) {
      w[i] = std::sin(0.01f * static_cast<float>(i));
      g[i] = std::cos(0.37f * static_cast<float>(i)) * (i % 7 == 0 ? 10.0f : 0.1f);
    }
    std::vector<float> w2 = w;
    std::vector<std::vector<float>> state(slots, std::vector<float>(n, 0.0f)), state2 = state;
    std::vector<float*> sp, sp2;
    for (int s = 0; s < slots; ++s) {
      sp.push_back(state[s].data());
      sp2.push_back(state2[s].data());
    }
    std::vector<float> copy(n, -1.0f);
    for (int step = 1; step <= 3; ++step) {
      opt->Apply(device_.get(), w.data(), sp.data(), g.data(), n, step, 0.5f);
      opt->ApplyAndCopy(device_.get(), w2.data(), sp2.data(), g.data(), n, step, 0.5f,
                        copy.data());
      ASSERT_EQ(0, std::memcmp(w.data(), w2.data(), n * sizeof(float))) << "step " << step;
      ASSERT_EQ(0, std::memcmp(w.data(), copy.data(), n * sizeof(float))) << "step " << step;
      for (int s = 0; s < slots; ++s) {
        ASSERT_EQ(0, std::memcmp(state[s].data(), state2[s].data(), n * sizeof(float)))
            << "state " << s << " step " << step;
      }
    }
  }
}

// The fused update-and-copy of each rule on a CPU device against a scalar
// reference written here from the rule's formula, with the same float
// operations in the same order (kernels/cpu_device.cc folds Adam's bias
// corrections the same way): parameters, state and copy bit for bit, over
// random data, lengths that are not multiples of any block or vector length,
// and arrays that do not start on a vector boundary.
struct ScalarRule {
  std::string name;
  OptimizerOptions options;
  // One step on element i.
  void Step(float* w, float* s0, float* s1, float g, int64_t t, float lr_scale) const {
    const float lr = options.lr * lr_scale;
    if (name == "sgd") {
      *w = *w - lr * g;
    } else if (name == "momentum") {
      *s0 = options.momentum * *s0 + g;
      *w = *w - lr * *s0;
    } else if (name == "adam") {
      const double bc1 = 1.0 - std::pow(static_cast<double>(options.beta1),
                                        static_cast<double>(t));
      const double bc2 = 1.0 - std::pow(static_cast<double>(options.beta2),
                                        static_cast<double>(t));
      const float step_size = static_cast<float>(lr / bc1);
      const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
      *s0 = options.beta1 * *s0 + (1.0f - options.beta1) * g;
      *s1 = options.beta2 * *s1 + (1.0f - options.beta2) * g * g;
      *w = *w - step_size * *s0 / (std::sqrt(*s1) * inv_sqrt_bc2 + options.eps);
    } else {  // adagrad
      *s0 = *s0 + g * g;
      *w = *w - lr * g / (std::sqrt(*s0) + options.eps);
    }
  }
};

TEST_F(OptimizerTest, FusedApplyAndCopyMatchesAScalarReferenceBitForBit) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (const char* name : {"sgd", "momentum", "adam", "adagrad"}) {
    for (const size_t n : {size_t{1}, size_t{7}, size_t{2047}, size_t{2049}, size_t{16411}}) {
      for (const size_t shift : {size_t{0}, size_t{1}, size_t{3}}) {
        SCOPED_TRACE(std::string(name) + " n=" + std::to_string(n) +
                     " shift=" + std::to_string(shift));
        ScalarRule rule{name, {}};
        rule.options.name = name;
        rule.options.lr = 0.03f;
        auto opt = Make(rule.options);
        ASSERT_NE(opt, nullptr);
        const int slots = opt->num_state_slots();
        // Arrays start `shift` floats past where the allocator put them.
        std::vector<float> wbuf(n + shift), gbuf(n + shift), cbuf(n + shift);
        std::vector<std::vector<float>> sbuf(slots, std::vector<float>(n + shift));
        float* w = wbuf.data() + shift;
        float* copy = cbuf.data() + shift;
        const float* g = gbuf.data() + shift;
        for (size_t i = 0; i < n; ++i) w[i] = uniform(rng);
        std::vector<float> rw(w, w + n), rs0(n, 0.0f), rs1(n, 0.0f);
        std::vector<float*> sp;
        for (int s = 0; s < slots; ++s) sp.push_back(sbuf[s].data() + shift);
        for (int s = 0; s < slots; ++s) std::fill(sp[s], sp[s] + n, 0.0f);
        for (int64_t t = 1; t <= 3; ++t) {
          for (size_t i = 0; i < n; ++i) {
            gbuf[shift + i] = uniform(rng) * (i % 5 == 0 ? 50.0f : 1.0f);
          }
          const float lr_scale = t == 2 ? 0.5f : 1.0f;
          std::fill(copy, copy + n, -7.0f);
          opt->ApplyAndCopy(device_.get(), w, sp.data(), g, n, t, lr_scale, copy);
          for (size_t i = 0; i < n; ++i) {
            rule.Step(&rw[i], &rs0[i], &rs1[i], g[i], t, lr_scale);
          }
          ASSERT_EQ(0, std::memcmp(w, rw.data(), n * sizeof(float))) << "w, step " << t;
          ASSERT_EQ(0, std::memcmp(copy, rw.data(), n * sizeof(float))) << "copy, step " << t;
          const float* want[2] = {rs0.data(), rs1.data()};
          for (int s = 0; s < slots; ++s) {
            ASSERT_EQ(0, std::memcmp(sp[s], want[s], n * sizeof(float)))
                << "state " << s << ", step " << t;
          }
        }
      }
    }
  }
}

TEST_F(OptimizerTest, StateInitIsZero) {
  for (const char* name : {"momentum", "adam", "adagrad"}) {
    OptimizerOptions o;
    o.name = name;
    auto opt = Make(o);
    ASSERT_NE(opt, nullptr);
    for (int s = 0; s < opt->num_state_slots(); ++s) EXPECT_EQ(opt->state_init(s), 0.0f) << name;
    EXPECT_EQ(opt->options().name, name);
  }
}

TEST(NewOptimizerTest, RejectsBadOptions) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto expect_invalid = [](const OptimizerOptions& o, const char* why) {
    auto opt = NewOptimizer(o);
    ASSERT_FALSE(opt.ok()) << why;
    EXPECT_EQ(opt.status().code(), StatusCode::kInvalidArgument) << why << ": " << opt.status();
  };
  OptimizerOptions o;
  o.name = "rmsprop";
  expect_invalid(o, "unknown name");
  o.name = "";
  expect_invalid(o, "empty name");
  o.name = "SGD";
  expect_invalid(o, "names are case-sensitive");
  for (const char* name : {"sgd", "momentum", "adam", "adagrad"}) {
    for (float lr : {0.0f, -0.1f, nan, inf, -inf}) {
      OptimizerOptions bad;
      bad.name = name;
      bad.lr = lr;
      expect_invalid(bad, "bad learning rate");
    }
  }
  OptimizerOptions bad;
  bad.name = "momentum";
  bad.momentum = 1.0f;
  expect_invalid(bad, "momentum >= 1");
  bad.name = "adam";
  bad.momentum = 0.9f;
  bad.beta2 = nan;
  expect_invalid(bad, "NaN beta2");
  bad.beta2 = 0.999f;
  bad.eps = 0.0f;
  expect_invalid(bad, "adam eps 0");
  bad.name = "adagrad";
  expect_invalid(bad, "adagrad eps 0");

  for (const char* name : {"sgd", "momentum", "adam", "adagrad"}) {
    OptimizerOptions good;
    good.name = name;
    good.lr = 1e-4f;
    EXPECT_TRUE(NewOptimizer(good).ok()) << name;
  }
}

// Every rule declared in common/optimizer_rules.h (what code without
// kernels/ knows of a rule's state) is built by NewOptimizer with exactly
// the state slots it declares, and a velocity slot is declared only by the
// rule whose update is heavy-ball momentum: with it, one step from v = 0 is
// w -= lr * g, the next w -= lr * (momentum * g1 + g2).
TEST(OptimizerRulesTest, DeclaredRulesAgreeWithTheKernels) {
  ASSERT_FALSE(OptimizerRules().empty());
  auto device = NewDevice(DeviceOptions());
  ASSERT_TRUE(device.ok()) << device.status();
  for (const OptimizerRule& rule : OptimizerRules()) {
    SCOPED_TRACE(rule.name);
    EXPECT_EQ(FindOptimizerRule(rule.name), &rule);
    OptimizerOptions options;
    options.name = rule.name;
    options.lr = 0.5f;
    options.momentum = 0.25f;
    auto opt = NewOptimizer(options);
    ASSERT_TRUE(opt.ok()) << opt.status();
    EXPECT_STREQ((*opt)->Name(), rule.name);
    EXPECT_EQ((*opt)->num_state_slots(), rule.state_slots);
    if (!rule.velocity_slot) continue;
    ASSERT_GE(rule.state_slots, 1);
    float w = 1.0f, v = 0.0f;
    float* state[] = {&v, nullptr};
    const float g1 = 2.0f, g2 = 4.0f;
    (*opt)->Apply(device->get(), &w, state, &g1, 1, 1, 1.0f);
    EXPECT_FLOAT_EQ(v, g1);
    EXPECT_FLOAT_EQ(w, 1.0f - 0.5f * g1);
    (*opt)->Apply(device->get(), &w, state, &g2, 1, 2, 1.0f);
    EXPECT_FLOAT_EQ(v, 0.25f * g1 + g2);
    EXPECT_FLOAT_EQ(w, 1.0f - 0.5f * g1 - 0.5f * (0.25f * g1 + g2));
  }
  EXPECT_EQ(FindOptimizerRule("rmsprop"), nullptr);
}

}  // namespace
}  // namespace kernels
}  // namespace relaxps
