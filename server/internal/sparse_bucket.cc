#include "server/internal/sparse_bucket.h"

#include <algorithm>
#include <cstring>

namespace relaxps {
namespace server_internal {

std::string BucketStoreTable(const std::string& table, int bucket) {
  return table + "#" + std::to_string(bucket);
}

SparseBucketState::SparseBucketState(std::unique_ptr<SparseShardState> shard, ParamStore* store,
                                     std::string store_table, int bucket, int num_buckets)
    : shard_(std::move(shard)),
      store_(store),
      store_table_(std::move(store_table)),
      bucket_(bucket),
      num_buckets_(num_buckets) {}

Status SparseBucketState::Push(int worker, int64_t clock, const uint64_t* ids, size_t n,
                               const float* grads) {
  RETURN_IF_ERROR(shard_->Push(worker, clock, ids, n, grads));
  touched_.insert(ids, ids + n);
  return Status::OK();
}

Status SparseBucketState::AddDelta(const uint64_t* ids, size_t n, const float* deltas) {
  RETURN_IF_ERROR(shard_->AddDelta(ids, n, deltas));
  touched_.insert(ids, ids + n);
  return Status::OK();
}

size_t SparseBucketState::row_floats() const {
  const SparseTableSpec* spec = store_->GetSparse(store_table_);
  return spec == nullptr ? 0 : spec->row_floats();
}

Status SparseBucketState::Save(wire::ChainSnapshot* snap, KeyBuffer* ids, FloatBuffer* rows) {
  const SparseTableSpec* spec = store_->GetSparse(store_table_);
  int64_t* step = store_->SparseStep(store_table_);
  if (spec == nullptr || step == nullptr) {
    return NotFoundError("no sparse table '" + store_table_ + "' in the store");
  }
  *ids = KeyBuffer::Uninitialized(touched_.size());
  std::copy(touched_.begin(), touched_.end(), ids->data());
  std::sort(ids->data(), ids->data() + ids->size());
  *rows = FloatBuffer::Uninitialized(ids->size() * spec->row_floats());
  RETURN_IF_ERROR(store_->ReadRows(store_table_, ids->data(), ids->size(), rows->data()));
  snap->set_step(*step);
  return Status::OK();
}

Status SparseBucketState::LoadPiece(const Frame& id_frame, const Frame& row_frame) {
  const SparseTableSpec* spec = store_->GetSparse(store_table_);
  if (spec == nullptr) return NotFoundError("no sparse table '" + store_table_ + "' in the store");
  if (id_frame.size() % sizeof(uint64_t) != 0) {
    return InvalidArgumentError("snapshot piece of sparse bucket '" + store_table_ +
                                "' has a frame of row ids of " + std::to_string(id_frame.size()) +
                                " bytes");
  }
  const size_t n = id_frame.size() / sizeof(uint64_t);
  if (row_frame.size() != n * spec->row_floats() * sizeof(float)) {
    return InvalidArgumentError("snapshot piece of sparse bucket '" + store_table_ + "' has " +
                                std::to_string(row_frame.size()) + " bytes of rows for " +
                                std::to_string(n) + " ids of " +
                                std::to_string(spec->row_floats()) + " floats");
  }
  if (n == 0) return Status::OK();
  // Frames need not be aligned for their types: copy their bytes.
  KeyBuffer ids = KeyBuffer::Uninitialized(n);
  FloatBuffer rows = FloatBuffer::Uninitialized(n * spec->row_floats());
  std::memcpy(ids.data(), id_frame.data(), id_frame.size());
  std::memcpy(rows.data(), row_frame.data(), row_frame.size());
  RETURN_IF_ERROR(store_->WriteRows(store_table_, ids.data(), n, rows.data()));
  loading_.insert(ids.data(), ids.data() + n);
  return Status::OK();
}

Status SparseBucketState::FinishLoad(const wire::ChainSnapshot& snap) {
  const SparseTableSpec* spec = store_->GetSparse(store_table_);
  int64_t* step = store_->SparseStep(store_table_);
  if (spec == nullptr || step == nullptr) {
    return NotFoundError("no sparse table '" + store_table_ + "' in the store");
  }
  // Every row any replica of the chain ever updated is in the snapshot. A
  // row this replica updated that is not (an update it applied as a head
  // that was fenced before anyone acknowledged it) goes back to its
  // initializer's values, as on every other replica.
  std::vector<uint64_t> reset;
  for (uint64_t id : touched_) {
    if (!loading_.count(id)) reset.push_back(id);
  }
  if (!reset.empty()) {
    std::vector<float> init(reset.size() * spec->row_floats());
    for (size_t i = 0; i < reset.size(); ++i) {
      float* row = init.data() + i * spec->row_floats();
      spec->init.FillRow(reset[i], spec->width, row);
      std::fill(row + spec->width, row + spec->row_floats(), spec->slot_init);
    }
    RETURN_IF_ERROR(store_->WriteRows(store_table_, reset.data(), reset.size(), init.data()));
  }
  *step = snap.step();
  touched_.swap(loading_);
  loading_.clear();
  return Status::OK();
}

}  // namespace server_internal
}  // namespace relaxps
