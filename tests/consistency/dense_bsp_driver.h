// DenseBspDriver: drives a dense table through BSP clocks with real clients
// and keeps the single-process reference of the same job
// (tests/server/bsp_reference.h), for the end-to-end bit-exactness tests
// (tests/consistency/bsp_exact_test.cc, tests/recovery/chain_bsp_test.cc).
//
// Each clock every worker computes a gradient from the parameters it pulled
// (1e-3 * an order-sensitive value + the parameter), pushes it layer by layer
// (`layers`: boundaries, first 0, last the table's size), except that one
// worker skips one layer, and the pushes reach the servers in the order of
// workers the caller gives (each acknowledged before the next is sent). The
// reference takes one step with the workers' gradients summed in worker-id
// order (zero on the skipped layer) times 1/N.
//
// Thread-safety: none; use from the test's thread.
#ifndef RELAXPS_TESTS_CONSISTENCY_DENSE_BSP_DRIVER_H_
#define RELAXPS_TESTS_CONSISTENCY_DENSE_BSP_DRIVER_H_

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/server/bsp_reference.h"

namespace relaxps {
namespace test {

class DenseBspDriver {
 public:
  // REQUIRES: `workers` (ascending worker id) outlive this; the table exists.
  DenseBspDriver(std::vector<Client*> workers, TableOptions table, std::vector<uint64_t> layers)
      : workers_(std::move(workers)), table_(std::move(table)), layers_(std::move(layers)) {}

  // Pulls the initial parameters (the reference starts from them).
  Status Start() {
    initial_ = FloatBuffer(table_.size);
    Status s = workers_[0]->Pull(table_.name, 0, initial_).get();
    if (!s.ok()) return s;
    reference_ = std::make_unique<ReferenceModel>(
        table_.optimizer, std::vector<float>(initial_.begin(), initial_.end()));
    for (size_t r = 0; r < workers_.size(); ++r) {
      pulled_.emplace_back(table_.size);
      std::copy(initial_.begin(), initial_.end(), pulled_.back().begin());
    }
    return Status::OK();
  }

  // The layer worker `rank` (by id) skips at clock t (-1: none): one worker
  // a clock, in turn, and a different layer each time.
  int Skipped(size_t rank, int t) const {
    const size_t num_layers = layers_.size() - 1;
    return rank == static_cast<size_t>(t) % workers_.size() ? t % static_cast<int>(num_layers)
                                                           : -1;
  }

  // Computes and pushes clock t's gradients, layer by layer, the workers of
  // each layer in `order` (ranks); steps the reference.
  Status Push(int t, const std::vector<size_t>& order) {
    const size_t n = workers_.size();
    std::vector<std::vector<float>> grads(n, std::vector<float>(table_.size, 0.0f));
    for (size_t r = 0; r < n; ++r) {
      for (size_t l = 0; l + 1 < layers_.size(); ++l) {
        if (static_cast<int>(l) == Skipped(r, t)) continue;
        for (uint64_t d = layers_[l]; d < layers_[l + 1]; ++d) {
          grads[r][d] = 1e-3f * OrderSensitiveGradient(workers_[r]->worker_id(), t, d) +
                        pulled_[r][d];
        }
      }
    }
    for (size_t l = 0; l + 1 < layers_.size(); ++l) {
      for (size_t r : order) {
        if (static_cast<int>(l) == Skipped(r, t)) continue;
        FloatBuffer part(layers_[l + 1] - layers_[l]);
        std::copy(grads[r].begin() + layers_[l], grads[r].begin() + layers_[l + 1], part.begin());
        Status s = workers_[r]->Push(table_.name, layers_[l], part).get();
        if (!s.ok()) return s;
      }
    }
    const std::vector<float> mean = CombinedBatchGradient(grads);
    reference_->Step(0, mean.data(), table_.size, t + 1);
    return Status::OK();
  }

  // After every worker's Clock(): each worker pulls the table; returns the
  // most floats any worker's copy differs from the reference in.
  StatusOr<size_t> PullAndCompare() {
    size_t most = 0;
    for (size_t r = 0; r < workers_.size(); ++r) {
      Status s = workers_[r]->Pull(table_.name, 0, pulled_[r]).get();
      if (!s.ok()) return s;
      most = std::max(most, DifferingFloats(pulled_[r].data(), reference_->slot(0).data(),
                                            table_.size));
    }
    return most;
  }

  const ReferenceModel& reference() const { return *reference_; }
  const FloatBuffer& initial() const { return initial_; }

 private:
  const std::vector<Client*> workers_;
  const TableOptions table_;
  const std::vector<uint64_t> layers_;
  FloatBuffer initial_;
  std::vector<FloatBuffer> pulled_;  // Each worker's copy (ranks).
  std::unique_ptr<ReferenceModel> reference_;
};

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_CONSISTENCY_DENSE_BSP_DRIVER_H_
