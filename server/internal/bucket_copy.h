// Copying hash buckets of an unreplicated sparse table out of a server's
// store and into another's: the rows a range move of a bucket carries
// (docs/elastic.md, range_mover.h).
//
// Without chain replication a server keeps every row of a sparse table it
// holds in one store table, whatever the bucket; the rows of bucket k are
// those whose id hashes to k (SparseOwner(id, number of buckets)). A row that
// does not exist holds its initializer's values on every server, so copying
// the rows that exist copies the bucket. Rows a server gave away stay in its
// store (as a moved dense range's old store shard does); if the bucket comes
// back, the copy it receives overwrites each of them (the holder's rows of a
// bucket include every row any earlier holder had: rows are never dropped).
//
// Thread-safety: stateless functions; the caller serializes store access.
#ifndef RELAXPS_SERVER_INTERNAL_BUCKET_COPY_H_
#define RELAXPS_SERVER_INTERNAL_BUCKET_COPY_H_

#include <cstdint>
#include <set>
#include <string>

#include "common/buffer.h"
#include "common/status.h"
#include "common/wire.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {

struct BucketCopy {
  KeyBuffer ids;     // Ascending.
  FloatBuffer rows;  // ids.size() full row records (every slot).
  size_t row_floats = 0;
  int64_t step = 0;  // The table's optimizer steps here (Adam's bias correction).
};

// The rows of the buckets `buckets` (of `num_buckets`) of sparse table
// `table` in `store`, read now. NotFound for an unknown table; the store's error if it
// cannot list or read its rows.
StatusOr<BucketCopy> CopyBucketRows(ParamStore* store, const std::string& table,
                                    const std::set<int>& buckets, int num_buckets);

// Writes one piece of a copy (frames as received: the ids, then their rows)
// into `table` of `store`. InvalidArgument when the frames do not fit the
// table's row shape or a row is not in one of `buckets` (of `num_buckets`).
Status WriteBucketPiece(ParamStore* store, const std::string& table,
                        const std::set<int>& buckets, int num_buckets, const Frame& ids,
                        const Frame& rows);

// Whether any of the n rows `ids` lies in one of `buckets` (of `num_buckets`).
bool AnyRowIn(const std::set<int>& buckets, int num_buckets, const uint64_t* ids, size_t n);

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_BUCKET_COPY_H_
