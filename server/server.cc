// relaxps::Server (server.h): start-up, the run loop, and what the
// coordinator's replies bring (registration and heartbeats themselves are
// CoordinatorLink's, server/internal/coordinator_link.h). The rest of
// ServerImpl (server_impl.h) is
// in server/internal/: server_tables.cc (shard maps and the ranges held),
// server_dispatch.cc (request dispatch and replies), server_data.cc (the data
// path), server_control.cc (stats, seed, checkpoint). Chain replication is
// its own object (server/internal/chain_replication.h).
#include "server/server.h"

#include <unistd.h>

#include <algorithm>

#include "common/advertise.h"
#include "relaxps/recovery_policy.h"
#include "server/internal/server_checkpoints.h"
#include "server/internal/server_impl.h"

namespace relaxps {
namespace {

// What a server's connections to other servers (chain peers, range moves)
// are set up with.
StatusOr<RpcClientOptions> PeerRpcOptions(const ServerOptions& options, const Clock* clock,
                                          int timeout_ms) {
  RpcClientOptions po;
  po.default_timeout_ms = timeout_ms;
  po.clock = clock;
  po.max_message_bytes = options.max_message_bytes;
  po.source_address = options.source_address;
  RETURN_IF_ERROR(po.UseCurve(options.curve));
  return po;
}

// The pieces a state transfer sends: --state_transfer_chunk_bytes, at least
// 4 KiB, at most half of the largest message.
size_t TransferChunkBytes(const ServerOptions& options) {
  size_t bytes = std::max<size_t>(options.state_transfer_chunk_bytes, 4096);
  if (options.max_message_bytes > 0) {
    bytes = std::min(bytes, static_cast<size_t>(options.max_message_bytes / 2));
  }
  return bytes;
}

}  // namespace

std::string ServerOptions::CheckpointRoot() const {
  return checkpoint_dir.empty() ? server_internal::DefaultCheckpointRoot(store.data_dir)
                                : checkpoint_dir;
}

namespace server_internal {

Status ServerImpl::Init() {
  if (options_.coordinator.empty() && options_.coordination.empty()) {
    return InvalidArgumentError("--coordinator (an endpoint of any coordinator) or --coordination "
                                "(zk://HOST:PORT/PATH, the coordinators' ZooKeeper) is required");
  }
  if (options_.curve.enabled() && options_.server_id < 0) {
    return InvalidArgumentError("--security=curve needs --server_id (the id of the server's key)");
  }
  if (options_.coordinator_timeout_ms < 1) {
    return InvalidArgumentError("--coordinator_timeout_ms must be > 0");
  }
  if (options_.move_catchup_rounds < 0) {
    return InvalidArgumentError("--move_catchup_rounds must be >= 0");
  }
  if (options_.move_piece_timeout_ms < 1) {
    return InvalidArgumentError("--move_piece_timeout_ms must be >= 1");
  }
  if (options_.move_window_pieces < 1) {
    return InvalidArgumentError("--move_window_pieces must be >= 1");
  }
  if (options_.max_clocks_ahead < 0 || options_.max_queued_replies < 1) {
    return InvalidArgumentError("--max_clocks_ahead must be >= 0 and --max_queued_replies >= 1");
  }
  RpcServerOptions ro;
  ro.clock = clock_;
  ro.bind = options_.bind;
  ro.max_message_bytes = options_.max_message_bytes;
  ro.max_queued_messages = options_.max_queued_replies;
  ro.max_unread_bytes_per_peer = options_.max_unread_reply_bytes_per_peer;
  ro.max_unread_bytes = options_.max_unread_reply_bytes;
  ro.curve = options_.curve;
  ASSIGN_OR_RETURN(rpc_, RpcServer::Bind(ro));
  ASSIGN_OR_RETURN(advertised_, AdvertisedEndpoint(rpc_->endpoint(), options_.advertise));
  // Peers connect to it: a name they cannot resolve is an error now.
  RETURN_IF_ERROR(CheckHostResolves(advertised_));
  RETURN_IF_ERROR(CheckSourceAddress(options_.source_address));
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
    wire::ShardCheckpoint restored;
    RETURN_IF_ERROR(server_internal::RestoreDataDir(options_.restore_from, checkpoint_root_,
                                                    options_.store.data_dir,
                                                    options_.store.file_system.get(), &restored));
    restored_from_ = restored;
    metrics_.OnRestore((clock_->NowMs() - restore_start_ms) / 1000.0);
  }
  ParamStoreOptions store_options = options_.store;
  store_options.metrics = options_.metrics;
  ASSIGN_OR_RETURN(store_, options_.store_factory ? options_.store_factory(store_options)
                                                  : NewParamStore(store_options));
  if (store_ == nullptr) return InvalidArgumentError("the store factory returned no store");
  // Push replies name the newest checkpoint the state was captured for.
  RETURN_IF_ERROR(applied_.Open(store_.get()));
  if (restored_from_.has_value()) {
    restored_from_->set_seq(applied_.snapshot_seq());
    restored_from_->set_server(options_.server_id);
  }

  RpcClientOptions rpc_options;
  rpc_options.clock = clock_;
  rpc_options.max_message_bytes = options_.max_message_bytes;
  rpc_options.source_address = options_.source_address;
  RETURN_IF_ERROR(rpc_options.UseCurve(options_.curve));
  CoordinatorLink::Options lo;
  lo.coordinator = options_.coordinator;
  lo.coordination = options_.coordination;
  lo.zk_session_timeout_ms = options_.zk_session_timeout_ms;
  lo.register_timeout_ms = options_.register_timeout_ms;
  lo.heartbeat_ms = options_.heartbeat_ms;
  lo.coordinator_timeout_ms = options_.coordinator_timeout_ms;
  lo.endpoint = advertised_;
  lo.restored_from = restored_from_;
  lo.join = options_.join;
  link_ = std::make_unique<CoordinatorLink>(std::move(lo),
                                            std::make_unique<RpcClient>(rpc_options),
                                            static_cast<CoordinatorLink::Host*>(this), clock_);
  RETURN_IF_ERROR(link_->Connect());
  wire::ServerTokens server_tokens;
  ASSIGN_OR_RETURN(wire::RegisterReply rr, link_->Register(options_.server_id, &server_tokens));
  RETURN_IF_ERROR(server_tokens_.Update(server_tokens));
  id_ = rr.id();
  durability_.set_server_id(id_);
  job_ = rr.job();
  link_->Registered(rr);
  ASSIGN_OR_RETURN(std::unique_ptr<RecoveryPolicy> recovery_policy,
                   NewRecoveryPolicy(job_.recovery()));
  recovery_ = recovery_policy->NewServerRecovery();
  if (recovery_ == nullptr) {
    return InvalidArgumentError(std::string("recovery policy '") + recovery_policy->Name() +
                                "' has no server side");
  }
  job_info_.server_id = id_;
  job_info_.replicas = std::max(1, job_.replicas());
  job_info_.store_kind = options_.store.ResolvedKind();
  job_info_.checkpoint_root = checkpoint_root_;
  job_info_.restored = !options_.restore_from.empty();
  job_info_.awaits_seed = rr.awaits_seed();
  job_info_.options = RecoveryOptionValues(job_.recovery_options().begin(),
                                           job_.recovery_options().end());
  write_rule_ = recovery_->write_rule(job_info_);
  holds_writes_during_checkpoint_ = recovery_->HoldsWritesDuringCheckpoint(job_info_);
  rebuilds_rounds_ = recovery_->RebuildsRoundsFromReplay(job_info_);
  hold_next_live_set_ = rebuilds_rounds_;
  if (write_rule_ == recovery::WriteRule::kForwardAlongChain) {
    ASSIGN_OR_RETURN(RpcClientOptions po, PeerRpcOptions(options_, clock_, 5000));
    ChainReplication::Options co;
    co.transfer_chunk_bytes = std::max<size_t>(TransferChunkBytes(options_), 1024);
    co.restored_from = options_.restore_from;
    co.replication_lag = static_cast<uint64_t>(std::max<int64_t>(0, recovery_->ReplicationLag(job_info_)));
    chain_ = std::make_unique<ChainReplication>(static_cast<ChainHost*>(this), rpc_.get(), po,
                                                clock_, co);
  }
  {
    ASSIGN_OR_RETURN(RpcClientOptions po, PeerRpcOptions(options_, clock_, 30000));
    RangeMover::Options mo;
    mo.drain_timeout_ms = options_.move_drain_timeout_ms;
    mo.chunk_bytes = TransferChunkBytes(options_);
    mo.window_pieces = options_.move_window_pieces;
    mo.piece_timeout_ms = options_.move_piece_timeout_ms;
    mo.copy_first = options_.move_copy_first;
    mo.catchup_rounds = options_.move_catchup_rounds;
    mo.catchup_bytes = options_.move_catchup_bytes;
    mo.forward_updates = options_.move_forward_updates;
    mo.forward_window_bytes = options_.move_forward_window_bytes;
    mo.events = options_.events.get();
    mover_ = std::make_unique<RangeMover>(static_cast<RangeMoverHost*>(this), rpc_.get(), po,
                                          clock_, mo);
  }
  ConsistencyOptions co;
  ASSIGN_OR_RETURN(co.model, ParseConsistencyModel(job_.consistency()));
  co.staleness = job_.staleness();
  ASSIGN_OR_RETURN(policy_, NewConsistencyPolicy(co));
  RETURN_IF_ERROR(InstallMap(rr.shard_map()));
  // What the state the store opened with reflects (a restored checkpoint,
  // the last flush): the units of the first map take their records back.
  RETURN_IF_ERROR(RestoreApplied());
  if (rr.has_live_workers()) RETURN_IF_ERROR(SetLiveWorkers(rr.live_workers()));
  registered_ = true;
  awaiting_seed_ = rr.awaits_seed();
  if (awaiting_seed_) LOG(INFO) << "server " << id_ << " waits to be seeded from the workers";
  recovery_->OnStarted(job_info_);
  if (EventLog* events = options_.events.get(); events != nullptr) {
    if (events->process().empty()) events->set_process("server-" + std::to_string(id_));
    // The push parts the state it opened with reflects: a worker's
    // acknowledged pushes beyond its share of them are what a restore lost.
    wire::ServerStats opened_with;
    FillAppliedParts(&opened_with);
    uint64_t restored_parts = 0;
    for (const wire::AppliedParts& a : opened_with.applied_parts()) restored_parts += a.parts();
    events->Emit("server_started",
                 {{"server", id_},
                  {"endpoint", advertised_},
                  {"pid", static_cast<int>(getpid())},
                  {"store", store_->Name()},
                  {"recovery", recovery_->Name()},
                  {"restored", restored_from_.has_value()},
                  {"restored_seq", restored_from_.has_value() ? restored_from_->seq() : 0},
                  {"restored_clock", restored_from_.has_value() ? restored_from_->clock() : -1},
                  {"restored_dir", restored_from_.has_value() ? restored_from_->dir() : ""},
                  {"restored_parts", restored_parts},
                  {"awaits_seed", awaiting_seed_}});
  }
  LOG(INFO) << "server " << id_ << " serving on " << advertised_ << " (store "
            << store_->Name() << ", consistency " << policy_->Name() << ", recovery "
            << recovery_->Name() << ")";
  link_->StartHeartbeat();
  rpc_->AddTimer(50, [this] { OnTimer(); });
  return Status::OK();
}

Status ServerImpl::Run() {
  // --wal_reply=applied: the end of a background WAL sync brings the loop
  // back to start the next (SyncAndRelease).
  store_->SetWalSyncListener([this] { rpc_->Post([this] { SyncAndRelease(); }); });
  rpc_->Run([this](Request&& req) { Handle(std::move(req)); }, [this] { SyncAndRelease(); });
  store_->SetWalSyncListener(nullptr);
  SyncAndRelease(/*wait=*/true);
  link_->StopHeartbeat();
  if (link_->fenced()) {
    return AbortedError("server " + std::to_string(id_) +
                        " was declared dead by the coordinator and stopped (fenced)");
  }
  // Flush starts a background job; wait until it is on disk.
  SaveApplied();
  Status s = store_->Flush(last_flush_clock_);
  if (s.ok()) s = store_->WaitForFlush();
  if (!s.ok()) LOG(ERROR) << "final flush failed: " << s;
  if (job_done_ || drained_) {
    // Tell the coordinator this server left in order (bounded wait).
    link_->Deregister();
    LOG(INFO) << "server " << id_
              << (job_done_ ? ": the job is over; flushed and exiting"
                            : ": drained (every range moved to other servers); exiting");
  }
  return exit_status_.ok() ? s : exit_status_;
}

void ServerImpl::Exit(const Status& why) {
  if (!why.ok()) LOG(ERROR) << "server " << id_ << " stops: " << why;
  if (exit_status_.ok()) exit_status_ = why;
  rpc_->Stop();
}

void ServerImpl::OnDeclaredDead(const std::string& why) {
  // Declared dead (e.g. paused past the heartbeat timeout): its shards may
  // have moved on without it, so its state must not serve again. The policy
  // says how it comes back.
  const recovery::DeadServerPlan plan = recovery_->OnDeclaredDead(JobInfoNow());
  const std::string dead = "server " + std::to_string(id_) +
                           " was declared dead by the coordinator (" + why + "); ";
  switch (plan.action) {
    case recovery::DeadServerPlan::Action::kRejoinChains:
      RejoinAfterFence(why);
      return;
    case recovery::DeadServerPlan::Action::kRestartInPlace: {
      RestartInPlace restart{id_, plan.restart_flags};
      const Status s = AbortedError(dead + "restarting in place " + plan.advice);
      rpc_->Post([this, s, restart] {
        restart_ = restart;
        Exit(s);
      });
      return;
    }
    case recovery::DeadServerPlan::Action::kExit:
      ExitLater(AbortedError(dead + "exiting: " + plan.advice));
      return;
  }
}

void ServerImpl::OnHeartbeatReply(const wire::HeartbeatReply& reply,
                                  const wire::ServerTokens& tokens) {
  if (Status s = server_tokens_.Update(tokens); !s.ok()) {
    LOG(ERROR) << "server tokens from the coordinator: " << s;
  }
  if (reply.job_done() && reply.has_live_workers() && reply.live_workers().ids_size() == 0) {
    job_done_ = true;
    Exit(Status::OK());
    return;
  }
  if (reply.drained() && !drained_) {  // relaxps-ctl drain-server: every range moved off.
    drained_ = true;
    drained_since_ms_ = drained_quiet_since_ms_ = clock_->NowMs();
    drained_requests_ = table_requests_;
    LOG(INFO) << "server " << id_ << " is drained: answering 'moved' until no request came for "
              << options_.drained_quiet_ms << " ms, then leaving";
  }
  if (reply.has_shard_map() && reply.shard_map().version() > map_version_) {
    Status s = InstallMap(reply.shard_map());
    if (!s.ok()) LOG(ERROR) << "installing shard map: " << s;
  }
  if (reply.has_live_workers()) {
    Status s = SetLiveWorkers(reply.live_workers());
    if (!s.ok()) LOG(ERROR) << "live worker set from the coordinator: " << s;
  }
}

void ServerImpl::LeaveWhenQuiet(int64_t now) {
  if (leaving_) return;
  if (table_requests_ != drained_requests_) {
    drained_requests_ = table_requests_;
    drained_quiet_since_ms_ = now;
  }
  if (now - drained_quiet_since_ms_ >= options_.drained_quiet_ms ||
      now - drained_since_ms_ >= 15 * options_.drained_quiet_ms) {
    leaving_ = true;
    Exit(Status::OK());
  }
}

recovery::ServerJobInfo ServerImpl::JobInfoNow() const {
  recovery::ServerJobInfo info = job_info_;
  info.complete_checkpoints =
      ListShardCheckpoints(checkpoint_root_, id_, options_.store.file_system.get())
          .checkpoints_size();
  return info;
}

void ServerImpl::ReportStateArrived() {
  link_->ReportStateArrived(map_version_);
}

void ServerImpl::RejoinAfterFence(const std::string& why) {
  LOG(ERROR) << "server " << id_ << " was declared dead: " << why << "; rejoining";
  // The replicas are fenced (Fence) by the next map this server installs,
  // before anything in it: the map of its rejoin, or whatever the coordinator
  // pushes first. Until then it acts at its old epoch, and whatever it sends
  // is refused by epoch.
  chain_->MarkFencePending();
  link_->Rejoin();
}

void ServerImpl::OnRejoined(const wire::RegisterReply& reply, const wire::ServerTokens& tokens) {
  if (Status s = server_tokens_.Update(tokens); !s.ok()) {
    LOG(ERROR) << "server tokens from the coordinator: " << s;
  }
  const wire::ShardMap& map = reply.shard_map();
  LOG(INFO) << "server " << id_ << " registered again after being fenced; rejoining at epoch "
            << map.epoch();
  // Hybrid: it held ranges alone when it was declared dead; they are
  // seeded from the workers before it serves them.
  if (reply.awaits_seed()) awaiting_seed_ = true;
  if (map.version() <= map_version_) return;  // The coordinator's push came first.
  Status s = InstallMap(map);
  if (!s.ok()) LOG(ERROR) << "installing shard map: " << s;
}

}  // namespace server_internal

StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  auto server = std::make_unique<server_internal::ServerImpl>(options);
  RETURN_IF_ERROR(server->Init());
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace relaxps
