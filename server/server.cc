#include "server/server.h"

#include <unistd.h>

#include <algorithm>

#include "common/advertise.h"
#include "common/payload_codec.h"
#include "kernels/staged_optimizer.h"
#include "server/internal/request_codec.h"
#include "server/internal/server_checkpoints.h"
#include "server/internal/server_impl.h"

namespace relaxps {

std::string ServerOptions::CheckpointRoot() const {
  return checkpoint_dir.empty() ? server_internal::DefaultCheckpointRoot(store.data_dir)
                                : checkpoint_dir;
}

namespace server_internal {

Status ServerImpl::Init() {
  if (options_.coordinator.empty()) return InvalidArgumentError("--coordinator is required");
  if (options_.curve.enabled() && options_.server_id < 0) {
    return InvalidArgumentError("--security=curve needs --server_id (the id of the server's key)");
  }
  if (options_.coordinator_timeout_ms < 1) {
    return InvalidArgumentError("--coordinator_timeout_ms must be > 0");
  }
  if (options_.max_clocks_ahead < 0 || options_.max_queued_replies < 1) {
    return InvalidArgumentError("--max_clocks_ahead must be >= 0 and --max_queued_replies >= 1");
  }
  RpcServerOptions ro;
  ro.clock = clock_;
  ro.bind = options_.bind;
  ro.max_message_bytes = options_.max_message_bytes;
  ro.max_queued_messages = options_.max_queued_replies;
  ro.curve = options_.curve;
  ASSIGN_OR_RETURN(rpc_, RpcServer::Bind(ro));
  ASSIGN_OR_RETURN(advertised_, AdvertisedEndpoint(rpc_->endpoint(), options_.advertise));
  metrics_.AddLoopCollector(rpc_.get(), [this](metrics::MetricSink* s) { CollectMetrics(s); });
  // Shards live in host memory: host-side work (decoding, NaN checks, BSP
  // sums) runs on the CPU device; optimizer updates run on options_.device
  // (staged through its memory when that is a GPU).
  ASSIGN_OR_RETURN(device_, kernels::NewDevice(kernels::DeviceOptions()));
  if (options_.device.type != kernels::DeviceType::kCpu) {
    ASSIGN_OR_RETURN(update_device_, kernels::NewDevice(options_.device));
  }
  if (options_.keep_checkpoints < 1) return InvalidArgumentError("--keep_checkpoints must be >= 1");
  checkpoint_root_ = options_.CheckpointRoot();
  if (!options_.restore_from.empty()) {
    if (options_.store.ResolvedKind() != "rocksdb") {
      return InvalidArgumentError("--restore_from needs --store=rocksdb");
    }
    const int64_t restore_start_ms = clock_->NowMs();
    RETURN_IF_ERROR(server_internal::RestoreDataDir(options_.restore_from, checkpoint_root_,
                                                    options_.store.data_dir));
    metrics_.OnRestore((clock_->NowMs() - restore_start_ms) / 1000.0);
  }
  ParamStoreOptions store_options = options_.store;
  store_options.metrics = options_.metrics;
  ASSIGN_OR_RETURN(store_, NewParamStore(store_options));

  RpcClientOptions rpc_options;
  rpc_options.clock = clock_;
  rpc_options.max_message_bytes = options_.max_message_bytes;
  RETURN_IF_ERROR(rpc_options.UseCurve(options_.curve));
  coordinator_ = std::make_unique<RpcClient>(rpc_options);
  RETURN_IF_ERROR(coordinators_.Connect(coordinator_.get(), options_.coordinator));
  ASSIGN_OR_RETURN(wire::RegisterReply rr, Register(options_.server_id));
  id_ = rr.id();
  job_ = rr.job();
  coordinator_identity_ = rr.coordinator_identity();
  coordinator_term_ = rr.coordinator_term();
  // The coordinator sets replicas > 1 only for the policies that replicate
  // (chain, hybrid).
  replicas_ = std::max(1, job_.replicas());
  if (chained()) {
    RpcClientOptions po;
    po.default_timeout_ms = 5000;
    po.clock = clock_;
    po.max_message_bytes = options_.max_message_bytes;
    RETURN_IF_ERROR(po.UseCurve(options_.curve));
    peers_ = std::make_unique<RpcClient>(po);
  }
  ConsistencyOptions co;
  ASSIGN_OR_RETURN(co.model, ParseConsistencyModel(job_.consistency()));
  co.staleness = job_.staleness();
  ASSIGN_OR_RETURN(policy_, NewConsistencyPolicy(co));
  RETURN_IF_ERROR(InstallMap(rr.shard_map()));
  registered_ = true;
  awaiting_seed_ = rr.awaits_seed();
  if (awaiting_seed_) LOG(INFO) << "server " << id_ << " waits to be seeded from the workers";
  LOG(INFO) << "server " << id_ << " serving on " << advertised_ << " (store "
            << store_->Name() << ", consistency " << policy_->Name() << ")";
  last_heartbeat_ok_ms_ = clock_->NowMs();
  heartbeat_ = std::make_unique<PeriodicThread>(options_.heartbeat_ms, [this] { Heartbeat(); },
                                                clock_);
  rpc_->AddTimer(50, [this] { OnTimer(); });
  return Status::OK();
}

StatusOr<wire::RegisterReply> ServerImpl::Register(int requested_id) {
  Message req;
  req.header.set_type(wire::REGISTER);
  wire::RegisterRequest* r = req.header.mutable_register_request();
  r->set_role("server");
  r->set_requested_id(requested_id);
  r->set_endpoint(advertised_);
  r->set_pid(getpid());
  r->set_protocol_version(kProtocolVersion);
  const int64_t give_up = clock_->NowMs() + options_.register_timeout_ms;
  StatusOr<Message> reply = UnavailableError("not sent");
  while (true) {
    Message attempt;
    attempt.header = req.header;
    const int peer = coordinators_.current();
    reply = coordinator_->CallSync(peer, std::move(attempt), 1000);
    if (CoordinatorPeers::ShouldRotate(reply.status())) coordinators_.Rotate(peer);
    if (reply.ok() || clock_->NowMs() > give_up) break;
    if (reply.status().code() != StatusCode::kDeadlineExceeded &&
        reply.status().code() != StatusCode::kUnavailable) {
      break;
    }
  }
  if (!reply.ok()) {
    return reply.status().WithPrefix("registering with coordinator " + options_.coordinator);
  }
  return reply->header.register_reply();
}

Status ServerImpl::Run() {
  rpc_->Run([this](Request req) { Handle(std::move(req)); }, [this] { SyncAndRelease(); });
  SyncAndRelease();
  StopHeartbeat();
  if (fenced_.load()) {
    return AbortedError("server " + std::to_string(id_) +
                        " was declared dead by the coordinator and stopped (fenced)");
  }
  // Flush starts a background job; wait until it is on disk.
  Status s = store_->Flush(last_flush_clock_);
  if (s.ok()) s = store_->WaitForFlush();
  if (!s.ok()) LOG(ERROR) << "final flush failed: " << s;
  if (job_done_) {
    // Tell the coordinator this server left in order (bounded wait).
    Message bye;
    bye.header.set_type(wire::DEREGISTER);
    bye.header.set_sender(id_);
    bye.header.mutable_heartbeat()->set_role("server");
    bye.header.mutable_heartbeat()->set_id(id_);
    coordinator_->CallSync(coordinators_.current(), std::move(bye), 300).status().IgnoreError();
    LOG(INFO) << "server " << id_ << ": the job is over; flushed and exiting";
  }
  return exit_status_.ok() ? s : exit_status_;
}

void ServerImpl::Exit(const Status& why) {
  if (!why.ok()) LOG(ERROR) << "server " << id_ << " stops: " << why;
  if (exit_status_.ok()) exit_status_ = why;
  rpc_->Stop();
}

void ServerImpl::StopHeartbeat() {
  if (heartbeat_ != nullptr) heartbeat_->Stop();
}

void ServerImpl::Heartbeat() {
  Message hb;
  hb.header.set_type(wire::HEARTBEAT);
  hb.header.set_sender(id_);
  wire::HeartbeatRequest* h = hb.header.mutable_heartbeat();
  h->set_role("server");
  h->set_id(id_);
  // The version first: awaiting_state_ is updated before a new version is
  // published (InstallMap), so the pair never claims a new map's state early.
  h->set_shard_map_version(seen_map_version_.load());
  h->set_awaiting_state(awaiting_state_.load());
  const int peer = coordinators_.current();
  StatusOr<Message> reply =
      coordinator_->CallSync(peer, std::move(hb), options_.heartbeat_ms * 5);
  if (!reply.ok()) {
    if (CoordinatorPeers::ShouldRotate(reply.status())) coordinators_.Rotate(peer);
    if (reply.status().code() == StatusCode::kNotFound) {
      const std::string why = reply.status().message();
      if (chained()) {
        RejoinAfterFence(why);
        return;
      }
      // Declared dead (e.g. paused past the heartbeat timeout): its shards
      // may have moved on without it, so its state must not serve again.
      const std::string& mode = job_.recovery();
      if (mode == "stateless" ||
          (mode == "checkpoint" && options_.store.ResolvedKind() == "rocksdb")) {
        RestartInPlace restart{id_, mode == "checkpoint" &&
                                        ListShardCheckpoints(checkpoint_root_, id_)
                                                .checkpoints_size() > 0};
        const Status s = AbortedError(
            "server " + std::to_string(id_) + " was declared dead by the coordinator (" + why +
            "); restarting in place " +
            (mode == "stateless" ? std::string("to be re-seeded from the workers")
             : restart.restore_latest_checkpoint
                 ? "from its latest checkpoint under " + checkpoint_root_
                 : "from its data dir (it has no complete checkpoint)"));
        rpc_->Post([this, s, restart] {
          restart_ = restart;
          Exit(s);
        });
        return;
      }
      const Status s = AbortedError(
          "server " + std::to_string(id_) + " was declared dead by the coordinator (" + why +
          "); exiting: restart it with --server_id=" + std::to_string(id_) +
          (job_.recovery() == "checkpoint" ? " --restore_from=latest" : "") +
          " to rejoin (under --recovery=none the job has failed)");
      rpc_->Post([this, s] { Exit(s); });
      return;
    }
    const int64_t silent_ms = clock_->NowMs() - last_heartbeat_ok_ms_;
    if (silent_ms > options_.coordinator_timeout_ms) {
      const Status s = UnavailableError(
          "no answer from the coordinator " + options_.coordinator + " for " +
          std::to_string(silent_ms) + " ms (--coordinator_timeout_ms=" +
          std::to_string(options_.coordinator_timeout_ms) + "): " + reply.status().ToString());
      rpc_->Post([this, s] { Exit(s); });
      return;
    }
    if (++heartbeat_failures_ % 10 == 1) {
      LOG(WARNING) << "coordinator heartbeat failed: " << reply.status();
    }
    return;
  }
  heartbeat_failures_ = 0;
  last_heartbeat_ok_ms_ = clock_->NowMs();
  auto body = std::make_shared<wire::HeartbeatReply>(reply->header.heartbeat_reply());
  if (!body->job_error().empty()) {
    const Status s = AbortedError("the job failed: " + body->job_error());
    rpc_->Post([this, s] { Exit(s); });
    return;
  }
  rpc_->Post([this, body] {
    if (body->coordinator_term() > 0) {
      AdoptCoordinator(body->coordinator_identity(), body->coordinator_term());
    }
    if (body->job_done() && body->has_live_workers() && body->live_workers().ids_size() == 0) {
      job_done_ = true;
      Exit(Status::OK());
      return;
    }
    if (body->has_shard_map() && body->shard_map().version() > map_version_) {
      Status s = InstallMap(body->shard_map());
      if (!s.ok()) LOG(ERROR) << "installing shard map: " << s;
    }
    if (body->has_live_workers()) {
      Status s = SetLiveWorkers(body->live_workers());
      if (!s.ok()) LOG(ERROR) << "live worker set from the coordinator: " << s;
    }
  });
}

void ServerImpl::AdoptCoordinator(const std::string& identity, uint64_t term) {
  if (term < coordinator_term_ || identity.empty()) return;  // A deposed coordinator.
  if (identity != coordinator_identity_) {
    LOG(INFO) << "server " << id_ << " follows the coordinator of term " << term
              << " (was term " << coordinator_term_ << ")";
  }
  coordinator_identity_ = identity;
  coordinator_term_ = term;
}

Status ServerImpl::InstallMap(const wire::ShardMap& map) {
  ASSIGN_OR_RETURN(ShardMap checked, ShardMap::FromProto(map));
  (void)checked;
  if (chained() && fence_pending_.exchange(false)) Fence();
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
    for (auto it = buckets_.lower_bound({t.name, 0});
         it != buckets_.end() && it->first.first == t.name; ++it) {
      it->second.bucket->shard()->set_rates(t);
    }
    auto make_optimizer = [&]() -> StatusOr<std::unique_ptr<kernels::Optimizer>> {
      ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> o, kernels::NewOptimizer(t.optimizer));
      if (update_device_ != nullptr) o = kernels::NewStagedOptimizer(std::move(o), update_device_.get());
      return o;
    };
    ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> optimizer, make_optimizer());
    const int slots = 1 + optimizer->num_state_slots();
    if (t.type == TableType::kDense) {
      for (const wire::DenseRange& r : ts.ranges()) {
        const bool mine = chained() ? std::find(r.chain().begin(), r.chain().end(), id_) !=
                                          r.chain().end()
                                    : r.server() == id_;
        if (!mine || dense_.count({t.name, r.begin()})) continue;
        DenseShardSpec spec;
        // Under replication a server holds several ranges of a table: each
        // is its own store shard.
        spec.table = chained() ? t.name + "@" + std::to_string(r.begin()) : t.name;
        spec.begin = r.begin();
        spec.end = r.end();
        spec.num_slots = slots;
        spec.init = t.init;
        ASSIGN_OR_RETURN(DenseShard * shard, store_->CreateDense(spec));
        held_bytes_ += DenseBytes(spec.end - spec.begin, slots);
        ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> range_optimizer, make_optimizer());
        RangeState range;
        range.table = t.name;
        range.key = r.begin();
        range.shard = std::make_unique<DenseShardState>(shard, std::move(range_optimizer),
                                                        policy_.get(), device_.get(),
                                                        store_.get(), &buffer_pool_);
        range.shard->set_rates(t);
        // A shard created after workers joined starts from the known live set.
        range.shard->SetLiveWorkers(
            std::vector<int>(live_workers_.ids().begin(), live_workers_.ids().end()),
            std::vector<int64_t>(live_workers_.clocks().begin(), live_workers_.clocks().end()));
        range.forwarded_applied_clock = range.shard->applied_clock();
        if (chained()) {
          range.chain = std::make_unique<ChainReplica>();
          // A table that existed before this server registered, or before
          // this map (hybrid: joining a chain once it was seeded), is held by
          // the other replicas: its state comes as a snapshot from the
          // predecessor. Only a table new in this map starts from its
          // initializer.
          range.chain->set_has_state(registered_ && !known_table(t.name));
          range.shard->SetFollower(true);
        }
        const bool awaiting = range.chain != nullptr && !range.chain->has_state();
        dense_.emplace(std::make_pair(t.name, r.begin()), std::move(range));
        LOG(INFO) << "table '" << t.name << "': dense keys [" << spec.begin << ", " << spec.end
                  << ") with " << t.optimizer.name
                  << (chained() ? " (chain replica" + std::string(awaiting ? ", awaiting state)" : ")")
                                : "");
      }
    } else if (chained()) {
      RETURN_IF_ERROR(CreateBuckets(t, ts, slots, known_table(t.name)));
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
      sparse_[t.name] = std::move(sparse);
      LOG(INFO) << "table '" << t.name << "': sparse rows of width " << spec.width;
    }
  }
  map_ = map;
  map_version_ = map.version();
  if (chained()) {
    epoch_ = std::max(epoch_, map.epoch());
    ApplyChainRoles(map);
    UpdateAwaitingState();
  }
  seen_map_version_.store(map_version_);
  return Status::OK();
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
  live_workers_ = live;
  std::vector<int> ids(live.ids().begin(), live.ids().end());
  std::vector<int64_t> clocks(live.clocks().begin(), live.clocks().end());
  for (auto& [key, range] : dense_) {
    range.shard->SetLiveWorkers(ids, clocks);
    if (range.chain != nullptr) MaybeForwardCompletion(&range);
  }
  for (auto& [name, table] : sparse_) table->SetLiveWorkers(ids, clocks);
  return Status::OK();
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
      const bool mine = chained() ? std::find(r.chain().begin(), r.chain().end(), id_) !=
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

Status ServerImpl::CheckClockAhead(const DenseShardState& shard, int64_t clock) const {
  if (!policy_->AggregatesPushes() && policy_->staleness_bound() < 0) return Status::OK();
  const int64_t window = std::max(0, policy_->staleness_bound()) + options_.max_clocks_ahead;
  // What the shard has seen of its workers: a legitimate worker is never
  // further ahead than the staleness bound (plus pushes without pulls).
  const int64_t base = std::max(shard.visible_clock(), shard.min_worker_clock());
  if (clock <= base + window) return Status::OK();
  return FailedPreconditionError("clock " + std::to_string(clock) + " is more than " +
                                 std::to_string(window) + " clocks ahead of shard '" +
                                 shard.spec().table + "' (at clock " + std::to_string(base) +
                                 "; staleness + --max_clocks_ahead)");
}

Status ServerImpl::CheckRole(const Request& req) const {
  const std::string& u = req.user_id;
  if (u.empty()) return Status::OK();  // Plain TCP.
  const wire::Header& h = req.msg.header;
  bool ok = true;
  if (h.forwarded() || h.type() == wire::CHAIN_SNAPSHOT || h.type() == wire::CHAIN_COMPLETE) {
    ok = RoleAllows(u, "server");
  } else {
    switch (h.type()) {
      case wire::PULL:
      case wire::PULL_ROWS:
        ok = h.sender() < 0 ? RoleAllows(u, "observer") : RoleAllows(u, "worker", h.sender());
        break;
      case wire::PUSH:
      case wire::PUSH_PULL:
      case wire::PUSH_ROWS:
      case wire::CLOCK:
        ok = RoleAllows(u, "worker", h.sender());
        break;
      default:
        break;  // Control messages: CheckFromCoordinator; stats and probes: any key.
    }
  }
  if (ok) return Status::OK();
  return PermissionDeniedError("key '" + u + "' may not send " + wire::MsgType_Name(h.type()) +
                               " as worker " + std::to_string(h.sender()));
}

Status ServerImpl::CheckFromCoordinator(const Request& req) const {
  if (!req.user_id.empty() && !RoleAllows(req.user_id, "coordinator")) {
    return PermissionDeniedError(wire::MsgType_Name(req.msg.header.type()) +
                                 " is accepted only from the coordinator's key, not '" +
                                 req.user_id + "'");
  }
  if (!coordinator_identity_.empty() && req.identity == coordinator_identity_) return Status::OK();
  return PermissionDeniedError(wire::MsgType_Name(req.msg.header.type()) +
                               " is accepted only from the coordinator's connection");
}

RangeState* ServerImpl::FindRange(const std::string& table, uint64_t key) {
  auto it = dense_.upper_bound({table, key});
  if (it == dense_.begin()) return nullptr;
  --it;
  if (it->first.first != table || key >= it->second.shard->spec().end) return nullptr;
  return &it->second;
}

bool ServerImpl::HasDenseTable(const std::string& table) const {
  auto it = dense_.lower_bound({table, 0});
  return it != dense_.end() && it->first.first == table;
}

void ServerImpl::OnTimer() {
  const int64_t now = clock_->NowMs();
  for (auto& [key, range] : dense_) range.shard->ExpireWaiters(now);
  for (auto& [name, table] : sparse_) table->ExpireWaiters(now);
  if (chained()) ResendStale();
  MaybeFlush();
}

void ServerImpl::MaybeFlush() {
  if (options_.FlushEveryClocks() > 0) {
    int64_t clock = 0;
    for (auto& [key, range] : dense_) clock = std::max(clock, range.shard->visible_clock());
    if (clock >= last_flush_clock_ + options_.FlushEveryClocks()) {
      Status s = store_->Flush(clock);
      if (!s.ok()) {
        LOG(ERROR) << "flush at clock " << clock << " failed: " << s;
      } else {
        last_flush_clock_ = clock;
      }
    }
  }
}

void ServerImpl::Reject(const Request& req, const Status& status) {
  stats_.set_rejected(stats_.rejected() + 1);
  metrics_.OnReject(req, status);
  if (status.code() == StatusCode::kPermissionDenied ||
      status.code() == StatusCode::kFailedPrecondition) {
    stats_.set_quota_rejected(stats_.quota_rejected() + 1);
  }
  uint64_t more = 0;
  const std::string type = wire::MsgType_Name(req.msg.header.type());
  if (rpc_->log_limiter()->Allow(type + "/" + StatusCodeName(status.code()), &more)) {
    LOG(WARNING) << "rejected " << (type.empty() ? "a message" : type) << " from worker "
                 << req.msg.header.sender() << ": " << status << " (" << more
                 << " more like it since the last such line)";
  }
  Message reply = MakeReply(req.msg.header, status);
  const uint64_t sender_version = req.msg.header.shard_map_version();
  const bool routing_error =
      status.code() == StatusCode::kWrongShard || status.code() == StatusCode::kNotFound;
  if (routing_error && sender_version != 0 && (sender_version < map_version_ || chained())) {
    // The sender routes with an old map (a key range or table this server
    // does not hold, or under chain replication a range it does not head):
    // send ours along ("moved"); the client installs it.
    *reply.header.mutable_shard_map() = map_;
  }
  rpc_->Send(req.identity, std::move(reply)).IgnoreError();
}

bool ServerImpl::CheckFrameCount(const Request& req, size_t expected) {
  if (req.msg.frames.size() == expected) return true;
  Reject(req, InvalidArgumentError(wire::MsgType_Name(req.msg.header.type()) + " expects " +
                                   std::to_string(expected) + " payload frame(s), got " +
                                   std::to_string(req.msg.frames.size())));
  return false;
}

const float* ServerImpl::DecodeGradient(const Request& req, const Frame& frame, size_t n,
                                        bool check_finite) {
  StatusOr<const float*> values = DecodeFloats(frame, n, req.msg.header.encoding(),
                                               &decode_scratch_);
  if (!values.ok()) {
    Reject(req, values.status());
    return nullptr;
  }
  if (check_finite && !device_->AllFinite(*values, n)) {
    stats_.set_nonfinite_rejected(stats_.nonfinite_rejected() + 1);
    Reject(req, InvalidArgumentError("gradient contains non-finite values (NaN or Inf)"));
    return nullptr;
  }
  return *values;
}

void ServerImpl::ReplyWith(const Request& req, Message reply) {
  stats_.set_bytes_out(stats_.bytes_out() + reply.PayloadBytes());
  metrics_.OnReply(req);
  reply.header.set_shard_map_version(map_version_);
  reply.header.set_epoch(epoch_);
  if (!unsynced_replies_.empty() || store_->HasUnsyncedUpdates()) {
    RpcServer::FillReplyHeader(req, &reply);
    unsynced_replies_.emplace_back(req.identity, std::move(reply));
    return;
  }
  Status s = rpc_->Reply(req, std::move(reply));
  if (!s.ok()) {
    // The peer does not read its replies (or is gone): bounded by
    // max_queued_replies instead of memory.
    stats_.set_replies_dropped(stats_.replies_dropped() + 1);
    VLOG(1) << "reply dropped: " << s;
  }
}

void ServerImpl::SyncAndRelease() {
  if (unsynced_replies_.empty() && !store_->HasUnsyncedUpdates()) return;
  const Status synced = store_->SyncWal();
  if (!synced.ok()) LOG(ERROR) << "WAL sync failed; failing the replies it covered: " << synced;
  std::vector<std::pair<std::string, Message>> replies;
  replies.swap(unsynced_replies_);
  for (auto& [identity, reply] : replies) {
    if (!synced.ok()) {
      reply.frames.clear();
      StatusToProto(synced.WithPrefix("not durable"), reply.header.mutable_status());
    }
    Status s = rpc_->Send(identity, std::move(reply));
    if (!s.ok()) VLOG(1) << "reply dropped: " << s;
  }
}

void ServerImpl::Handle(Request req) {
  const wire::Header& h = req.msg.header;
  stats_.set_requests(stats_.requests() + 1);
  stats_.set_bytes_in(stats_.bytes_in() + req.msg.PayloadBytes());
  metrics_.OnRequest(req);
  if (h.is_reply()) {
    Reject(req, InvalidArgumentError("unexpected reply message"));
    return;
  }
  if (Status s = CheckRole(req); !s.ok()) {
    Reject(req, s);
    return;
  }
  if (h.forwarded() || h.type() == wire::CHAIN_SNAPSHOT || h.type() == wire::CHAIN_COMPLETE) {
    if (!chained()) {
      Reject(req, FailedPreconditionError("chain message to a server without replication"));
      return;
    }
    HandleForwarded(std::move(req));
    return;
  }
  switch (h.type()) {
    case wire::PUSH:
    case wire::PULL:
    case wire::PUSH_PULL:
    case wire::PUSH_ROWS:
    case wire::PULL_ROWS:
    case wire::CLOCK:
      if (awaiting_seed_) {
        Reject(req, UnavailableError("server " + std::to_string(id_) +
                                     " is waiting to be seeded from the workers"));
        return;
      }
      if (h.type() == wire::PUSH_ROWS || h.type() == wire::PULL_ROWS) {
        HandleSparse(std::move(req));
      } else if (h.type() != wire::CLOCK) {
        HandleDense(std::move(req));
      } else {
        Status s = server_internal::CheckClock(h.clock());
        for (auto it = dense_.begin(); s.ok() && it != dense_.end(); ++it) {
          s = CheckClockAhead(*it->second.shard, h.clock());
        }
        if (!s.ok()) {
          Reject(req, s);
          return;
        }
        HandleClock(req);
      }
      return;
    case wire::SEED:
    case wire::INSTALL_MAP:
    case wire::WORKER_SET:
    case wire::CHECKPOINT:
      if (Status s = CheckFromCoordinator(req); !s.ok()) {
        Reject(req, s);
        return;
      }
      break;
    default:
      break;
  }
  switch (h.type()) {
    case wire::SEED:
      HandleSeed(req);
      return;
    case wire::INSTALL_MAP:
    case wire::WORKER_SET: {
      Status s = h.type() == wire::WORKER_SET
                     ? SetLiveWorkers(h.live_workers())
                 : h.has_shard_map() ? InstallMap(h.shard_map())
                                     : InvalidArgumentError("INSTALL_MAP without a shard map");
      if (!s.ok()) {
        Reject(req, s);
      } else {
        ReplyWith(req, MakeReply(h, Status::OK()));
      }
      return;
    }
    case wire::PING:
      ReplyWith(req, MakeReply(h, Status::OK()));
      return;
    case wire::SERVER_STATS:
      HandleStats(req);
      return;
    case wire::CHECKPOINT:
      HandleCheckpoint(std::move(req));
      return;
    case wire::LIST_CHECKPOINTS: {
      Message reply = MakeReply(h, Status::OK());
      *reply.header.mutable_checkpoint_list() =
          server_internal::ListShardCheckpoints(checkpoint_root_, id_);
      ReplyWith(req, std::move(reply));
      return;
    }
    default:
      Reject(req, InvalidArgumentError("unknown message type " + std::to_string(h.type())));
  }
}

void ServerImpl::HandleClock(const Request& req) {
  const wire::Header& h = req.msg.header;
  for (auto& [key, range] : dense_) {
    if (range.chain == nullptr) {
      range.shard->AdvanceClock(h.sender(), h.clock());
      continue;
    }
    // Replicated like a push: only the head takes it from a worker.
    if (!range.chain->head() || !range.chain->has_state()) continue;
    range.shard->AdvanceClock(h.sender(), h.clock());
    Message op;
    op.header = h;
    op.header.set_table(key.first);
    op.header.set_key_begin(key.second);
    ForwardNew(&range, &op);
    MaybeForwardCompletion(&range);
  }
  for (auto& [name, table] : sparse_) table->AdvanceClock(h.sender(), h.clock());
  ReplyWith(req, MakeReply(h, Status::OK()));
  MaybeFlush();
}

void ServerImpl::HandleStats(const Request& req) {
  Message reply = MakeReply(req.msg.header, Status::OK());
  uint64_t applied = 0;
  for (auto& [k, r] : dense_) applied += r.shard->updates_applied();
  for (auto& [n, s] : sparse_) applied += s->updates_applied();
  for (auto& [k, b] : buckets_) applied += b.bucket->shard()->updates_applied();
  stats_.set_updates_applied(applied);
  *reply.header.mutable_server_stats() = stats_;
  ReplyWith(req, std::move(reply));
}

void ServerImpl::HandleSeed(const Request& req) {
  const wire::Header& h = req.msg.header;
  if (!h.has_seed_data()) {
    Reject(req, InvalidArgumentError("SEED without seed_data"));
    return;
  }
  const wire::SeedData& seed = h.seed_data();
  size_t frames = 0;
  for (const wire::SeedRange& r : seed.ranges()) frames += r.has_copy() ? 1 : 0;
  const size_t row_frames = frames;  // Sparse rows' frames follow the ranges'.
  for (const wire::SeedRows& r : seed.rows()) frames += r.count() > 0 ? 2 : 0;
  if (!CheckFrameCount(req, frames)) return;
  // Rows: the merged changes of the workers, on top of this server's rows.
  std::vector<std::pair<SparseShardState*, const wire::SeedRows*>> rows;
  for (size_t k = 0, f = row_frames; k < static_cast<size_t>(seed.rows_size()); ++k) {
    const wire::SeedRows& r = seed.rows(k);
    if (chained()) {  // Hybrid: rows of stranded buckets.
      const bool frames_here = r.count() > 0;
      Status s = SeedBuckets(r, frames_here ? &req.msg.frames[f] : nullptr,
                             frames_here ? &req.msg.frames[f + 1] : nullptr, /*apply=*/false);
      if (!s.ok()) {
        Reject(req, s);
        return;
      }
      f += frames_here ? 2 : 0;
      continue;
    }
    if (r.count() == 0) continue;
    auto it = sparse_.find(r.table());
    if (it == sparse_.end() || req.msg.frames[f].size() != r.count() * sizeof(uint64_t) ||
        req.msg.frames[f + 1].size() != r.count() * it->second->width() * sizeof(float)) {
      Reject(req, InvalidArgumentError("seed rows of '" + r.table() + "' match no sparse table "
                                       "here or have frames of the wrong size"));
      return;
    }
    rows.emplace_back(it->second.get(), &r);
    f += 2;
  }
  // Check every range before changing anything.
  std::vector<std::pair<DenseShardState*, const Frame*>> todo;
  size_t f = 0;
  for (const wire::SeedRange& r : seed.ranges()) {
    auto it = dense_.find({r.table(), r.begin()});
    if (it == dense_.end() || it->second.shard->spec().end != r.end()) {
      Reject(req, InvalidArgumentError("seed for '" + r.table() + "' [" +
                                       std::to_string(r.begin()) + ", " +
                                       std::to_string(r.end()) + ") matches no shard here"));
      return;
    }
    if (!r.has_copy()) continue;  // No worker held it: keep the initializer's values.
    const Frame& frame = req.msg.frames[f++];
    if (frame.size() != (r.end() - r.begin()) * sizeof(float)) {
      Reject(req, InvalidArgumentError("seed frame of " + std::to_string(frame.size()) +
                                       " bytes for " + std::to_string(r.end() - r.begin()) +
                                       " floats"));
      return;
    }
    todo.emplace_back(it->second.shard.get(), &frame);
  }
  size_t i = 0;
  std::vector<float> scratch;  // For a frame that is not float-aligned.
  for (const wire::SeedRange& r : seed.ranges()) {
    // Hybrid: the seeded range heads its chain from here on (a range no
    // worker held keeps what the store loaded: a restored checkpoint, the
    // last flush, or the initializer).
    RangeState& state = dense_.at({r.table(), r.begin()});
    if (state.chain != nullptr) state.chain->set_has_state(true);
    if (!r.has_copy()) {
      LOG(INFO) << "'" << r.table() << "' [" << r.begin() << ", " << r.end()
                << "): no worker copy; keeping the values loaded at start"
                << (options_.restore_from.empty() ? "" : " (restored checkpoint)");
      continue;
    }
    auto [shard, frame] = todo[i++];
    StatusOr<const float*> values =
        DecodeFloats(*frame, r.end() - r.begin(), wire::ENC_FP32, &scratch);
    // Hybrid: no worker held a real copy, only changes made on the
    // initializer's values; they go on top of what this server loaded.
    Status s = !values.ok()      ? values.status()
               : r.change_only() ? shard->AddDelta(r.begin(), *values, r.end() - r.begin())
                                 : shard->Seed(*values, r.end() - r.begin(), r.clock());
    if (!s.ok()) {
      Reject(req, s);
      return;
    }
    LOG(INFO) << "seeded '" << r.table() << "' [" << r.begin() << ", " << r.end() << ") "
              << (r.change_only() ? "with the workers' merged changes on top of the values "
                                    "loaded at start"
                                  : "at clock " + std::to_string(r.clock()));
  }
  for (size_t k = 0, f = row_frames; chained() && k < static_cast<size_t>(seed.rows_size()); ++k) {
    const wire::SeedRows& r = seed.rows(k);
    const bool frames_here = r.count() > 0;
    Status s = SeedBuckets(r, frames_here ? &req.msg.frames[f] : nullptr,
                           frames_here ? &req.msg.frames[f + 1] : nullptr, /*apply=*/true);
    if (!s.ok()) {
      Reject(req, s);
      return;
    }
    f += frames_here ? 2 : 0;
  }
  for (size_t k = 0, f = row_frames; k < rows.size(); ++k, f += 2) {
    auto [shard, r] = rows[k];
    StatusOr<const uint64_t*> ids =
        server_internal::DecodeRowIds(req.msg.frames[f], r->count(), &ids_scratch_);
    StatusOr<const float*> delta = DecodeFloats(req.msg.frames[f + 1], r->count() * shard->width(),
                                                wire::ENC_FP32, &scratch);
    Status s = !ids.ok() ? ids.status() : !delta.ok() ? delta.status()
                                                      : shard->AddDelta(*ids, r->count(), *delta);
    if (!s.ok()) {
      Reject(req, s);
      return;
    }
    LOG(INFO) << "seeded " << r->count() << " row(s) of '" << r->table()
              << "' with the workers' merged changes on top of "
              << (options_.restore_from.empty() ? "the rows it holds (the initializer's)"
                                                : "the restored checkpoint");
  }
  awaiting_seed_ = false;
  ReplyWith(req, MakeReply(h, Status::OK()));
}

void ServerImpl::HandleCheckpoint(Request req) {
  const wire::Header& h = req.msg.header;
  if (!h.has_checkpoint_request()) {
    Reject(req, InvalidArgumentError("CHECKPOINT without checkpoint_request"));
    return;
  }
  const int64_t clock = h.checkpoint_request().clock();
  if (clock < 0) {
    Reject(req, InvalidArgumentError("CHECKPOINT at negative clock " + std::to_string(clock)));
    return;
  }
  // The checkpoint's flush covers what has been applied so far.
  int64_t flushed_clock = last_flush_clock_;
  for (auto& [key, range] : dense_) {
    flushed_clock = std::max(flushed_clock, range.shard->visible_clock());
  }
  // Written in the background; the reply waits for it on this loop.
  auto shared_req = std::make_shared<Request>(std::move(req));
  server_internal::WriteCheckpointAsync(
      store_.get(), checkpoint_root_, clock, options_.keep_checkpoints, id_,
      [this, shared_req, clock, flushed_clock](StatusOr<wire::ShardCheckpoint> done) {
        rpc_->Post([this, shared_req, clock, flushed_clock, done = std::move(done)] {
          const wire::Header& h = shared_req->msg.header;
          if (!done.ok()) {
            LOG(ERROR) << "checkpoint at clock " << clock << " failed: " << done.status();
            Reject(*shared_req, done.status());
            return;
          }
          last_flush_clock_ = std::max(last_flush_clock_, flushed_clock);
          Message reply = MakeReply(h, Status::OK());
          *reply.header.mutable_shard_checkpoint() = *done;
          ReplyWith(*shared_req, std::move(reply));
        });
      });
}

void ServerImpl::HandleDense(Request req) {
  const wire::Header& h = req.msg.header;
  RangeState* range = FindRange(h.table(), h.key_begin());
  if (range == nullptr) {
    Reject(req, sparse_.count(h.table())
                    ? InvalidArgumentError("table '" + h.table() + "' is sparse")
                : HasDenseTable(h.table())
                    ? WrongShardError("keys from " + std::to_string(h.key_begin()) + " of table '" +
                                      h.table() + "' are not in this shard")
                    : NotFoundError("unknown dense table '" + h.table() + "'"));
    return;
  }
  DenseShardState* shard = range->shard.get();
  const uint64_t n = h.key_count();
  Status s = server_internal::CheckClock(h.clock());
  if (s.ok()) s = shard->CheckRange(h.key_begin(), n);
  if (s.ok() && h.type() != wire::PULL) s = CheckClockAhead(*shard, h.clock());
  if (!s.ok()) {
    Reject(req, s);
    return;
  }
  const bool push = h.type() != wire::PULL;
  if (h.slot() != 0 && (h.type() != wire::PULL || h.slot() < 0 ||
                        h.slot() >= static_cast<int>(shard->num_slots()))) {
    Reject(req, InvalidArgumentError("slot " + std::to_string(h.slot()) + " of table '" +
                                     h.table() + "' cannot be read (PULL only; the table has " +
                                     std::to_string(shard->num_slots()) + " slots)"));
    return;
  }
  if (!CheckFrameCount(req, push ? 1 : 0)) return;
  // Inspection: a state slot, or on a chain replica a pull by no worker
  // (sender -1: relaxps-ctl, tests comparing replicas) reads this replica's
  // copy at once, without the gate.
  if (h.slot() != 0 || (range->chain != nullptr && h.type() == wire::PULL && h.sender() < 0)) {
    if (range->chain != nullptr && !range->chain->has_state()) {
      Reject(req, UnavailableError("server " + std::to_string(id_) + " is awaiting state"));
      return;
    }
    Message reply = MakeReply(h, Status::OK());
    reply.header.set_params_clock(shard->visible_clock());
    reply.header.set_encoding(h.encoding());
    reply.frames.push_back(EncodeFloats(shard->CopySlot(h.slot(), h.key_begin(), n), h.encoding()));
    ReplyWith(req, std::move(reply));
    return;
  }
  if (range->chain != nullptr) {
    HandleChainDense(range, std::move(req));
    return;
  }
  // A stateless worker's resend of a push it gave up on (exactly once).
  const bool seen = push && h.push_id() > 0 &&
                    pushes_seen_.Applied(h.sender(), h.incarnation(), h.push_id());
  if (seen) stats_.set_duplicates_skipped(stats_.duplicates_skipped() + 1);
  if (push && !seen) {
    const float* grads = DecodeGradient(req, req.msg.frames[0], n);
    if (grads == nullptr) return;
    s = h.raw_delta() && h.type() == wire::PUSH
            ? shard->AddDelta(h.key_begin(), grads, n)
            : shard->Push(h.sender(), h.clock(), h.key_begin(), grads, n);
    if (!s.ok()) {
      Reject(req, s);
      return;
    }
    if (h.push_id() > 0) pushes_seen_.Record(h.sender(), h.incarnation(), h.push_id());
  }
  if (push) {
    if (h.type() == wire::PUSH) {
      ReplyWith(req, MakeReply(h, Status::OK()));
      MaybeFlush();
      return;
    }
  }
  ServePull(range, std::make_shared<Request>(std::move(req)));
  if (push) MaybeFlush();
}

int64_t ServerImpl::PullDeadlineMs(const wire::Header& h) const {
  // A hostile deadline near INT64_MAX must not overflow the sum: a pull
  // waits at most a day.
  constexpr int64_t kMaxPullWaitMs = 24 * 3600 * 1000;
  const int64_t wait_ms =
      h.deadline_unix_ms() > 0
          ? std::clamp<int64_t>(h.deadline_unix_ms() - clock_->NowUnixMs(), 0, kMaxPullWaitMs)
          : 60000;
  return clock_->NowMs() + wait_ms;
}

void ServerImpl::ServePull(RangeState* range, std::shared_ptr<Request> req) {
  const wire::Header& h = req->msg.header;
  // A push at clock c is followed by computation at clock c + 1.
  const int64_t pull_clock = h.type() == wire::PUSH_PULL ? h.clock() + 1 : h.clock();
  const int64_t deadline = PullDeadlineMs(h);
  ChainReplica* chain = range->chain.get();
  // Set once Pull() returned: a reply after that waited at the gate.
  auto parked = metrics_.enabled() ? std::make_shared<bool>(false) : nullptr;
  range->shard->Pull(
      pull_clock, h.key_begin(), h.key_count(), deadline,
      [this, req, chain, parked](const Status& st, FloatBuffer params, int64_t params_clock) {
        if (parked != nullptr && *parked) metrics_.OnGateWait(*req);
        if (!st.ok()) {
          Reject(*req, st);
          return;
        }
        auto reply = std::make_shared<Message>(MakeReply(req->msg.header, Status::OK()));
        reply->header.set_params_clock(params_clock);
        reply->header.set_encoding(req->msg.header.encoding());
        reply->frames.push_back(EncodeFloats(params, req->msg.header.encoding()));
        if (chain == nullptr) {
          ReplyWith(*req, std::move(*reply));
          return;
        }
        // Everything these parameters reflect must survive a failover.
        chain->WhenAcked(chain->applied_seq(),
                         [this, req, reply] { ReplyWith(*req, std::move(*reply)); });
      });
  if (parked != nullptr) *parked = true;
}

void ServerImpl::HandleSparse(Request req) {
  if (chained()) {
    HandleChainSparse(std::move(req));
    return;
  }
  const wire::Header& h = req.msg.header;
  auto it = sparse_.find(h.table());
  if (it == sparse_.end()) {
    Reject(req, HasDenseTable(h.table())
                    ? InvalidArgumentError("table '" + h.table() + "' is dense")
                    : NotFoundError("unknown sparse table '" + h.table() + "'"));
    return;
  }
  SparseShardState* shard = it->second.get();
  const bool push = h.type() == wire::PUSH_ROWS;
  if (h.slot() != 0 && (push || h.slot() < 0 || h.slot() >= shard->num_slots())) {
    Reject(req, InvalidArgumentError("slot " + std::to_string(h.slot()) + " of table '" +
                                     h.table() + "' cannot be read (PULL_ROWS only; the table has " +
                                     std::to_string(shard->num_slots()) + " slots)"));
    return;
  }
  if (!CheckFrameCount(req, push ? 2 : 1)) return;
  StatusOr<const uint64_t*> decoded_ids =
      server_internal::DecodeRowIds(req.msg.frames[0], h.key_count(), &ids_scratch_);
  if (!decoded_ids.ok()) {
    Reject(req, decoded_ids.status());
    return;
  }
  const size_t n = h.key_count();
  const uint64_t* ids = *decoded_ids;
  Status clock_ok = server_internal::CheckClock(h.clock());
  if (!clock_ok.ok()) {
    Reject(req, clock_ok);
    return;
  }
  if (push) {
    const float* grads = DecodeGradient(req, req.msg.frames[1], n * shard->width());
    if (grads == nullptr) return;
    // A stateless worker's resend of a row push it gave up on (exactly once).
    if (h.push_id() > 0 && pushes_seen_.Applied(h.sender(), h.incarnation(), h.push_id())) {
      stats_.set_duplicates_skipped(stats_.duplicates_skipped() + 1);
      ReplyWith(req, MakeReply(h, Status::OK()));
      return;
    }
    // A raw delta: a stateless worker's row changes made while this server
    // was lost.
    Status s = h.raw_delta() ? shard->AddDelta(ids, n, grads) : shard->Push(h.sender(), h.clock(), ids, n, grads);
    if (!s.ok()) {
      Reject(req, s);
      return;
    }
    if (h.push_id() > 0) pushes_seen_.Record(h.sender(), h.incarnation(), h.push_id());
    ReplyWith(req, MakeReply(h, Status::OK()));
    return;
  }
  // Everything the gate needs, taken before the request moves.
  const bool inspect = h.slot() != 0 || h.sender() < 0;  // Inspection reads skip the gate.
  const int slot = h.slot();
  const int64_t worker_clock = h.clock();
  const int64_t deadline = PullDeadlineMs(h);
  std::vector<uint64_t> wanted(ids, ids + n);
  auto shared = std::make_shared<Request>(std::move(req));
  RowsReply reply_rows = [this, shared](StatusOr<FloatBuffer> rows) {
    if (!rows.ok()) {
      Reject(*shared, rows.status());
      return;
    }
    Message reply = MakeReply(shared->msg.header, Status::OK());
    reply.header.set_encoding(shared->msg.header.encoding());
    reply.frames.push_back(EncodeFloats(*rows, shared->msg.header.encoding()));
    ReplyWith(*shared, std::move(reply));
  };
  if (inspect) {
    reply_rows(shard->Read(wanted.data(), wanted.size(), slot));
    return;
  }
  shard->Pull(worker_clock, std::move(wanted), deadline, std::move(reply_rows));
}

}  // namespace server_internal

StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  auto server = std::make_unique<server_internal::ServerImpl>(options);
  RETURN_IF_ERROR(server->Init());
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace relaxps
