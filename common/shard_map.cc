#include "common/shard_map.h"

#include <algorithm>

namespace relaxps {
namespace {

// A holder (server index) and its chain: both name servers of the map, the
// chain starts at the holder and names no server twice.
Status CheckChain(int server, const google::protobuf::RepeatedField<int32_t>& chain,
                  int num_servers) {
  if (server < 0 || server >= num_servers) {
    return InvalidArgumentError("server " + std::to_string(server) + " of " +
                                std::to_string(num_servers));
  }
  for (int i = 0; i < chain.size(); ++i) {
    if (chain[i] < 0 || chain[i] >= num_servers || (i == 0 && chain[0] != server) ||
        std::find(chain.begin(), chain.begin() + i, chain[i]) != chain.begin() + i) {
      return InvalidArgumentError("chain names server " + std::to_string(chain[i]) +
                                  (i == 0 ? " first, not its owner " + std::to_string(server)
                                          : " at position " + std::to_string(i)));
    }
  }
  return Status::OK();
}

// Drops `server` from a chain; the next replica becomes the owner. True if
// the chain held it.
template <typename Holder>
bool DropFromChain(Holder* h, int server) {
  auto* chain = h->mutable_chain();
  auto it = std::find(chain->begin(), chain->end(), server);
  if (it == chain->end()) return false;
  chain->erase(it);
  h->set_server(h->chain(0));
  return true;
}

// Appends `server` as tail of the chain of the holder with index `index` if
// its home chain names it and the chain lacks it. True if it joined.
template <typename Holder>
bool JoinChain(Holder* h, int index, int server, int num_servers, int replicas) {
  const std::vector<int> home = ShardMap::HomeChain(index, num_servers, replicas);
  if (std::find(home.begin(), home.end(), server) == home.end()) return false;
  if (std::find(h->chain().begin(), h->chain().end(), server) != h->chain().end()) return false;
  h->add_chain(server);
  return true;
}

}  // namespace

StatusOr<ShardMap> ShardMap::FromProto(const wire::ShardMap& proto) {
  ShardMap m;
  m.proto_ = proto;
  const int n = proto.servers_size();
  for (int t = 0; t < proto.tables_size(); ++t) {
    const wire::TableShards& ts = proto.tables(t);
    const std::string& name = ts.table().name();
    if (!m.table_index_.emplace(name, t).second) {
      return InvalidArgumentError("shard map lists table '" + name + "' twice");
    }
    if (ts.table().type() == static_cast<int>(TableType::kSparse)) {
      // Rows are hashed over the buckets (or the servers): there must be one.
      if (n == 0) {
        return InvalidArgumentError("shard map has sparse table '" + name + "' but no server");
      }
      for (int b = 0; b < ts.buckets_size(); ++b) {
        RETURN_IF_ERROR(CheckChain(ts.buckets(b).server(), ts.buckets(b).chain(), n)
                            .WithPrefix("shard map has a bad bucket " + std::to_string(b) +
                                        " for table '" + name + "'"));
      }
      if (!ts.ranges().empty()) {
        return InvalidArgumentError("shard map gives sparse table '" + name + "' dense ranges");
      }
      continue;
    }
    if (ts.table().type() != static_cast<int>(TableType::kDense)) {
      return InvalidArgumentError("shard map gives table '" + name + "' unknown type " +
                                  std::to_string(ts.table().type()));
    }
    uint64_t expect = 0;
    for (const wire::DenseRange& r : ts.ranges()) {
      if (r.begin() != expect || r.end() <= r.begin()) {
        return InvalidArgumentError("shard map has a bad range for table '" + name + "'");
      }
      RETURN_IF_ERROR(CheckChain(r.server(), r.chain(), n)
                          .WithPrefix("shard map has a bad range for table '" + name + "'"));
      expect = r.end();
    }
    if (expect != ts.table().size()) {
      return InvalidArgumentError("shard map does not cover table '" + name + "'");
    }
  }
  return m;
}

const wire::TableShards* ShardMap::FindTable(const std::string& name) const {
  auto it = table_index_.find(name);
  return it == table_index_.end() ? nullptr : &proto_.tables(it->second);
}

Status ShardMap::CheckDenseRange(const std::string& table, uint64_t offset,
                                 uint64_t count) const {
  const wire::TableShards* ts = FindTable(table);
  if (ts == nullptr) return NotFoundError("unknown table '" + table + "'");
  if (ts->table().type() != static_cast<int>(TableType::kDense)) {
    return InvalidArgumentError("table '" + table + "' is not dense");
  }
  const uint64_t size = ts->table().size();
  if (count == 0 || offset > size || count > size - offset) {
    // offset + count may wrap: name the end only when it does not.
    const std::string end = count <= UINT64_MAX - offset
                                ? std::to_string(offset + count)
                                : std::to_string(offset) + " + " + std::to_string(count);
    return InvalidArgumentError("range [" + std::to_string(offset) + ", " + end +
                                ") is outside table '" + table + "' of size " +
                                std::to_string(size));
  }
  return Status::OK();
}

StatusOr<std::vector<DenseSlice>> ShardMap::SplitDense(const std::string& table,
                                                       uint64_t offset, uint64_t count) const {
  RETURN_IF_ERROR(CheckDenseRange(table, offset, count));
  const wire::TableShards* ts = FindTable(table);
  const uint64_t end = offset + count;
  // Ranges are sorted: binary search the first that ends after `offset`.
  const auto& ranges = ts->ranges();
  auto it = std::upper_bound(ranges.begin(), ranges.end(), offset,
                             [](uint64_t k, const wire::DenseRange& r) { return k < r.end(); });
  std::vector<DenseSlice> out;
  for (; it != ranges.end() && it->begin() < end; ++it) {
    const uint64_t lo = std::max<uint64_t>(offset, it->begin());
    const uint64_t hi = std::min<uint64_t>(end, it->end());
    out.push_back(DenseSlice{it->server(), lo, hi - lo, lo - offset, it->begin(), it->end()});
  }
  return out;
}

int SparseOwner(uint64_t row_id, int num_servers) {
  uint64_t x = row_id + 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<int>(x % static_cast<uint64_t>(num_servers));
}

int ShardMap::NumBuckets(const wire::TableShards& ts) const {
  return ts.buckets_size() > 0 ? ts.buckets_size() : num_servers();
}

int ShardMap::SparseBucket(const wire::TableShards& ts, uint64_t row_id) const {
  return SparseOwner(row_id, NumBuckets(ts));
}

int ShardMap::BucketServer(const wire::TableShards& ts, int bucket) const {
  return ts.buckets_size() > 0 ? ts.buckets(bucket).server() : bucket;
}

std::vector<wire::SparseBucket> ShardMap::AssignBuckets(int num_buckets, int num_servers,
                                                        int replicas) {
  std::vector<wire::SparseBucket> out(std::max(1, num_buckets));
  for (int b = 0; b < static_cast<int>(out.size()); ++b) {
    out[b].set_server(b % std::max(1, num_servers));
    if (replicas > 1) {
      for (int c : HomeChain(b, num_servers, replicas)) out[b].add_chain(c);
    }
  }
  return out;
}

std::vector<int> ShardMap::HomeChain(int range, int num_servers, int replicas) {
  std::vector<int> chain;
  for (int k = 0; k < std::min(replicas, num_servers); ++k) chain.push_back((range + k) % num_servers);
  return chain;
}

StatusOr<int> RemoveFromChains(wire::ShardMap* map, int server, int replicas,
                               const std::set<int>& syncing) {
  if (replicas <= 1) return 0;
  // The chain (members) of `what` loses `server`: it must keep a replica
  // that holds the state.
  auto check = [&](const google::protobuf::RepeatedField<int32_t>& chain,
                   const std::string& what) -> Status {
    if (std::find(chain.begin(), chain.end(), server) == chain.end()) return Status::OK();
    std::string waiting;
    for (int c : chain) {
      if (c == server) continue;
      if (!syncing.count(c)) return Status::OK();
      waiting += (waiting.empty() ? "" : ", ") + std::to_string(c);
    }
    if (waiting.empty()) {
      return FailedPreconditionError("server " + std::to_string(server) +
                                     " holds the last replica of " + what);
    }
    return FailedPreconditionError("server " + std::to_string(server) +
                                   " holds the last replica with state of " + what +
                                   ": server(s) " + waiting +
                                   " joined its chain but had not received the state transfer");
  };
  for (const wire::TableShards& ts : map->tables()) {
    for (const wire::DenseRange& r : ts.ranges()) {
      RETURN_IF_ERROR(check(r.chain(), "keys [" + std::to_string(r.begin()) + ", " +
                                           std::to_string(r.end()) + ") of table '" +
                                           ts.table().name() + "'"));
    }
    for (int b = 0; b < ts.buckets_size(); ++b) {
      RETURN_IF_ERROR(check(ts.buckets(b).chain(), "bucket " + std::to_string(b) +
                                                       " of sparse table '" +
                                                       ts.table().name() + "'"));
    }
  }
  int changed = 0;
  for (wire::TableShards& ts : *map->mutable_tables()) {
    for (wire::DenseRange& r : *ts.mutable_ranges()) changed += DropFromChain(&r, server) ? 1 : 0;
    for (wire::SparseBucket& b : *ts.mutable_buckets()) changed += DropFromChain(&b, server) ? 1 : 0;
  }
  return changed;
}

int JoinChains(wire::ShardMap* map, int server, int num_servers, int replicas) {
  if (replicas <= 1) return 0;
  int joined = 0;
  for (wire::TableShards& ts : *map->mutable_tables()) {
    for (int i = 0; i < ts.ranges_size(); ++i) {
      joined += JoinChain(ts.mutable_ranges(i), i, server, num_servers, replicas) ? 1 : 0;
    }
    for (int b = 0; b < ts.buckets_size(); ++b) {
      joined += JoinChain(ts.mutable_buckets(b), b, server, num_servers, replicas) ? 1 : 0;
    }
  }
  return joined;
}

std::vector<wire::DenseRange> ShardMap::AssignDense(uint64_t size, int num_servers,
                                                    int replicas) {
  std::vector<wire::DenseRange> out;
  const uint64_t chunks = (size + kDenseChunk - 1) / kDenseChunk;
  const uint64_t n = std::max<uint64_t>(1, std::min<uint64_t>(num_servers, chunks));
  uint64_t begin = 0;
  for (uint64_t s = 0; s < n; ++s) {
    const uint64_t my_chunks = chunks / n + (s < chunks % n ? 1 : 0);
    const uint64_t end = std::min(size, begin + my_chunks * kDenseChunk);
    wire::DenseRange r;
    r.set_begin(begin);
    r.set_end(end);
    r.set_server(static_cast<int>(s));
    if (replicas > 1) {
      for (int c : HomeChain(static_cast<int>(s), num_servers, replicas)) r.add_chain(c);
    }
    out.push_back(r);
    begin = end;
  }
  return out;
}

void TableToProto(const TableOptions& t, wire::TableProto* out) {
  out->set_name(t.name);
  out->set_type(static_cast<int>(t.type));
  out->set_size(t.type == TableType::kDense ? t.size : 0);
  out->set_row_width(t.type == TableType::kSparse ? t.row_width : 0);
  wire::OptimizerProto* o = out->mutable_optimizer();
  o->set_name(t.optimizer.name);
  o->set_lr(t.optimizer.lr);
  o->set_momentum(t.optimizer.momentum);
  o->set_beta1(t.optimizer.beta1);
  o->set_beta2(t.optimizer.beta2);
  o->set_eps(t.optimizer.eps);
  out->set_init_seed(t.init.seed);
  out->clear_init();
  for (const InitSegment& s : t.init.segments) {
    wire::InitSegmentProto* p = out->add_init();
    p->set_begin(s.begin);
    p->set_end(s.end);
    p->set_kind(static_cast<int>(s.kind));
    p->set_a(s.a);
    p->set_b(s.b);
  }
  out->clear_lr_changes();
  for (const auto& [from_clock, lr] : t.lr_changes) {
    wire::LrChange* c = out->add_lr_changes();
    c->set_from_clock(from_clock);
    c->set_lr(lr);
  }
  if (t.lr_schedule.kind != LrSchedule::Kind::kConstant || t.lr_schedule.warmup_clocks > 0) {
    wire::LrScheduleProto* l = out->mutable_lr_schedule();
    l->set_kind(static_cast<int>(t.lr_schedule.kind));
    l->set_warmup_clocks(t.lr_schedule.warmup_clocks);
    l->set_step_every_clocks(t.lr_schedule.step_every_clocks);
    l->set_step_gamma(t.lr_schedule.step_gamma);
    l->set_decay_clocks(t.lr_schedule.decay_clocks);
    l->set_min_factor(t.lr_schedule.min_factor);
  }
}

TableOptions TableFromProto(const wire::TableProto& p) {
  TableOptions t;
  t.name = p.name();
  t.type = p.type() == 1 ? TableType::kSparse : TableType::kDense;
  t.size = p.size();
  t.row_width = p.row_width();
  t.optimizer.name = p.optimizer().name();
  t.optimizer.lr = p.optimizer().lr();
  t.optimizer.momentum = p.optimizer().momentum();
  t.optimizer.beta1 = p.optimizer().beta1();
  t.optimizer.beta2 = p.optimizer().beta2();
  t.optimizer.eps = p.optimizer().eps();
  t.init.seed = p.init_seed();
  for (const wire::InitSegmentProto& s : p.init()) {
    t.init.segments.push_back(
        InitSegment{s.begin(), s.end(), static_cast<InitKind>(s.kind()), s.a(), s.b()});
  }
  for (const wire::LrChange& c : p.lr_changes()) t.lr_changes.emplace_back(c.from_clock(), c.lr());
  if (p.has_lr_schedule()) {
    const wire::LrScheduleProto& l = p.lr_schedule();
    t.lr_schedule.kind = l.kind() == 1   ? LrSchedule::Kind::kStep
                         : l.kind() == 2 ? LrSchedule::Kind::kCosine
                                         : LrSchedule::Kind::kConstant;
    t.lr_schedule.warmup_clocks = l.warmup_clocks();
    t.lr_schedule.step_every_clocks = l.step_every_clocks();
    t.lr_schedule.step_gamma = l.step_gamma();
    t.lr_schedule.decay_clocks = l.decay_clocks();
    t.lr_schedule.min_factor = l.min_factor();
  }
  return t;
}

}  // namespace relaxps
