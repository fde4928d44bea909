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

// ApplyMove of a sparse table: every bucket in [m.begin, m.end) that
// m.source holds (unreplicated) goes to m.destination.
Status ApplyBucketMove(wire::TableShards* ts, const wire::RangeMove& m) {
  const uint64_t n = static_cast<uint64_t>(ts->buckets_size());
  int moved = 0;
  for (uint64_t k = m.begin(); k < m.end() && k < n; ++k) {
    const wire::SparseBucket& b = ts->buckets(static_cast<int>(k));
    if (b.server() != m.source()) continue;
    if (b.chain_size() > 0) {
      return FailedPreconditionError("sparse table '" + m.table() + "' is replicated on chains");
    }
    ++moved;
  }
  if (m.begin() >= m.end() || m.end() > n || moved == 0) {
    return FailedPreconditionError("server " + std::to_string(m.source()) +
                                   " holds no unreplicated bucket in [" +
                                   std::to_string(m.begin()) + ", " + std::to_string(m.end()) +
                                   ") of sparse table '" + m.table() + "' (of " +
                                   std::to_string(n) + " buckets)");
  }
  for (uint64_t k = m.begin(); k < m.end(); ++k) {
    wire::SparseBucket* b = ts->mutable_buckets(static_cast<int>(k));
    if (b->server() == m.source()) b->set_server(m.destination());
  }
  return Status::OK();
}

// Buckets of `ts` per server among `servers` (each counted, 0 if none).
std::map<int, uint64_t> BucketLoad(const wire::TableShards& ts, const std::set<int>& servers) {
  std::map<int, uint64_t> load;
  for (int s : servers) load[s] = 0;
  for (const wire::SparseBucket& b : ts.buckets()) {
    if (load.count(b.server()) > 0) ++load[b.server()];
  }
  return load;
}

bool Replicated(const wire::TableShards& ts) {
  for (const wire::SparseBucket& b : ts.buckets()) {
    if (b.chain_size() > 0) return true;
  }
  return false;
}

wire::RangeMove BucketMove(const std::string& table, int first, int last, int source,
                           int dest) {
  wire::RangeMove m;
  m.set_table(table);
  m.set_begin(static_cast<uint64_t>(first));
  m.set_end(static_cast<uint64_t>(last) + 1);
  m.set_source(source);
  m.set_destination(dest);
  return m;
}

// PlanMovesTo for sparse table `original` (on `map`, edited as it goes): one
// move per giving server, of its highest buckets.
void PlanBucketsTo(wire::ShardMap* map, const wire::TableShards& original, int dest,
                   const std::set<int>& serving, std::vector<wire::RangeMove>* plan) {
  if (original.buckets_size() == 0 || Replicated(original)) return;
  const std::string name = original.table().name();
  const uint64_t share = static_cast<uint64_t>(original.buckets_size()) / serving.size();
  wire::TableShards* ts = FindTable(map, name);
  std::map<int, uint64_t> load = {{dest, 0}};
  for (const wire::SparseBucket& b : ts->buckets()) ++load[b.server()];
  std::map<int, int> lowest_given;  // By giving server: its lowest bucket given.
  while (load[dest] < share) {
    // The server with the most buckets above its share gives its last one.
    int source = -1;
    for (const auto& [server, n] : load) {
      if (server == dest || n <= share) continue;
      if (source < 0 || n > load[source]) source = server;
    }
    if (source < 0) break;
    int bucket = -1;
    for (int k = ts->buckets_size() - 1; k >= 0 && bucket < 0; --k) {
      if (ts->buckets(k).server() == source) bucket = k;
    }
    ts->mutable_buckets(bucket)->set_server(dest);
    --load[source];
    ++load[dest];
    lowest_given[source] = bucket;
  }
  // Each source gave its buckets from `lowest` up: one move, one cut-over.
  for (const auto& [source, lowest] : lowest_given) {
    plan->push_back(BucketMove(name, lowest, original.buckets_size() - 1, source, dest));
  }
}

}  // namespace

Status ApplyMove(wire::ShardMap* map, const wire::RangeMove& m) {
  wire::TableShards* ts = FindTable(map, m.table());
  if (ts != nullptr && !IsDense(*ts)) return ApplyBucketMove(ts, m);
  if (ts == nullptr || m.begin() >= m.end()) {
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
    if (!IsDense(ts)) {
      // No bucket of the range left on the source, one on the destination.
      bool dest_holds = false;
      for (uint64_t k = m.begin(); k < m.end() && k < static_cast<uint64_t>(ts.buckets_size());
           ++k) {
        const int server = ts.buckets(static_cast<int>(k)).server();
        if (server == m.source()) return false;
        dest_holds |= server == m.destination();
      }
      return dest_holds;
    }
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
    if (!IsDense(original_ts)) {
      PlanBucketsTo(&map, original_ts, dest, serving, &plan);
      continue;
    }
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
      if (ts.buckets_size() == 0) {
        if (source < original.servers_size()) {
          return FailedPreconditionError(
              "sparse table '" + name + "' has no buckets in the map (a map of an older "
              "version places its rows by server): its rows cannot move");
        }
        continue;
      }
      std::vector<int> held;
      for (int k = 0; k < ts.buckets_size(); ++k) {
        const wire::SparseBucket& b = ts.buckets(k);
        if (b.server() != source && std::find(b.chain().begin(), b.chain().end(), source) ==
                                        b.chain().end()) {
          continue;
        }
        if (b.chain_size() > 0) {
          return FailedPreconditionError("sparse table '" + name + "' is replicated on chains");
        }
        held.push_back(k);
      }
      // Each bucket to the other server holding the fewest buckets of the
      // table then; the source's buckets in order, so that each destination
      // gets a consecutive run of them: one move (one cut-over) each.
      wire::TableShards* now = FindTable(&map, name);
      std::map<int, uint64_t> load = BucketLoad(*now, others);
      std::map<int, int> count;
      for (size_t i = 0; i < held.size(); ++i) {
        int dest = *others.begin();
        for (const auto& [s, n] : load) {
          if (n < load.at(dest)) dest = s;
        }
        ++load[dest];
        ++count[dest];
      }
      size_t i = 0;
      for (const auto& [dest, n] : count) {
        const wire::RangeMove m = BucketMove(name, held[i], held[i + n - 1], source, dest);
        RETURN_IF_ERROR(ApplyBucketMove(now, m));
        plan.push_back(m);
        i += n;
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
