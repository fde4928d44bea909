#include "server/internal/sparse_shard.h"

#include <cstring>
#include <unordered_map>

namespace relaxps {
namespace server_internal {

SparseShardState::SparseShardState(SparseTableSpec spec,
                                   std::unique_ptr<kernels::Optimizer> optimizer,
                                   kernels::Device* device, ParamStore* store, BufferPool* pool)
    : spec_(std::move(spec)),
      optimizer_(std::move(optimizer)),
      device_(device),
      store_(store),
      pool_(pool) {}

StatusOr<FloatBuffer> SparseShardState::Pull(const uint64_t* ids, size_t n, int slot) {
  const size_t rf = spec_.row_floats();
  FloatBuffer out = pool_ != nullptr ? pool_->Acquire<float>(n * spec_.width)
                                     : FloatBuffer::Uninitialized(n * spec_.width);
  if (rf == spec_.width) {  // No optimizer state: the records are the reply.
    RETURN_IF_ERROR(store_->ReadRows(spec_.table, ids, n, out.data()));
    return out;
  }
  rows_.resize(n * rf);
  RETURN_IF_ERROR(store_->ReadRows(spec_.table, ids, n, rows_.data()));
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(out.data() + i * spec_.width, rows_.data() + i * rf + slot * spec_.width,
                spec_.width * sizeof(float));
  }
  return out;
}

void SparseShardState::SumDuplicates(const uint64_t* ids, size_t n, const float* values) {
  const size_t w = spec_.width;
  std::unordered_map<uint64_t, size_t> index;
  unique_ids_.clear();
  summed_.clear();
  index.reserve(n);
  unique_ids_.reserve(n);
  summed_.reserve(n * w);
  for (size_t i = 0; i < n; ++i) {
    auto [it, inserted] = index.emplace(ids[i], unique_ids_.size());
    if (inserted) {
      unique_ids_.push_back(ids[i]);
      summed_.insert(summed_.end(), values + i * w, values + (i + 1) * w);
    } else {
      device_->Axpy(w, 1.0f, values + i * w, summed_.data() + it->second * w);
    }
  }
}

Status SparseShardState::AddDelta(const uint64_t* ids, size_t n, const float* deltas) {
  const size_t w = spec_.width;
  const size_t rf = spec_.row_floats();
  SumDuplicates(ids, n, deltas);
  const size_t u = unique_ids_.size();
  rows_.resize(u * rf);
  RETURN_IF_ERROR(store_->ReadRows(spec_.table, unique_ids_.data(), u, rows_.data()));
  for (size_t i = 0; i < u; ++i) device_->Axpy(w, 1.0f, summed_.data() + i * w, rows_.data() + i * rf);
  return store_->WriteRows(spec_.table, unique_ids_.data(), u, rows_.data());
}

Status SparseShardState::Push(const uint64_t* ids, size_t n, const float* grads) {
  const size_t w = spec_.width;
  const size_t rf = spec_.row_floats();
  // Sum gradients of duplicate ids so every row is read and stepped once.
  SumDuplicates(ids, n, grads);
  const std::vector<uint64_t>& unique_ids = unique_ids_;
  const std::vector<float>& summed = summed_;
  const size_t u = unique_ids.size();
  rows_.resize(u * rf);
  RETURN_IF_ERROR(store_->ReadRows(spec_.table, unique_ids.data(), u, rows_.data()));
  int64_t* step = store_->SparseStep(spec_.table);
  if (step == nullptr) return NotFoundError("no sparse table '" + spec_.table + "' in the store");
  ++*step;
  std::vector<float*> state(spec_.num_slots - 1);
  for (size_t i = 0; i < u; ++i) {
    float* row = rows_.data() + i * rf;
    for (int s = 1; s < spec_.num_slots; ++s) state[s - 1] = row + s * w;
    optimizer_->Apply(device_, row, state.data(), summed.data() + i * w, w, *step, 1.0f);
  }
  updates_applied_ += u;
  return store_->WriteRows(spec_.table, unique_ids.data(), u, rows_.data());
}

}  // namespace server_internal
}  // namespace relaxps
