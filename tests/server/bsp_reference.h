// The single-process reference of a BSP job, for the bit-exactness tests of
// dense and sparse rounds (tests/server/dense_shard_test.cc,
// sparse_shard_test.cc, tests/consistency/bsp_exact_test.cc).
//
// BSP promises that N workers with batch b train like one process with batch
// N*b: each clock, one optimizer step with (the sum of the N workers' batch
// gradients, in worker-id order) * (1/N), where a worker that pushed nothing
// for a key or row contributes a zero. ReferenceModel takes exactly those
// float operations, with the servers' own kernels::Optimizer, so a shard can
// be compared with it by memcmp.
//
// Also: Interleave, a seeded random arrival order of several workers'
// message sequences (each worker's own order kept, as on one connection),
// and BspShardTest, the shard tests' fixture.
//
// Thread-safety: none; use from one thread.
#ifndef RELAXPS_TESTS_SERVER_BSP_REFERENCE_H_
#define RELAXPS_TESTS_SERVER_BSP_REFERENCE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "common/optimizer_options.h"
#include "consistency/consistency_policy.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "storage/param_store.h"

namespace relaxps {
namespace test {

// (sum over workers of grads[k], in the order given) * (1/N): `grads` holds
// one gradient per worker (ascending worker id), all of one length.
inline std::vector<float> CombinedBatchGradient(const std::vector<std::vector<float>>& grads) {
  std::vector<float> sum(grads.at(0).size(), 0.0f);
  for (const std::vector<float>& g : grads) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
  }
  const float inv = 1.0f / static_cast<float>(grads.size());
  for (float& x : sum) x *= inv;
  return sum;
}

// A parameter array and its optimizer state, stepped as one process would.
class ReferenceModel {
 public:
  ReferenceModel(const OptimizerOptions& options, std::vector<float> params)
      : optimizer_(std::move(kernels::NewOptimizer(options)).value()),
        device_(std::move(kernels::NewDevice(kernels::DeviceOptions{})).value()),
        params_(std::move(params)),
        state_(optimizer_->num_state_slots(), std::vector<float>(params_.size(), 0.0f)) {}

  // One step on elements [offset, offset + n) with gradient `g`, the
  // `step`-th of those elements (Adam's bias correction).
  void Step(size_t offset, const float* g, size_t n, int64_t step) {
    std::vector<float*> state;
    for (std::vector<float>& s : state_) state.push_back(s.data() + offset);
    optimizer_->Apply(device_.get(), params_.data() + offset, state.data(), g, n, step, 1.0f);
  }
  // The parameters (slot 0) or optimizer state slot `slot` - 1.
  const std::vector<float>& slot(int slot) const {
    return slot == 0 ? params_ : state_.at(slot - 1);
  }
  int num_slots() const { return 1 + optimizer_->num_state_slots(); }

 private:
  std::unique_ptr<kernels::Optimizer> optimizer_;
  std::unique_ptr<kernels::Device> device_;
  std::vector<float> params_;
  std::vector<std::vector<float>> state_;
};

// One row push: ids and `width` gradient floats per id.
struct RowPush {
  std::vector<uint64_t> ids;
  std::vector<float> grads;
};

// One clock of a sparse table's reference: `pushes[r]` are the row pushes of
// the r-th worker in id order, in the order it sent them. Each worker's
// entries of a row are summed in that order, the workers' sums in id order
// (zero for a worker without the row), times 1/N; every row anyone pushed
// takes one step (row id's floats start at (id - first_row) * width).
inline void StepRows(ReferenceModel* ref, const std::vector<std::vector<RowPush>>& pushes,
                     uint32_t width, uint64_t first_row, int64_t step) {
  std::map<uint64_t, std::vector<std::vector<float>>> per_row;  // Row -> per-worker sums.
  for (size_t r = 0; r < pushes.size(); ++r) {
    for (const RowPush& push : pushes[r]) {
      for (size_t i = 0; i < push.ids.size(); ++i) {
        std::vector<std::vector<float>>& sums = per_row[push.ids[i]];
        sums.resize(pushes.size(), std::vector<float>(width, 0.0f));
        for (uint32_t j = 0; j < width; ++j) sums[r][j] += push.grads[i * width + j];
      }
    }
  }
  for (const auto& [row, sums] : per_row) {
    const std::vector<float> mean = CombinedBatchGradient(sums);
    ref->Step((row - first_row) * width, mean.data(), width, step);
  }
}

// Elements of `a` and `b` whose bits differ (sizes must match).
inline size_t DifferingFloats(const float* a, const float* b, size_t n) {
  size_t differing = 0;
  for (size_t i = 0; i < n; ++i) differing += std::memcmp(a + i, b + i, sizeof(float)) != 0;
  return differing;
}

// A random interleaving of `counts[k]` messages of each worker k (worker k's
// own messages stay in order): the worker index of each arrival.
inline std::vector<int> Interleave(const std::vector<int>& counts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> left = counts;
  std::vector<int> order;
  int total = 0;
  for (int c : counts) total += c;
  while (static_cast<int>(order.size()) < total) {
    int pick = std::uniform_int_distribution<int>(0, total - static_cast<int>(order.size()) - 1)(rng);
    for (size_t k = 0; k < left.size(); ++k) {
      if (pick < left[k]) {
        order.push_back(static_cast<int>(k));
        --left[k];
        break;
      }
      pick -= left[k];
    }
  }
  return order;
}

// A gradient value whose float sums depend on their order: magnitudes from
// 1e-3 to 1e6, signs mixed (hashing worker, clock and element).
inline float OrderSensitiveGradient(int worker, int64_t clock, uint64_t element) {
  uint64_t h = (static_cast<uint64_t>(worker) * 0x9E3779B97F4A7C15ull) ^
               (static_cast<uint64_t>(clock) * 0xC2B2AE3D27D4EB4Full) ^
               (element * 0x165667B19E3779F9ull);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  const float unit = static_cast<float>(h & 0xFFFFFF) / static_cast<float>(0x1000000);  // [0, 1)
  static const float kScales[] = {1e6f, 1.0f, 1e-3f, 3e5f, 7.0f};
  const float sign = (h >> 40) & 1 ? -1.0f : 1.0f;
  return sign * (0.5f + unit) * kScales[(h >> 41) % 5];
}

// A shard test under BSP, parameterized by (optimizer name, workers 2..3):
// the policy, a CPU device, the optimizer's options, the workers' ids (4, 1,
// 7: index order is not id order) and stores that outlive the shards.
class BspShardTest : public ::testing::TestWithParam<std::tuple<const char*, int>> {
 public:
  // For INSTANTIATE_TEST_SUITE_P: "adam_3workers".
  static std::string Name(const ::testing::TestParamInfo<ParamType>& info) {
    return std::string(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) +
           "workers";
  }

 protected:
  void SetUp() override {
    ConsistencyOptions co;
    co.model = ConsistencyModel::kBsp;
    policy_ = std::move(NewConsistencyPolicy(co)).value();
    device_ = std::move(kernels::NewDevice(kernels::DeviceOptions{})).value();
    options_.name = std::get<0>(GetParam());
    options_.lr = 0.01f;
    options_.momentum = 0.9f;
    ids_ = std::vector<int>{4, 1, 7};
    ids_.resize(std::get<1>(GetParam()));
    sorted_ = ids_;
    std::sort(sorted_.begin(), sorted_.end());
  }
  // Index of worker `id` in ids_.
  size_t IndexOf(int id) const { return std::find(ids_.begin(), ids_.end(), id) - ids_.begin(); }
  // Slots of a table with options_'s optimizer (parameters + state).
  int NumSlots() const {
    return 1 + std::move(kernels::NewOptimizer(options_)).value()->num_state_slots();
  }
  // A new memory store, owned by the fixture.
  ParamStore* NewStore() {
    stores_.push_back(NewMemoryStore());
    return stores_.back().get();
  }
  std::unique_ptr<ConsistencyPolicy> policy_;
  std::unique_ptr<kernels::Device> device_;
  OptimizerOptions options_;
  std::vector<int> ids_, sorted_;

 private:
  std::vector<std::unique_ptr<ParamStore>> stores_;
};

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_SERVER_BSP_REFERENCE_H_
