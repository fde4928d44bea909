// Shard maps for the client's unit tests (router, part sender, data path):
// live servers by endpoint, then dense and sparse tables spread over them.
#ifndef RELAXPS_TESTS_CLIENT_TEST_MAPS_H_
#define RELAXPS_TESTS_CLIENT_TEST_MAPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/shard_map.h"
#include "proto/relaxps.pb.h"

namespace relaxps {
namespace test {

// A map of `version` and `epoch` with one live server per endpoint (server i
// at endpoints[i]; "" for one with no endpoint yet) and no tables.
inline wire::ShardMap ServersMap(uint64_t version, const std::vector<std::string>& endpoints,
                                 uint64_t epoch = 1) {
  wire::ShardMap m;
  m.set_version(version);
  m.set_epoch(epoch);
  for (int i = 0; i < static_cast<int>(endpoints.size()); ++i) {
    wire::ServerInfo* s = m.add_servers();
    s->set_id(i);
    s->set_endpoint(endpoints[i]);
    s->set_alive(true);
  }
  return m;
}

// Adds dense table `name` of `chunks` dense chunks over the map's servers
// (ShardMap::AssignDense: server i holds chunk i when chunks == servers).
inline void AddDenseTable(wire::ShardMap* m, const std::string& name, uint64_t chunks) {
  wire::TableShards* t = m->add_tables();
  t->mutable_table()->set_name(name);
  t->mutable_table()->set_size(chunks * kDenseChunk);
  for (const wire::DenseRange& r : ShardMap::AssignDense(chunks * kDenseChunk, m->servers_size())) {
    *t->add_ranges() = r;
  }
}

// Adds sparse table `name` of `buckets` hash buckets over the map's servers,
// rows of `width` floats.
inline void AddSparseTable(wire::ShardMap* m, const std::string& name, int buckets, int width) {
  wire::TableShards* t = m->add_tables();
  t->mutable_table()->set_name(name);
  t->mutable_table()->set_type(static_cast<int>(TableType::kSparse));
  t->mutable_table()->set_row_width(width);
  for (const wire::SparseBucket& b : ShardMap::AssignBuckets(buckets, m->servers_size())) {
    *t->add_buckets() = b;
  }
}

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_CLIENT_TEST_MAPS_H_
