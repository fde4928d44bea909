// Copying a hash bucket's rows between servers (bucket_copy.h).
#include "server/internal/bucket_copy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/shard_map.h"

namespace relaxps {
namespace server_internal {

StatusOr<BucketCopy> CopyBucketRows(ParamStore* store, const std::string& table,
                                    const std::set<int>& buckets, int num_buckets) {
  const SparseTableSpec* spec = store->GetSparse(table);
  int64_t* step = store->SparseStep(table);
  if (spec == nullptr || step == nullptr) {
    return NotFoundError("no sparse table '" + table + "' in the store");
  }
  std::vector<uint64_t> all;
  RETURN_IF_ERROR(store->SparseRowIds(table, &all));
  std::vector<uint64_t> mine;
  for (uint64_t id : all) {
    if (buckets.count(SparseOwner(id, num_buckets)) > 0) mine.push_back(id);
  }
  std::sort(mine.begin(), mine.end());
  BucketCopy copy;
  copy.row_floats = spec->row_floats();
  copy.step = *step;
  copy.ids = KeyBuffer::Uninitialized(mine.size());
  std::copy(mine.begin(), mine.end(), copy.ids.data());
  copy.rows = FloatBuffer::Uninitialized(mine.size() * copy.row_floats);
  // Every one exists: the read creates nothing.
  RETURN_IF_ERROR(store->ReadRows(table, copy.ids.data(), mine.size(), copy.rows.data()));
  return copy;
}

Status WriteBucketPiece(ParamStore* store, const std::string& table,
                        const std::set<int>& buckets, int num_buckets, const Frame& id_frame,
                        const Frame& row_frame) {
  const std::string which = "a piece of " + std::to_string(buckets.size()) + " bucket(s) of '" +
                            table + "'";
  const SparseTableSpec* spec = store->GetSparse(table);
  if (spec == nullptr) return NotFoundError("no sparse table '" + table + "' in the store");
  if (id_frame.size() % sizeof(uint64_t) != 0) {
    return InvalidArgumentError(which + " has a frame of row ids of " +
                                std::to_string(id_frame.size()) + " bytes");
  }
  const size_t n = id_frame.size() / sizeof(uint64_t);
  if (row_frame.size() != n * spec->row_floats() * sizeof(float)) {
    return InvalidArgumentError(which + " has " + std::to_string(row_frame.size()) +
                                " bytes of rows for " +
                                std::to_string(n) + " ids of " +
                                std::to_string(spec->row_floats()) + " floats");
  }
  if (n == 0) return Status::OK();
  // Frames need not be aligned for their types: copy their bytes.
  std::vector<uint64_t> ids(n);
  std::vector<float> rows(n * spec->row_floats());
  std::memcpy(ids.data(), id_frame.data(), id_frame.size());
  std::memcpy(rows.data(), row_frame.data(), row_frame.size());
  for (uint64_t id : ids) {
    if (buckets.count(SparseOwner(id, num_buckets)) == 0) {
      return InvalidArgumentError("row " + std::to_string(id) + " of '" + table +
                                  "' is not in a bucket that moves");
    }
  }
  return store->WriteRows(table, ids.data(), n, rows.data());
}

bool AnyRowIn(const std::set<int>& buckets, int num_buckets, const uint64_t* ids, size_t n) {
  if (buckets.empty() || num_buckets <= 0) return false;
  for (size_t i = 0; i < n; ++i) {
    if (buckets.count(SparseOwner(ids[i], num_buckets)) > 0) return true;
  }
  return false;
}

}  // namespace server_internal
}  // namespace relaxps
