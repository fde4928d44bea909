// SparseBucketState: one hash bucket of a sparse table on a chain replica
// (--recovery=chain).
//
// The bucket's rows are their own store table ("<table>#<bucket>"), so its
// optimizer step counter (Adam's bias correction) counts the updates of this
// bucket only and is identical on every replica that applied the same
// sequence. Rows are read and updated through a SparseShardState. The bucket
// also remembers the id of every row an update touched: a state transfer to
// a joining replica copies exactly those rows (a row never updated holds its
// initializer's values, which the joiner creates itself on first touch).
//
// Thread-safety: not synchronized; used only on the server's loop thread.
#ifndef RELAXPS_SERVER_INTERNAL_SPARSE_BUCKET_H_
#define RELAXPS_SERVER_INTERNAL_SPARSE_BUCKET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "common/wire.h"
#include "proto/relaxps.pb.h"
#include "server/internal/sparse_shard.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {

// The store table holding bucket `bucket` of sparse table `table`.
std::string BucketStoreTable(const std::string& table, int bucket);

class SparseBucketState {
 public:
  // REQUIRES: the store has the table `shard` reads (named
  // BucketStoreTable(...)); pointers outlive this.
  SparseBucketState(std::unique_ptr<SparseShardState> shard, ParamStore* store,
                    std::string store_table, int bucket, int num_buckets);
  SparseBucketState(const SparseBucketState&) = delete;
  SparseBucketState& operator=(const SparseBucketState&) = delete;

  int bucket() const { return bucket_; }
  int num_buckets() const { return num_buckets_; }  // Of the table.
  SparseShardState* shard() { return shard_.get(); }
  uint64_t rows_updated() const { return touched_.size(); }

  // SparseShardState::Push, remembering the rows it touched.
  Status Push(int worker, int64_t clock, const uint64_t* ids, size_t n, const float* grads);
  // SparseShardState::AddDelta (hybrid: a re-seed's merged row changes, or a
  // worker's raw delta), remembering the rows it touched.
  Status AddDelta(const uint64_t* ids, size_t n, const float* deltas);

  // Snapshot of the bucket: the step counter in *snap, and two frames: the
  // ids of every updated row, then those rows (all slots).
  Status Save(wire::ChainSnapshot* snap, std::vector<Frame>* frames);
  // Loads a snapshot from Save (frames as received). InvalidArgument when the
  // frames do not fit this bucket's row shape.
  Status Load(const wire::ChainSnapshot& snap, const std::vector<Frame>& frames);

 private:
  // Constant after construction.
  const std::unique_ptr<SparseShardState> shard_;
  ParamStore* const store_;
  const std::string store_table_;
  const int bucket_;
  const int num_buckets_;

  std::unordered_set<uint64_t> touched_;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_SPARSE_BUCKET_H_
