// Range plans (range_plan.h).
#include "coordinator/range_plan.h"

#include <algorithm>
#include <map>

#include "common/shard_map.h"

namespace relaxps {
namespace coordinator_internal {

namespace {

wire::TableShards* FindTable(wire::ShardMap* map, const std::string& name) {
  for (wire::TableShards& ts : *map->mutable_tables()) {
    if (ts.table().name() == name) return &ts;
  }
  return nullptr;
}

bool IsDense(const wire::TableShards& ts) {
  return ts.table().type() == static_cast<int>(TableType::kDense);
}

}  // namespace

Status ApplyMove(wire::ShardMap* map, const wire::RangeMove& m) {
  wire::TableShards* ts = FindTable(map, m.table());
  if (ts == nullptr || !IsDense(*ts) || m.begin() >= m.end()) {
    return FailedPreconditionError("no dense table '" + m.table() + "' to move keys of");
  }
  auto* ranges = ts->mutable_ranges();
  for (int i = 0; i < ranges->size(); ++i) {
    wire::DenseRange* r = ranges->Mutable(i);
    if (r->server() != m.source() || r->end() != m.end() || m.begin() < r->begin() ||
        r->chain_size() > 0) {
      continue;
    }
    if (m.begin() == r->begin()) {
      r->set_server(m.destination());
      return Status::OK();
    }
    wire::DenseRange tail;
    tail.set_begin(m.begin());
    tail.set_end(m.end());
    tail.set_server(m.destination());
    r->set_end(m.begin());
    *ranges->Add() = tail;
    // Keep the ranges in key order: the new one right after its head.
    for (int j = ranges->size() - 1; j > i + 1; --j) ranges->SwapElements(j, j - 1);
    return Status::OK();
  }
  return FailedPreconditionError("server " + std::to_string(m.source()) +
                                 " holds no unreplicated range of table '" + m.table() +
                                 "' ending at key " + std::to_string(m.end()) + " from key " +
                                 std::to_string(m.begin()) + " on");
}

bool MoveApplied(const wire::ShardMap& map, const wire::RangeMove& m) {
  for (const wire::TableShards& ts : map.tables()) {
    if (ts.table().name() != m.table()) continue;
    for (const wire::DenseRange& r : ts.ranges()) {
      if (r.begin() == m.begin() && r.end() == m.end() && r.server() == m.destination()) {
        return true;
      }
    }
  }
  return false;
}

std::vector<wire::RangeMove> PlanMovesTo(const wire::ShardMap& original, int dest,
                                         const std::set<int>& serving) {
  std::vector<wire::RangeMove> plan;
  if (serving.empty() || serving.count(dest) == 0) return plan;
  wire::ShardMap map = original;
  for (const wire::TableShards& original_ts : original.tables()) {
    if (!IsDense(original_ts)) continue;
    const std::string name = original_ts.table().name();
    const uint64_t share = original_ts.table().size() / serving.size();
    while (true) {
      const wire::TableShards& ts = *FindTable(&map, name);
      std::map<int, uint64_t> load;
      bool replicated = false;
      for (const wire::DenseRange& r : ts.ranges()) {
        load[r.server()] += r.end() - r.begin();
        replicated |= r.chain_size() > 0;
      }
      if (replicated) break;
      const uint64_t have = load[dest];
      if (have + kDenseChunk > share) break;
      // The server with the most keys above its share gives.
      int source = -1;
      for (const auto& [server, keys] : load) {
        if (server == dest || keys <= share) continue;
        if (source < 0 || keys > load[source]) source = server;
      }
      if (source < 0) break;
      uint64_t take = std::min(load[source] - share, share - have);
      // From its largest range.
      const wire::DenseRange* from = nullptr;
      for (const wire::DenseRange& r : ts.ranges()) {
        if (r.server() != source) continue;
        if (from == nullptr || r.end() - r.begin() > from->end() - from->begin()) from = &r;
      }
      take = std::min(take, from->end() - from->begin());
      uint64_t cut = from->end() - take;
      cut = (cut + kDenseChunk - 1) / kDenseChunk * kDenseChunk;  // Boundaries on chunks.
      if (cut >= from->end()) break;  // Less than a chunk to give.
      if (cut < from->begin()) cut = from->begin();
      wire::RangeMove m;
      m.set_table(name);
      m.set_begin(cut);
      m.set_end(from->end());
      m.set_source(source);
      m.set_destination(dest);
      if (!ApplyMove(&map, m).ok()) break;
      plan.push_back(m);
    }
  }
  return plan;
}

StatusOr<std::vector<wire::RangeMove>> PlanMovesFrom(const wire::ShardMap& original, int source,
                                                     const std::set<int>& serving) {
  std::set<int> others = serving;
  others.erase(source);
  if (others.empty()) {
    return FailedPreconditionError("server " + std::to_string(source) +
                                   " is the only server: there is nowhere to move its ranges");
  }
  std::vector<wire::RangeMove> plan;
  wire::ShardMap map = original;
  for (const wire::TableShards& ts : original.tables()) {
    const std::string& name = ts.table().name();
    if (!IsDense(ts)) {
      bool holds = ts.buckets_size() == 0 ? source < original.servers_size() : false;
      for (const wire::SparseBucket& b : ts.buckets()) holds |= b.server() == source;
      if (holds) {
        return FailedPreconditionError("server " + std::to_string(source) +
                                       " holds hash buckets of sparse table '" + name +
                                       "', which range moves do not carry yet (issue 43)");
      }
      continue;
    }
    for (const wire::DenseRange& r : ts.ranges()) {
      if (r.server() != source) continue;
      if (r.chain_size() > 0) {
        return FailedPreconditionError("table '" + name + "' is replicated on chains");
      }
      std::map<int, uint64_t> load;
      for (int s : others) load[s] = 0;
      for (const wire::DenseRange& o : FindTable(&map, name)->ranges()) {
        if (load.count(o.server())) load[o.server()] += o.end() - o.begin();
      }
      int dest = *others.begin();
      for (const auto& [s, keys] : load) {
        if (keys < load[dest]) dest = s;
      }
      wire::RangeMove m;
      m.set_table(name);
      m.set_begin(r.begin());
      m.set_end(r.end());
      m.set_source(source);
      m.set_destination(dest);
      RETURN_IF_ERROR(ApplyMove(&map, m));
      plan.push_back(m);
    }
  }
  return plan;
}

bool HoldsAnything(const wire::ShardMap& map, int server) {
  for (const wire::TableShards& ts : map.tables()) {
    for (const wire::DenseRange& r : ts.ranges()) {
      if (r.server() == server) return true;
      for (int c : r.chain()) {
        if (c == server) return true;
      }
    }
    for (const wire::SparseBucket& b : ts.buckets()) {
      if (b.server() == server) return true;
    }
    if (!IsDense(ts) && ts.buckets_size() == 0 && server < map.servers_size()) return true;
  }
  return false;
}

}  // namespace coordinator_internal
}  // namespace relaxps
