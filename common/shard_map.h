// ShardMap: which server owns which part of which table.
//
// Dense tables are split into contiguous key ranges, balanced in units of
// `kDenseChunk` keys across the servers; sparse rows are hashed by row id
// into a fixed number of buckets, each placed on a server (or, under chain
// replication, a chain of servers) like a dense range. The map has a version bumped by the coordinator at every change;
// requests carry it and a server seeing a newer one refreshes.
//
// Thread-safety: immutable after construction; share it via
// std::shared_ptr<const ShardMap> and swap the pointer to update.
#ifndef RELAXPS_COMMON_SHARD_MAP_H_
#define RELAXPS_COMMON_SHARD_MAP_H_

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/table.h"
#include "proto/relaxps.pb.h"

namespace relaxps {

// Dense shard boundaries are multiples of this many keys (except the last).
constexpr uint64_t kDenseChunk = 4096;

// One piece of a dense request after routing.
struct DenseSlice {
  int server = -1;        // Index into the map's servers.
  uint64_t begin = 0;     // Global first key.
  uint64_t count = 0;     // Keys.
  uint64_t offset = 0;    // Offset of `begin` within the caller's range.
  uint64_t range_begin = 0;  // The shard range the slice lies in.
  uint64_t range_end = 0;
};

class ShardMap {
 public:
  ShardMap() = default;
  // Validates the ranges of every table. InvalidArgument on gaps/overlaps,
  // server indices out of range, an unknown table type or a sparse table
  // without any server.
  static StatusOr<ShardMap> FromProto(const wire::ShardMap& proto);

  const wire::ShardMap& proto() const { return proto_; }
  uint64_t version() const { return proto_.version(); }
  // Job epoch (bumped at every chain reconfiguration; 0 without chains).
  uint64_t epoch() const { return proto_.epoch(); }
  int num_servers() const { return proto_.servers_size(); }
  const std::string& server_endpoint(int i) const { return proto_.servers(i).endpoint(); }

  // nullptr if the table is unknown.
  const wire::TableShards* FindTable(const std::string& name) const;

  // OK if keys [offset, offset + count) are a non-empty range inside dense
  // table `table` (tested without sums that could wrap near 2^64); NotFound
  // for an unknown table, InvalidArgument for a sparse one or a range that is
  // empty or outside it.
  Status CheckDenseRange(const std::string& table, uint64_t offset, uint64_t count) const;
  // Splits keys [offset, offset + count) of a dense table by owner.
  // Fails as CheckDenseRange does.
  StatusOr<std::vector<DenseSlice>> SplitDense(const std::string& table, uint64_t offset,
                                              uint64_t count) const;
  // Sparse routing. The bucket of `row_id` in sparse table `ts` (one of this
  // map's tables), in [0, NumBuckets(ts)); and the server holding (heading)
  // a bucket. A table without buckets (a map of an older version) has one
  // per server: bucket b is on server b.
  int SparseBucket(const wire::TableShards& ts, uint64_t row_id) const;
  int NumBuckets(const wire::TableShards& ts) const;
  int BucketServer(const wire::TableShards& ts, int bucket) const;
  // The server holding (heading) row `row_id` of `ts`.
  int SparseServer(const wire::TableShards& ts, uint64_t row_id) const {
    return BucketServer(ts, SparseBucket(ts, row_id));
  }

  // Balanced contiguous ranges of `size` keys over `num_servers` servers.
  // With replicas > 1 (chain replication) range i is held by the chain
  // servers i, i+1, ..., i+replicas-1 (mod num_servers), head first, as in
  // the OSDI'14 parameter server.
  static std::vector<wire::DenseRange> AssignDense(uint64_t size, int num_servers,
                                                   int replicas = 1);
  // `num_buckets` hash buckets of a sparse table placed like dense ranges:
  // bucket b on server b mod num_servers, or the chain starting there.
  static std::vector<wire::SparseBucket> AssignBuckets(int num_buckets, int num_servers,
                                                       int replicas = 1);
  // The home chain of the range (or bucket) with index `range` (see
  // AssignDense).
  static std::vector<int> HomeChain(int range, int num_servers, int replicas);

 private:
  wire::ShardMap proto_;
  std::unordered_map<std::string, int> table_index_;
};

// Chain reconfiguration on a shard-map proto (coordinator side; they do not
// bump the version or epoch); both act on the chains of dense ranges and of
// sparse buckets alike. RemoveFromChains drops `server` from every chain; a
// range whose head it was gets the next replica as head. Returns the number
// of chains changed, or FailedPrecondition naming a range or bucket that would
// be left without any replica (the map is then unchanged).
// `syncing`: servers that joined chains and may not hold their state yet
// (a chain left with only those has lost its data as well).
StatusOr<int> RemoveFromChains(wire::ShardMap* map, int server, int replicas,
                               const std::set<int>& syncing = {});
// Appends `server` as tail to every chain of its home placement that lacks
// it. Returns the number of chains it joined.
int JoinChains(wire::ShardMap* map, int server, int num_servers, int replicas);

// Index of a sparse row among n buckets (or servers): stable, well mixed.
int SparseOwner(uint64_t row_id, int num_servers);

// TableOptions <-> wire.
void TableToProto(const TableOptions& t, wire::TableProto* out);
TableOptions TableFromProto(const wire::TableProto& p);

}  // namespace relaxps

#endif  // RELAXPS_COMMON_SHARD_MAP_H_
