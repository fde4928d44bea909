// ServerImpl: the tables and ranges this server holds (server_impl.h).
//
// InstallMap creates the dense ranges, sparse tables (or, under chain
// replication, sparse buckets) a new shard map gives this server, within its
// byte quota, and updates learning rates; SetLiveWorkers hands the live
// worker set to every shard. Loop thread (and Init()).

#include <algorithm>

#include "kernels/staged_optimizer.h"
#include "server/internal/restored_ranges.h"
#include "server/internal/server_impl.h"

namespace relaxps {
namespace server_internal {

Status ServerImpl::InstallMap(const wire::ShardMap& map) {
  ASSIGN_OR_RETURN(ShardMap checked, ShardMap::FromProto(map));
  (void)checked;
  if (chain_ != nullptr) chain_->FenceIfPending();
  if (map_version_ > 0 && map.version() < map_version_) return Status::OK();  // Reordered.
  if (map_version_ > 0 && map.version() - map_version_ > kMaxVersionStep) {
    return InvalidArgumentError("shard map version " + std::to_string(map.version()) +
                                " jumps too far ahead of " + std::to_string(map_version_));
  }
  if (epoch_ > 0 && map.epoch() > epoch_ && map.epoch() - epoch_ > kMaxVersionStep) {
    return InvalidArgumentError("job epoch " + std::to_string(map.epoch()) +
                                " jumps too far ahead of " + std::to_string(epoch_));
  }
  RETURN_IF_ERROR(CheckByteQuota(map));
  // Tables of the map installed before this one.
  auto known_table = [this](const std::string& name) {
    for (const wire::TableShards& ts : map_.tables()) {
      if (ts.table().name() == name) return true;
    }
    return false;
  };
  for (const wire::TableShards& ts : map.tables()) {
    const TableOptions t = TableFromProto(ts.table());
    // Rates change after creation (SetLearningRate): every install updates them.
    if (auto it = sparse_.find(t.name); it != sparse_.end()) {
      it->second->set_rates(t);
      continue;
    }
    for (auto it = dense_.lower_bound({t.name, 0}); it != dense_.end() && it->first.first == t.name;
         ++it) {
      it->second.shard->set_rates(t);
    }
    if (chain_ != nullptr) chain_->SetBucketRates(t);
    ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> optimizer, NewRangeOptimizer(t));
    const int slots = 1 + optimizer->num_state_slots();
    if (t.type == TableType::kDense) {
      for (const wire::DenseRange& r : ts.ranges()) {
        const bool mine = ChainReplicates() ? std::find(r.chain().begin(), r.chain().end(), id_) !=
                                          r.chain().end()
                                    : r.server() == id_;
        if (!mine || dense_.count({t.name, r.begin()})) continue;
        RETURN_IF_ERROR(CreateDenseRange(t, r.begin(), r.end(), known_table(t.name)).status());
      }
    } else if (ChainReplicates()) {
      RETURN_IF_ERROR(chain_->CreateBuckets(t, ts, slots, known_table(t.name)));
    } else {
      SparseTableSpec spec;
      spec.table = t.name;
      spec.width = t.row_width;
      spec.num_slots = slots;
      spec.init = t.init;
      RETURN_IF_ERROR(store_->CreateSparse(spec));
      auto sparse = std::make_unique<SparseShardState>(
          spec, std::move(optimizer), policy_.get(), device_.get(), store_.get(), &buffer_pool_);
      sparse->SetLiveWorkers(
          std::vector<int>(live_workers_.ids().begin(), live_workers_.ids().end()),
          std::vector<int64_t>(live_workers_.clocks().begin(), live_workers_.clocks().end()));
      sparse->set_rates(t);
      sparse->set_on_rounds_applied([this, name = t.name](int64_t applied_clock) {
        if (AppliedLedger* ledger = applied_.FindSparseLedger(name); ledger != nullptr) {
          ledger->SettleBelow(applied_clock);
        }
      });
      sparse_[t.name] = std::move(sparse);
      LOG(INFO) << "table '" << t.name << "': sparse rows of width " << spec.width;
    }
  }
  map_ = map;
  map_version_ = map.version();
  if (ChainReplicates()) {
    epoch_ = std::max(epoch_, map.epoch());
    chain_->ApplyRoles(map);
  }
  link_->set_map_version(map_version_);
  if (mover_ != nullptr) mover_->OnMapInstalled(map_);
  return Status::OK();
}

StatusOr<std::unique_ptr<kernels::Optimizer>> ServerImpl::NewRangeOptimizer(
    const TableOptions& t) const {
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> o, kernels::NewOptimizer(t.optimizer));
  if (update_device_ != nullptr) o = kernels::NewStagedOptimizer(std::move(o), update_device_.get());
  return o;
}

std::string ServerImpl::DenseStoreName(const TableOptions& t, uint64_t begin, uint64_t end) const {
  // Under replication a server holds several ranges of a table: each is its
  // own store shard.
  if (ChainReplicates()) return t.name + "@" + std::to_string(begin);
  // Without it, the range of the job's first placement keeps the table's
  // name; any other (a range moved here or cut, docs/elastic.md) is named by
  // its keys, so that a checkpoint taken after a move restores by the map.
  const int servers = std::max(1, job_.num_servers());
  if (id_ < servers) {
    const std::vector<wire::DenseRange> home = ShardMap::AssignDense(t.size, servers);
    if (static_cast<size_t>(id_) < home.size() && home[id_].begin() == begin &&
        home[id_].end() == end) {
      return t.name;
    }
  }
  return t.name + "@" + std::to_string(begin) + "-" + std::to_string(end);
}

StatusOr<RangeState*> ServerImpl::CreateDenseRange(const TableOptions& t, uint64_t begin,
                                                   uint64_t end, bool known_table,
                                                   bool initialize) {
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> optimizer, NewRangeOptimizer(t));
  DenseShardSpec spec;
  spec.table = DenseStoreName(t, begin, end);
  spec.begin = begin;
  spec.end = end;
  spec.num_slots = 1 + optimizer->num_state_slots();
  spec.init = t.init;
  spec.initialize = initialize;
  const bool existed = store_->HasDense(spec.table);  // Restored, or taken back.
  // Replicas (chain, hybrid) and seeded servers legitimately hold ranges their
  // checkpoint lacks: a chain joined as tail or a spare's takeover gets its
  // state by transfer or from the workers, never from the checkpoint.
  const bool state_comes_from_elsewhere = ChainReplicates() || job_info_.awaits_seed;
  if (!existed && !registered_ && !options_.restore_from.empty() && !state_comes_from_elsewhere) {
    // The restored checkpoint holds this table under other ranges than the
    // map gives this server now: it was taken before a range move
    // (docs/elastic.md). The range is assembled from its store shards, or
    // refused (keys another server held then) rather than started from the
    // initializer.
    RETURN_IF_ERROR(AssembleRestoredRange(store_.get(), t.name, spec));
  }
  // Updates a --wal_per_update store logged as optimizer steps are replayed
  // through this range's optimizer as it loads.
  const kernels::Optimizer& replay_optimizer = *optimizer;
  ASSIGN_OR_RETURN(DenseShard * shard,
                   store_->CreateDenseReplaying(
                       spec, [&](DenseShard* s, const DenseStep& step) {
                         return ReplayStep(replay_optimizer, device_.get(), s, step);
                       }));
  if (!existed) held_bytes_ += DenseBytes(spec.end - spec.begin, spec.num_slots);
  RangeState range;
  range.table = t.name;
  range.key = begin;
  range.shard = std::make_unique<DenseShardState>(shard, std::move(optimizer), policy_.get(),
                                                  device_.get(), store_.get(), &buffer_pool_);
  range.shard->set_rates(t);
  // The pushes of rounds applied now are reflected: the exactly-once
  // record counts them from here on.
  range.shard->set_on_rounds_applied(
      [this, key = std::make_pair(t.name, begin)](int64_t applied_clock) {
        auto it = dense_.find(key);
        if (it != dense_.end()) it->second.ledger()->SettleBelow(applied_clock);
      });
  // A shard created after workers joined starts from the known live set.
  range.shard->SetLiveWorkers(
      std::vector<int>(live_workers_.ids().begin(), live_workers_.ids().end()),
      std::vector<int64_t>(live_workers_.clocks().begin(), live_workers_.clocks().end()));
  range.forwarded_applied_clock = range.shard->applied_clock();
  if (ChainReplicates()) {
    // A table that existed before this server registered, or before
    // this map (hybrid: joining a chain once it was seeded), is held by
    // the other replicas: its state comes as a snapshot from the
    // predecessor. Only a table new in this map starts from its
    // initializer.
    ChainReplication::MakeReplica(&range, registered_ && !known_table);
  }
  const bool awaiting = range.chain != nullptr && !range.chain->has_state();
  auto [it, inserted] = dense_.emplace(std::make_pair(t.name, begin), std::move(range));
  CHECK(inserted) << "range " << begin << " of '" << t.name << "' created twice";
  LOG(INFO) << "table '" << t.name << "': dense keys [" << begin << ", " << end << ") with "
            << t.optimizer.name << " (store shard '" << spec.table << "')"
            << (ChainReplicates() ? " (chain replica" + std::string(awaiting ? ", awaiting state)" : ")")
                                  : "");
  return &it->second;
}

Status ServerImpl::SetLiveWorkers(const wire::LiveWorkers& live) {
  if (live.version() < live_workers_.version()) return Status::OK();  // Stale (reordered).
  if (live_workers_.version() > 0 && live.version() - live_workers_.version() > kMaxVersionStep) {
    return InvalidArgumentError("live worker set version " + std::to_string(live.version()) +
                                " jumps too far ahead of " +
                                std::to_string(live_workers_.version()));
  }
  if (live.ids_size() != live.clocks_size()) {
    return InvalidArgumentError("live worker set with " + std::to_string(live.ids_size()) +
                                " ids and " + std::to_string(live.clocks_size()) + " clocks");
  }
  if (live.tokens_size() != 0 && live.tokens_size() != live.ids_size()) {
    return InvalidArgumentError("live worker set with " + std::to_string(live.ids_size()) +
                                " ids and " + std::to_string(live.tokens_size()) + " tokens");
  }
  // A fresh copy, not an assignment: a protobuf message keeps the capacity
  // of its largest set (cleared token strings included) otherwise, and a
  // burst of registrations that left again would stay in the heap.
  wire::LiveWorkers latest(live);
  live_workers_.Swap(&latest);
  if (live.tokens_size() > 0) UpdateWorkerTokens(live);
  std::vector<int> ids(live.ids().begin(), live.ids().end());
  std::vector<int64_t> clocks(live.clocks().begin(), live.clocks().end());
  if (hold_next_live_set_ && !ids.empty()) {
    hold_next_live_set_ = false;
    HoldWorkerClocks(ids);
  }
  for (auto& [key, range] : dense_) {
    range.shard->SetLiveWorkers(ids, clocks);
    if (range.chain != nullptr) chain_->MaybeForwardCompletion(&range);
  }
  for (auto& [name, table] : sparse_) table->SetLiveWorkers(ids, clocks);
  recovery_->OnLiveWorkers(ids);
  return Status::OK();
}

void ServerImpl::UpdateWorkerTokens(const wire::LiveWorkers& live) {
  std::map<int, WorkerToken> tokens;
  for (int i = 0; i < live.ids_size(); ++i) {
    WorkerToken& t = tokens[live.ids(i)];
    t.token = live.tokens(i);
    auto old = worker_tokens_.find(live.ids(i));
    t.used = old != worker_tokens_.end() && old->second.used && old->second.token == t.token;
  }
  for (auto& [id, t] : worker_tokens_) {
    if (t.used && !tokens.count(id)) tokens.emplace(id, std::move(t));
  }
  worker_tokens_.swap(tokens);
}

void ServerImpl::HoldWorkerClocks(const std::vector<int>& ids) {
  for (auto& [key, range] : dense_) range.shard->HoldWorkerClocks(ids);
  // A sparse table stores no clock: its rounds start at the restored
  // checkpoint's clock (lower is safe: the record skips what it reflects).
  const int64_t sparse_start = restored_from_.has_value() ? restored_from_->clock() : 0;
  for (auto& [name, table] : sparse_) table->HoldWorkerClocks(ids, sparse_start);
  held_workers_.insert(ids.begin(), ids.end());
  LOG(INFO) << "server " << id_ << ": holding the clocks of " << ids.size()
            << " worker(s) until their replay is done (BSP rounds re-formed from it)";
}

void ServerImpl::ReleaseWorkerClock(int worker) {
  if (held_workers_.erase(worker) == 0) return;
  for (auto& [key, range] : dense_) {
    range.shard->ReleaseWorkerClock(worker);
    if (range.chain != nullptr) chain_->MaybeForwardCompletion(&range);
  }
  for (auto& [name, table] : sparse_) table->ReleaseWorkerClock(worker);
  VLOG(1) << "server " << id_ << ": worker " << worker << " replayed; its clock is released";
}

uint64_t ServerImpl::DenseBytes(uint64_t keys, int slots) {
  return keys * sizeof(float) * static_cast<uint64_t>(slots);
}

Status ServerImpl::CheckByteQuota(const wire::ShardMap& map) const {
  if (options_.max_bytes == 0) return Status::OK();
  uint64_t added = 0;
  for (const wire::TableShards& ts : map.tables()) {
    const TableOptions t = TableFromProto(ts.table());
    if (t.type != TableType::kDense) continue;
    ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> optimizer,
                     kernels::NewOptimizer(t.optimizer));
    const int slots = 1 + optimizer->num_state_slots();
    for (const wire::DenseRange& r : ts.ranges()) {
      const bool mine = ChainReplicates() ? std::find(r.chain().begin(), r.chain().end(), id_) !=
                                        r.chain().end()
                                  : r.server() == id_;
      if (!mine || dense_.count({t.name, r.begin()}) || r.end() < r.begin()) continue;
      added += DenseBytes(r.end() - r.begin(), slots);
    }
  }
  if (held_bytes_ + added <= options_.max_bytes) return Status::OK();
  return FailedPreconditionError(
      "server " + std::to_string(id_) + " would hold " +
      std::to_string((held_bytes_ + added) >> 20) + " MiB of dense shards (" +
      std::to_string(added >> 20) + " MiB new), over its quota of " +
      std::to_string(options_.max_bytes >> 20) + " MiB (--max_server_mb)");
}

StatusOr<RangeState*> ServerImpl::CreateRange(const std::string& table, uint64_t begin,
                                              uint64_t end, bool initialize) {
  for (const wire::TableShards& ts : map_.tables()) {
    if (ts.table().name() != table) continue;
    const TableOptions t = TableFromProto(ts.table());
    if (t.type != TableType::kDense || begin >= end || end > t.size) break;
    ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> optimizer, NewRangeOptimizer(t));
    const uint64_t bytes = DenseBytes(end - begin, 1 + optimizer->num_state_slots());
    if (options_.max_bytes > 0 && held_bytes_ + bytes > options_.max_bytes) {
      return FailedPreconditionError(
          "server " + std::to_string(id_) + " would hold " +
          std::to_string((held_bytes_ + bytes) >> 20) + " MiB of dense shards, over its quota of " +
          std::to_string(options_.max_bytes >> 20) + " MiB (--max_server_mb)");
    }
    return CreateDenseRange(t, begin, end, /*known_table=*/true, initialize);
  }
  return InvalidArgumentError("no dense keys [" + std::to_string(begin) + ", " +
                              std::to_string(end) + ") of table '" + table +
                              "' in the installed map");
}

void ServerImpl::DropRange(const std::string& table, uint64_t begin) {
  auto it = dense_.find({table, begin});
  if (it == dense_.end()) return;
  if (it->second.shard != nullptr) dropped_updates_applied_ += it->second.shard->updates_applied();
  dense_.erase(it);
}

Status ServerImpl::ReshapeRange(RangeState* range, uint64_t end) {
  for (const wire::TableShards& ts : map_.tables()) {
    if (ts.table().name() != range->table) continue;
    const TableOptions t = TableFromProto(ts.table());
    if (end > t.size) break;
    return range->shard->Reshape(DenseStoreName(t, range->key, end), end);
  }
  return InvalidArgumentError("no dense keys [" + std::to_string(range->key) + ", " +
                              std::to_string(end) + ") of table '" + range->table +
                              "' in the installed map");
}

void ServerImpl::ReleaseRangeTail(RangeState* range, uint64_t old_end) {
  const DenseShardSpec& spec = range->shard->spec();
  if (old_end <= spec.end) return;
  range->shard->ReleaseTail();
  held_bytes_ -= std::min(held_bytes_, DenseBytes(old_end - spec.end, spec.num_slots));
}

RangeState* ServerImpl::FindRange(const std::string& table, uint64_t key) {
  auto it = dense_.upper_bound({table, key});
  if (it == dense_.begin()) return nullptr;
  --it;
  if (it->first.first != table || key >= it->second.shard->spec().end) return nullptr;
  return &it->second;
}

bool ServerImpl::MapHasTable(const std::string& table) const {
  for (const wire::TableShards& ts : map_.tables()) {
    if (ts.table().name() == table) return true;
  }
  return false;
}

bool ServerImpl::HasDenseTable(const std::string& table) const {
  auto it = dense_.lower_bound({table, 0});
  return it != dense_.end() && it->first.first == table;
}

}  // namespace server_internal
}  // namespace relaxps
