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


wire::DenseRange* FindChained(wire::ShardMap* map, const wire::RangeMove& m) {
  wire::TableShards* ts = FindTable(map, m.table());
  if (ts == nullptr || !IsDense(*ts)) return nullptr;
  for (wire::DenseRange& r : *ts->mutable_ranges()) {
    if (r.begin() == m.begin() && r.end() == m.end() && r.chain_size() > 0) return &r;
  }
  return nullptr;
}

bool InChain(const wire::DenseRange& r, int server) {
  return std::find(r.chain().begin(), r.chain().end(), server) != r.chain().end();
}

bool Replicated(const wire::TableShards& ts) {
  for (const wire::DenseRange& r : ts.ranges()) {
    if (r.chain_size() > 0) return true;
  }
  return false;
}

Status NoChainedRange(const wire::RangeMove& m) {
  return FailedPreconditionError("no range [" + std::to_string(m.begin()) + ", " +
                                 std::to_string(m.end()) + ") of table '" + m.table() +
                                 "' on a chain");
}

// Removes `server` from r's chain; its successor heads it if it did.
void DropMember(wire::DenseRange* r, int server) {
  auto* chain = r->mutable_chain();
  chain->erase(std::remove(chain->begin(), chain->end(), server), chain->end());
  r->set_server(r->chain(0));
}

// Replica keys per server of chained table `ts` (every server of `serving`
// listed, holding nothing or not).
std::map<int, uint64_t> ReplicaLoad(const wire::TableShards& ts, const std::set<int>& serving) {
  std::map<int, uint64_t> load;
  for (int s : serving) load[s] = 0;
  for (const wire::DenseRange& r : ts.ranges()) {
    for (int c : r.chain()) load[c] += r.end() - r.begin();
  }
  return load;
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

// PlanMovesTo for a chained table: whole ranges, one replica each.
void PlanChainedTo(wire::ShardMap* map, const std::string& name, int dest,
                   const std::set<int>& serving, std::vector<wire::RangeMove>* plan) {
  const wire::TableShards* ts = FindTable(map, name);
  const uint64_t replicas = ts->ranges(0).chain_size();
  const uint64_t share = ts->table().size() * replicas / serving.size();
  // Each move adds a range to `dest`: at most one per range.
  for (int round = 0; round < ts->ranges_size(); ++round) {
    std::map<int, uint64_t> load = ReplicaLoad(*ts, serving);
    const uint64_t have = load[dest];
    // The range to take: from the most loaded server above its share, its
    // largest range that `dest` holds no replica of, if taking it brings
    // `dest` closer to its share (have + size/2 < share).
    const wire::DenseRange* from = nullptr;
    int source = -1;
    for (const wire::DenseRange& r : ts->ranges()) {
      if (InChain(r, dest) || have + (r.end() - r.begin()) / 2 >= share) continue;
      for (int c : r.chain()) {
        if (serving.count(c) == 0 || load[c] <= share) continue;
        const bool better = source < 0 || load[c] > load[source] ||
                            (load[c] == load[source] &&
                             r.end() - r.begin() > from->end() - from->begin());
        if (better) {
          source = c;
          from = &r;
        }
      }
    }
    if (from == nullptr) return;
    wire::RangeMove m;
    m.set_table(name);
    m.set_begin(from->begin());
    m.set_end(from->end());
    m.set_source(source);
    m.set_destination(dest);
    if (!ApplyMove(map, m).ok()) return;
    plan->push_back(m);
    ts = FindTable(map, name);
  }
}

bool BucketsReplicated(const wire::TableShards& ts) {
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
  if (original.buckets_size() == 0 || BucketsReplicated(original)) return;
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

bool IsChainMove(const wire::ShardMap& map, const wire::RangeMove& m) {
  return FindChained(const_cast<wire::ShardMap*>(&map), m) != nullptr;
}

std::vector<int> ChainOf(const wire::ShardMap& map, const wire::RangeMove& m) {
  const wire::DenseRange* r = FindChained(const_cast<wire::ShardMap*>(&map), m);
  return r == nullptr ? std::vector<int>{} : std::vector<int>(r->chain().begin(), r->chain().end());
}

Status ExtendChain(wire::ShardMap* map, const wire::RangeMove& m) {
  wire::DenseRange* r = FindChained(map, m);
  if (r == nullptr) return NoChainedRange(m);
  if (!InChain(*r, m.destination())) r->add_chain(m.destination());
  return Status::OK();
}

Status SpliceSource(wire::ShardMap* map, const wire::RangeMove& m) {
  wire::DenseRange* r = FindChained(map, m);
  if (r == nullptr) return NoChainedRange(m);
  if (!InChain(*r, m.source())) return Status::OK();
  if (r->chain_size() < 2) {
    return FailedPreconditionError("server " + std::to_string(m.source()) +
                                   " holds the last replica of keys [" +
                                   std::to_string(m.begin()) + ", " + std::to_string(m.end()) +
                                   ") of table '" + m.table() + "'");
  }
  DropMember(r, m.source());
  return Status::OK();
}

Status RetractDestination(wire::ShardMap* map, const wire::RangeMove& m) {
  wire::DenseRange* r = FindChained(map, m);
  if (r == nullptr) return NoChainedRange(m);
  if (!InChain(*r, m.destination())) return Status::OK();
  if (r->chain_size() < 2) {
    return FailedPreconditionError("server " + std::to_string(m.destination()) +
                                   " holds the last replica of keys [" +
                                   std::to_string(m.begin()) + ", " + std::to_string(m.end()) +
                                   ") of table '" + m.table() + "'");
  }
  DropMember(r, m.destination());
  return Status::OK();
}

Status ApplyMove(wire::ShardMap* map, const wire::RangeMove& m) {
  wire::TableShards* ts = FindTable(map, m.table());
  if (ts != nullptr && !IsDense(*ts)) return ApplyBucketMove(ts, m);
  if (ts == nullptr || m.begin() >= m.end()) {
    return FailedPreconditionError("no dense table '" + m.table() + "' to move keys of");
  }
  if (wire::DenseRange* chained = FindChained(map, m); chained != nullptr) {
    if (!InChain(*chained, m.source()) || InChain(*chained, m.destination())) {
      return FailedPreconditionError(
          "server " + std::to_string(m.source()) + " is no replica of keys [" +
          std::to_string(m.begin()) + ", " + std::to_string(m.end()) + ") of table '" +
          m.table() + "', or server " + std::to_string(m.destination()) + " is one already");
    }
    RETURN_IF_ERROR(ExtendChain(map, m));
    return SpliceSource(map, m);
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
  if (const wire::DenseRange* r = FindChained(const_cast<wire::ShardMap*>(&map), m);
      r != nullptr) {
    return InChain(*r, m.destination()) && !InChain(*r, m.source());
  }
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
    if (Replicated(original_ts)) {
      PlanChainedTo(&map, name, dest, serving, &plan);
      continue;
    }
    const uint64_t share = original_ts.table().size() / serving.size();
    while (true) {
      const wire::TableShards& ts = *FindTable(&map, name);
      std::map<int, uint64_t> load;
      for (const wire::DenseRange& r : ts.ranges()) load[r.server()] += r.end() - r.begin();
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

namespace {

// The moves that give drained range [begin, end) of `source` (unreplicated,
// dense table `name`) to `others` by their shares: each server's share is
// the table's size / others.size(), and the range is cut into consecutive
// pieces, one per server still below its share, as large as that server
// lacks (the last takes the rest), boundaries on kDenseChunk (a piece of
// less than a chunk joins its neighbour). A server holding the range that
// ends at `begin` takes the first piece and one holding the range that
// starts at `end` the last, so that pieces land next to ranges their
// server holds; the others by ascending load. The pieces move tail first,
// so each move cuts the tail of the source's remaining range (ApplyMove);
// the first piece moves whole. Appended to *plan and applied to *map.
Status PlanDrainOfRange(wire::ShardMap* map, const std::string& name, uint64_t begin,
                        uint64_t end, int source, const std::set<int>& others,
                        std::vector<wire::RangeMove>* plan) {
  const wire::TableShards& ts = *FindTable(map, name);
  std::map<int, uint64_t> load;
  for (int s : others) load[s] = 0;
  int before = -1;  // Holds the range ending at `begin`.
  int after = -1;   // Holds the range starting at `end`.
  uint64_t size = 0;
  for (const wire::DenseRange& o : ts.ranges()) {
    size += o.end() - o.begin();
    if (load.count(o.server()) == 0) continue;
    load[o.server()] += o.end() - o.begin();
    if (o.end() == begin) before = o.server();
    if (o.begin() == end) after = o.server();
  }
  const uint64_t share = size / others.size();
  std::vector<int> order;  // Servers in the key order of their pieces.
  for (const auto& [s, keys] : load) {
    if (s != before && s != after) order.push_back(s);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&load](int a, int b) { return load[a] < load[b]; });
  if (before >= 0) order.insert(order.begin(), before);
  if (after >= 0 && after != before) order.push_back(after);
  // Cut points: pieces [cuts[i], cuts[i + 1]) go to dests[i].
  std::vector<uint64_t> cuts = {begin};
  std::vector<int> dests;
  for (int s : order) {
    const uint64_t at = cuts.back();
    if (at >= end) break;
    const uint64_t lacks = load[s] < share ? share - load[s] : 0;
    if (lacks == 0) continue;
    uint64_t cut = at + lacks;
    cut = (cut + kDenseChunk / 2) / kDenseChunk * kDenseChunk;  // Nearest chunk boundary.
    if (cut <= at) continue;                // It lacks less than half a chunk.
    if (cut + kDenseChunk > end) cut = end;  // No sliver left behind.
    cuts.push_back(cut);
    dests.push_back(s);
  }
  if (dests.empty()) {
    // Every other server holds its share already (rounding): the least
    // loaded takes the whole range.
    int least = *others.begin();
    for (const auto& [s, keys] : load) {
      if (keys < load[least]) least = s;
    }
    cuts.push_back(end);
    dests.push_back(least);
  }
  cuts.back() = end;  // The last piece takes the rest.
  for (size_t i = dests.size(); i-- > 0;) {
    wire::RangeMove m;
    m.set_table(name);
    m.set_begin(cuts[i]);
    m.set_end(end);  // The tail of what the source still holds of the range.
    m.set_source(source);
    m.set_destination(dests[i]);
    RETURN_IF_ERROR(ApplyMove(map, m));
    plan->push_back(m);
    end = cuts[i];
  }
  return Status::OK();
}

}  // namespace

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
      if (r.chain_size() > 0) {
        if (!InChain(r, source)) continue;
        // Its replica goes to the server outside the chain holding the
        // fewest replica keys of the table.
        const wire::TableShards& now = *FindTable(&map, name);
        std::map<int, uint64_t> load = ReplicaLoad(now, others);
        const wire::DenseRange* cur = FindChained(&map, [&] {
          wire::RangeMove probe;
          probe.set_table(name);
          probe.set_begin(r.begin());
          probe.set_end(r.end());
          return probe;
        }());
        int dest = -1;
        for (const auto& [s, keys] : load) {
          if (others.count(s) == 0 || (cur != nullptr && InChain(*cur, s))) continue;
          if (dest < 0 || keys < load[dest]) dest = s;
        }
        if (dest < 0) {
          return FailedPreconditionError(
              "every other server already holds a replica of keys [" + std::to_string(r.begin()) +
              ", " + std::to_string(r.end()) + ") of table '" + name +
              "': a drain under chains needs a server outside the chain");
        }
        wire::RangeMove m;
        m.set_table(name);
        m.set_begin(r.begin());
        m.set_end(r.end());
        m.set_source(source);
        m.set_destination(dest);
        RETURN_IF_ERROR(ApplyMove(&map, m));
        plan.push_back(m);
        continue;
      }
      if (r.server() != source) continue;
      RETURN_IF_ERROR(PlanDrainOfRange(&map, name, r.begin(), r.end(), source, others, &plan));
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
