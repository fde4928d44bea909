// Sparse table logic of a server: the rows of one sparse table that hash to
// this server, read and updated through the ParamStore.
//
// Sparse pushes are applied on arrival under every consistency model (the
// BSP/SSP gates cover dense tables); duplicate ids within one push are summed
// first so each row gets one optimizer step per push.
//
// Thread-safety: not synchronized; used only on the server's loop thread.
#ifndef RELAXPS_SERVER_INTERNAL_SPARSE_SHARD_H_
#define RELAXPS_SERVER_INTERNAL_SPARSE_SHARD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "common/buffer.h"
#include "common/buffer_pool.h"
#include "common/status.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {

class SparseShardState {
 public:
  // REQUIRES: store has the table `spec.table`; pointers outlive this. Pull
  // replies come from `pool` (nullptr: plain allocations).
  SparseShardState(SparseTableSpec spec, std::unique_ptr<kernels::Optimizer> optimizer,
                   kernels::Device* device, ParamStore* store, BufferPool* pool = nullptr);

  uint32_t width() const { return spec_.width; }
  int num_slots() const { return spec_.num_slots; }

  // Reads `slot` (0: parameters, 1..: optimizer state) of n rows into a new
  // buffer. REQUIRES: 0 <= slot < num_slots().
  StatusOr<FloatBuffer> Pull(const uint64_t* ids, size_t n, int slot = 0);
  // Applies one optimizer step per distinct row. REQUIRES: grads finite,
  // n * width floats.
  Status Push(const uint64_t* ids, size_t n, const float* grads);
  // Adds `deltas` (n * width floats) to the rows' parameters, without an
  // optimizer step (stateless recovery: a worker's row changes).
  Status AddDelta(const uint64_t* ids, size_t n, const float* deltas);

  uint64_t updates_applied() const { return updates_applied_; }

 private:
  // Constant after construction.
  const SparseTableSpec spec_;
  const std::unique_ptr<kernels::Optimizer> optimizer_;
  kernels::Device* const device_;
  ParamStore* const store_;
  BufferPool* const pool_;

  // Sums the values of duplicate ids of n rows into unique_ids_/summed_.
  void SumDuplicates(const uint64_t* ids, size_t n, const float* values);

  uint64_t updates_applied_ = 0;
  std::vector<uint64_t> unique_ids_;  // Scratch of SumDuplicates.
  std::vector<float> summed_;
  std::vector<float> rows_;  // Scratch: full row records.
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_SPARSE_SHARD_H_
