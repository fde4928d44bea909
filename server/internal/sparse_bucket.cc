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

Status SparseBucketState::Save(wire::ChainSnapshot* snap, std::vector<Frame>* frames) {
  const SparseTableSpec* spec = store_->GetSparse(store_table_);
  int64_t* step = store_->SparseStep(store_table_);
  if (spec == nullptr || step == nullptr) {
    return NotFoundError("no sparse table '" + store_table_ + "' in the store");
  }
  KeyBuffer ids = KeyBuffer::Uninitialized(touched_.size());
  std::copy(touched_.begin(), touched_.end(), ids.data());
  std::sort(ids.data(), ids.data() + ids.size());
  FloatBuffer rows = FloatBuffer::Uninitialized(ids.size() * spec->row_floats());
  RETURN_IF_ERROR(store_->ReadRows(store_table_, ids.data(), ids.size(), rows.data()));
  snap->set_step(*step);
  frames->push_back(Frame::Share(ids));
  frames->push_back(Frame::Share(rows));
  return Status::OK();
}

Status SparseBucketState::Load(const wire::ChainSnapshot& snap, const std::vector<Frame>& frames) {
  const SparseTableSpec* spec = store_->GetSparse(store_table_);
  int64_t* step = store_->SparseStep(store_table_);
  if (spec == nullptr || step == nullptr) {
    return NotFoundError("no sparse table '" + store_table_ + "' in the store");
  }
  if (frames.size() != 2 || frames[0].size() % sizeof(uint64_t) != 0) {
    return InvalidArgumentError("snapshot of sparse bucket '" + store_table_ +
                                "' needs a frame of row ids and a frame of rows");
  }
  const size_t n = frames[0].size() / sizeof(uint64_t);
  if (frames[1].size() != n * spec->row_floats() * sizeof(float)) {
    return InvalidArgumentError("snapshot of sparse bucket '" + store_table_ + "' has " +
                                std::to_string(frames[1].size()) + " bytes of rows for " +
                                std::to_string(n) + " ids of " +
                                std::to_string(spec->row_floats()) + " floats");
  }
  // Frames need not be aligned for their types: copy their bytes.
  KeyBuffer ids = KeyBuffer::Uninitialized(n);
  FloatBuffer rows = FloatBuffer::Uninitialized(n * spec->row_floats());
  if (n > 0) {
    std::memcpy(ids.data(), frames[0].data(), frames[0].size());
    std::memcpy(rows.data(), frames[1].data(), frames[1].size());
  }
  RETURN_IF_ERROR(store_->WriteRows(store_table_, ids.data(), n, rows.data()));
  // Every row any replica of the chain ever updated is in the snapshot. A
  // row this replica updated that is not (an update it applied as a head
  // that was fenced before anyone acknowledged it) goes back to its
  // initializer's values, as on every other replica.
  const std::unordered_set<uint64_t> kept(ids.data(), ids.data() + n);
  std::vector<uint64_t> reset;
  for (uint64_t id : touched_) {
    if (!kept.count(id)) reset.push_back(id);
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
  touched_ = kept;
  return Status::OK();
}

}  // namespace server_internal
}  // namespace relaxps
