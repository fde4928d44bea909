// Fuzz target: shard maps from proto (common/shard_map). A client or server
// gets its map from the coordinator; ShardMap::FromProto must refuse any map
// that the routing functions cannot serve, and routing an accepted map must
// stay in bounds.
//
// Input: a mode byte. Even modes parse a wire::ShardMap from a
// length-prefixed byte string; odd modes build one from the input's fields
// (servers, tables with dense ranges or sparse type), which reaches the
// validation faster than protobuf's uninstrumented parser. The rest of the
// input chooses dense ranges and sparse row ids to route.
//
// Invariants checked on an accepted map: SplitDense returns slices that
// cover the request exactly, in order, each inside one range of the server
// it names; SparseServer names an existing server; TableFromProto and
// TableToProto round-trip the tables.
#include <cstdint>
#include <string>

#include "common/shard_map.h"
#include "tests/fuzz/fuzz_input.h"

namespace relaxps {
namespace {

wire::ShardMap TakeMap(fuzz::FuzzInput* in, bool parse) {
  wire::ShardMap m;
  if (parse) {
    if (!m.ParseFromString(in->TakeString(1024))) m.Clear();
    return m;
  }
  m.set_version(in->Take<uint8_t>());
  const int servers = static_cast<int>(in->TakeInRange(0, 4));
  for (int s = 0; s < servers; ++s) m.add_servers()->set_endpoint("tcp://127.0.0.1:" + std::to_string(s));
  const int tables = static_cast<int>(in->TakeInRange(0, 3));
  for (int t = 0; t < tables; ++t) {
    wire::TableShards* ts = m.add_tables();
    wire::TableProto* table = ts->mutable_table();
    table->set_name(in->TakeString(3));
    table->set_type(static_cast<int>(in->TakeInRange(0, 2)));
    table->set_row_width(in->Take<uint8_t>());
    const int ranges = static_cast<int>(in->TakeInRange(0, 4));
    uint64_t begin = in->Take<uint8_t>() < 240 ? 0 : in->Take<uint64_t>();
    for (int r = 0; r < ranges; ++r) {
      wire::DenseRange* range = ts->add_ranges();
      const uint64_t len = in->Take<uint8_t>() < 240 ? in->Take<uint16_t>() : in->Take<uint64_t>();
      range->set_begin(begin);
      range->set_end(begin + len);
      range->set_server(static_cast<int>(in->TakeInRange(0, 5)) - 1);
      begin += len;
    }
    const int buckets = static_cast<int>(in->TakeInRange(0, 4));
    for (int b = 0; b < buckets; ++b) {
      wire::SparseBucket* bucket = ts->add_buckets();
      bucket->set_server(static_cast<int>(in->TakeInRange(0, 5)) - 1);
      const int chain = static_cast<int>(in->TakeInRange(0, 3));
      for (int c = 0; c < chain; ++c) bucket->add_chain(static_cast<int>(in->TakeInRange(0, 5)) - 1);
    }
    table->set_size(in->Take<uint8_t>() < 240 ? begin : in->Take<uint64_t>());
  }
  return m;
}

void CheckRouting(const ShardMap& map, fuzz::FuzzInput* in) {
  const wire::TableShards* sparse = nullptr;
  for (const wire::TableShards& ts : map.proto().tables()) {
    if (ts.table().type() == static_cast<int>(TableType::kSparse)) sparse = &ts;
    FUZZ_CHECK(map.FindTable(ts.table().name()) != nullptr);
    wire::TableProto round_trip;
    TableToProto(TableFromProto(ts.table()), &round_trip);
    FUZZ_CHECK(round_trip.name() == ts.table().name());
    // A table that servers and clients treat as dense routes as one.
    const TableOptions table = TableFromProto(ts.table());
    if (table.type == TableType::kDense && table.size > 0) {
      FUZZ_CHECK(map.SplitDense(table.name, 0, table.size).ok());
    }
    if (ts.table().type() != static_cast<int>(TableType::kDense)) continue;
    const uint64_t size = ts.table().size();
    const uint64_t offset = in->Take<uint8_t>() < 200 ? in->TakeInRange(0, size) : in->Take<uint64_t>();
    const uint64_t count = in->Take<uint8_t>() < 200 ? in->TakeInRange(0, size) : in->Take<uint64_t>();
    StatusOr<std::vector<DenseSlice>> slices = map.SplitDense(ts.table().name(), offset, count);
    if (!slices.ok()) continue;
    FUZZ_CHECK(count > 0 && offset <= size && count <= size - offset);
    uint64_t next = offset;
    for (const DenseSlice& s : *slices) {
      FUZZ_CHECK(s.begin == next && s.count > 0 && s.offset == s.begin - offset);
      FUZZ_CHECK(s.server >= 0 && s.server < map.num_servers());
      next += s.count;
    }
    FUZZ_CHECK(next == offset + count);
  }
  // Clients route rows of a map that has a sparse table.
  for (int i = 0; sparse != nullptr && i < 4; ++i) {
    const uint64_t row = in->Take<uint64_t>();
    const int bucket = map.SparseBucket(*sparse, row);
    FUZZ_CHECK(bucket >= 0 && bucket < map.NumBuckets(*sparse));
    const int owner = map.SparseServer(*sparse, row);
    FUZZ_CHECK(owner >= 0 && owner < map.num_servers());
  }
}

}  // namespace
}  // namespace relaxps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace relaxps;
  QuietProtobufLogs();
  fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.Take<uint8_t>();
  const wire::ShardMap proto = TakeMap(&in, mode % 2 == 0);
  StatusOr<ShardMap> map = ShardMap::FromProto(proto);
  if (map.ok()) CheckRouting(*map, &in);
  return 0;
}
