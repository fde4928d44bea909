#include "coordinator/coordinator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/shard_map.h"
#include "common/table.h"
#include "consistency/consistency_policy.h"
#include "coordinator/barriers.h"
#include "coordinator/checkpoint_scheduler.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/map_watchers.h"
#include "coordinator/membership.h"
#include "coordinator/reseeder.h"
#include "recovery/hybrid_fallback.h"
#include "recovery/recovery_policy.h"

namespace relaxps {

Status CoordinatorOptions::Validate() const {
  if (num_servers < 1) return InvalidArgumentError("--num_servers must be >= 1");
  if (num_workers < 0) return InvalidArgumentError("--num_workers must be >= 0");
  if (start_barrier_timeout_ms < 1) {
    return InvalidArgumentError("--start_barrier_timeout_ms must be > 0");
  }
  ConsistencyOptions co{consistency, staleness};
  RETURN_IF_ERROR(NewConsistencyPolicy(co).status());
  ASSIGN_OR_RETURN(std::unique_ptr<RecoveryPolicy> policy, NewRecoveryPolicy(recovery));
  if (heartbeat_timeout_ms < 50) return InvalidArgumentError("--heartbeat_timeout_ms must be >= 50");
  if (checkpoint_every_clocks < 0 || checkpoint_every_s < 0) {
    return InvalidArgumentError("--checkpoint_every_clocks and --checkpoint_every_s must be >= 0");
  }
  if (checkpoint_timeout_ms < 1) return InvalidArgumentError("checkpoint_timeout_ms must be > 0");
  if (reseed_timeout_ms < 1) return InvalidArgumentError("--reseed_timeout_ms must be > 0");
  if (spare_takeover_ms < 0) return InvalidArgumentError("--spare_takeover_ms must be >= 0");
  if (policy->ReplicatesServers() && (replicas < 2 || replicas > num_servers)) {
    return InvalidArgumentError("--replicas must be between 2 and --num_servers (" +
                                std::to_string(num_servers) + ") under --recovery=" +
                                policy->Name() + ", got " + std::to_string(replicas));
  }
  if (probe_timeout_ms < 1) return InvalidArgumentError("probe_timeout_ms must be > 0");
  if (takeover_probe_ms < 1) return InvalidArgumentError("--takeover_probe_ms must be > 0");
  if (max_workers < 0) return InvalidArgumentError("--max_workers must be >= 0");
  if (failed_exit_ms < 0 || done_grace_ms < 1) {
    return InvalidArgumentError("--failed_exit_ms must be >= 0 and done_grace_ms > 0");
  }
  if (sparse_buckets < 0 || sparse_buckets > 65536) {
    return InvalidArgumentError("--sparse_buckets must be between 0 and 65536, got " +
                                std::to_string(sparse_buckets));
  }
  return Status::OK();
}

namespace {

class CoordinatorImpl final : public Coordinator {
 public:
  explicit CoordinatorImpl(const CoordinatorOptions& options)
      : options_(options),
        clock_(ClockOrReal(options.clock)),
        members_(options.heartbeat_timeout_ms),
        barriers_(options.consistency == ConsistencyModel::kAsync ? 0 : options.num_workers),
        checkpoints_(CheckpointSchedulerOptions{options.checkpoint_every_clocks,
                                                options.checkpoint_every_s, 16},
                     clock_->NowMs()),
        reseeder_(ReseedOptions{options.seed_rule, options.merge_rule,
                                options.reseed_timeout_ms}),
        metrics_(options.metrics) {}

  Status Init() {
    ASSIGN_OR_RETURN(recovery_, NewRecoveryPolicy(options_.recovery));
    RpcServerOptions ro;
    ro.bind = options_.bind;
    ro.clock = clock_;
    ro.max_message_bytes = options_.max_message_bytes;
    ro.curve = options_.curve;
    ASSIGN_OR_RETURN(rpc_, RpcServer::Bind(ro));
    watchers_ = std::make_unique<MapWatchers>(rpc_.get());
    metrics_.AddStatusCollector(rpc_.get(), [this] { return BuildStatus(); });
    RpcClientOptions co;
    co.default_timeout_ms = 5000;
    co.clock = clock_;
    // Servers accept control messages only from this routing id, which they
    // learn from their registration reply.
    std::random_device rd;
    identity_ = "coordinator-";
    for (int i = 0; i < 4; ++i) identity_ += std::to_string(rd());
    co.routing_id = identity_;
    co.max_message_bytes = options_.max_message_bytes;
    RETURN_IF_ERROR(co.UseCurve(options_.curve));
    if (chained()) {
      co.on_disconnect = [this](int peer) { rpc_->Post([this, peer] { OnDisconnect(peer); }); };
    }
    servers_rpc_ = std::make_unique<RpcClient>(co);
    next_incarnation_ = static_cast<uint64_t>(NowUnixMs()) * 1000;
    job_.set_consistency(ConsistencyModelName(options_.consistency));
    job_.set_staleness(options_.staleness);
    job_.set_recovery(RecoveryModeName(options_.recovery));
    job_.set_num_servers(options_.num_servers);
    job_.set_num_workers(options_.num_workers);
    job_.set_start_barrier_timeout_ms(options_.start_barrier_timeout_ms);
    job_.set_heartbeat_timeout_ms(options_.heartbeat_timeout_ms);
    job_.set_replicas(chained() ? options_.replicas : 1);
    map_.set_version(1);
    map_.set_epoch(1);
    rpc_->AddTimer(std::max(20, options_.heartbeat_timeout_ms / 5), [this] { CheckLiveness(); });
    start_ms_ = clock_->NowMs();
    LOG(INFO) << "coordinator on " << rpc_->endpoint() << ": consistency "
              << ConsistencyModelName(options_.consistency) << " staleness " << options_.staleness
              << " recovery " << recovery_->Name() << ", waiting for " << options_.num_servers << " server(s)";
    if (checkpoints_.enabled()) {
      LOG(INFO) << "coordinated checkpoints every " << options_.checkpoint_every_clocks
                << " clocks / " << options_.checkpoint_every_s << " s (0: off)";
    }
    return Status::OK();
  }

  const std::string& endpoint() const override { return rpc_->endpoint(); }
  void Run() override {
    rpc_->Run([this](Request r) { Handle(std::move(r)); });
  }
  void Stop() override { rpc_->Stop(); }
  Status result() const override { return result_; }

 private:
  // Ends the job in order (SHUTDOWN or every worker left).
  void EndJob(const std::string& why);
  // Loop timer: returns from Run() once an ended job's processes left, or
  // a failed job's clients had time to learn why.
  void MaybeExit(int64_t now);
  void Handle(Request req);
  // --security=curve: PermissionDenied unless the sender's key may send
  // this message in the role and with the id it claims.
  Status CheckRole(const Request& req) const;
  // `old_confirmed_dead`: a server registering with the id of a live one
  // whose instance did not answer a probe (see takeover_probe_ms).
  void HandleRegister(Request req, bool old_confirmed_dead = false);
  // Probes the live server `id` before `req` may take its id: refused if it
  // answers, registered if not.
  void ProbeBeforeTakeover(Request req, int id);
  int MaxWorkers() const;
  // Handles one request (Dispatch), then answers the map watches the
  // request made stale.
  void Dispatch(Request req);
  void HandleHeartbeat(const Request& req);
  void HandleCreateTable(Request req);
  void HandleStatus(const Request& req);
  // What GET_STATUS answers (also read by the metrics collector).
  wire::StatusReply BuildStatus() const;
  // BARRIER: held in barriers_ until passed or timed out.
  void HandleBarrier(Request req);
  // SET_LEARNING_RATE: records the change in the table and installs the map
  // on every server before answering.
  void HandleSetLearningRate(Request req);
  // Installs map_ on every live server, then answers `req` (with the map).
  // If that fails, table `drop_on_failure` (if any) is dropped from the map.
  void InstallMapAndReply(Request req, const std::string& what,
                          const std::string& drop_on_failure = "");
  void CheckLiveness();
  // Sends `msg` to every live server; `done` runs on the loop thread with the
  // first error or OK once all answered; `on_reply` (optional) runs on the
  // loop thread for each successful reply.
  using ReplyFn = std::function<void(int server_id, const Message& reply)>;
  void Broadcast(const Message& msg, std::function<void(const Status&)> done,
                 int timeout_ms = 5000, ReplyFn on_reply = nullptr);
  // Starts a coordinated checkpoint at the min live worker clock; answers
  // `waiters` (manual requests) when it ends. Queues them if one is running.
  void StartCheckpoint(std::vector<std::shared_ptr<Request>> waiters);
  void BroadcastWorkerSet(std::function<void(const Status&)> done);
  // The live worker set (ids, clocks, version) as sent to servers.
  void FillLiveWorkers(wire::LiveWorkers* lw) const;
  void RebuildServerList();
  void FailJob(const std::string& reason);
  // Removes table `name` from the map (its creation failed with `why`) and
  // sends the map without it to the servers.
  void DropTable(const std::string& name, const Status& why);
  // Stateless recovery: a SEED_COPY from a worker; finishing rounds whose
  // copies are in (or timed out) by sending SEED to their server.
  void HandleSeedCopy(Request req);
  void FinishReseeds();
  bool chained() const { return recovery_->ReplicatesServers(); }
  // Hybrid: chains that fall back to the workers' copies when every replica
  // of a range is lost (recovery/hybrid_fallback.h).
  bool hybrid() const { return chained() && recovery_->TrainsThroughServerLoss(); }
  // Hybrid: once `seeded`'s stranded ranges are served again, the live
  // servers join the chains they were kept out of; pushes the map.
  void RejoinAfterSeed(int seeded);
  // Chain replication: the connection to a server closed; probe it.
  void OnDisconnect(int peer);
  // Chain replication: removes a dead server from its chains and installs
  // the new map (epoch + 1) on every live server.
  void Reconfigure(int server_id, const std::string& why);
  // Sends the current map to every live server.
  void PushMap(const std::string& why);
  // Chain replication: servers that joined chains and have not yet reported
  // (heartbeat awaiting_state false) that every state transfer arrived.
  std::set<int> Syncing() const {
    std::set<int> ids;
    for (const auto& [id, version] : syncing_) ids.insert(id);
    return ids;
  }

  // Constant after Init().
  const CoordinatorOptions options_;
  const Clock* const clock_;
  std::unique_ptr<RpcServer> rpc_;
  std::unique_ptr<RpcClient> servers_rpc_;
  std::unique_ptr<RecoveryPolicy> recovery_;
  wire::JobConfig job_;
  int64_t start_ms_ = 0;
  std::string identity_;  // Routing id of servers_rpc_ (see RegisterReply).
  // --security=curve: server id -> the public key its ROUTER must prove it
  // holds (DIR/server-<id>.pub), listed in the map for clients.
  std::map<int, std::string> server_keys_;
  Status result_;         // Set before Run() returns.

  // Loop thread only.
  std::unique_ptr<MapWatchers> watchers_;  // Created in Init().
  Membership members_;
  Barriers barriers_;
  // The live workers of the last worker set every server acknowledged (the
  // barriers count these: a worker counts once the servers count it too).
  std::vector<int> announced_workers_;
  uint64_t announced_version_ = 0;
  wire::ShardMap map_;
  std::map<int, int> server_peer_;  // server id -> RpcClient peer.
  std::string job_error_;
  int64_t failed_at_ms_ = 0;
  bool job_done_ = false;
  int64_t done_at_ms_ = 0;
  int workers_left_ = 0;  // Orderly DEREGISTERs of workers.
  uint64_t next_incarnation_ = 1;
  CheckpointScheduler checkpoints_;
  Reseeder reseeder_;
  // Servers being seeded: registered, shown dead in the map until seeded.
  std::map<int, int64_t> seeding_;  // server id -> registration time (ms).
  // Hybrid: lost servers that held ranges alone (stranded, awaiting a seed),
  // and since when (for spare takeover).
  std::set<int> stranded_holders_;
  std::map<int, int64_t> stranded_since_;
  // Hybrid: spare -> the holders whose stranded ranges it took over, shown in
  // the map (ServerInfo.took_over) until it is seeded.
  std::map<int, std::vector<int>> took_over_;
  // Hybrid: records `id` as a stranded holder (since now, unless it was).
  void Strand(int id) {
    stranded_holders_.insert(id);
    stranded_since_.emplace(id, clock_->NowMs());
  }
  // Hybrid spare takeover: if a stranded holder qualifies
  // (PickStrandedForSpare), moves what it held alone to `spare`, which is
  // then seeded in its place. Returns the holder or -1.
  int TakeOverStranded(int spare);
  // Chain replication: joined servers still receiving their state, with the
  // map version of their join (see Syncing()).
  std::map<int, uint64_t> syncing_;
  // Manual checkpoint requests that arrived while one was in flight.
  std::vector<std::shared_ptr<Request>> queued_checkpoint_requests_;
  CoordinatorMetrics metrics_;  // Recovery events; the rest from BuildStatus().
};

Status CoordinatorImpl::CheckRole(const Request& req) const {
  const std::string& u = req.user_id;
  if (u.empty()) return Status::OK();  // Plain TCP.
  const wire::Header& h = req.msg.header;
  bool ok = true;
  switch (h.type()) {
    case wire::REGISTER: {
      const wire::RegisterRequest& r = h.register_request();
      ok = r.role() == "observer" ? RoleAllows(u, "observer")
                                  : r.requested_id() >= 0 && RoleAllows(u, r.role(), r.requested_id());
      break;
    }
    case wire::HEARTBEAT:
      ok = RoleAllows(u, h.heartbeat().role(), h.heartbeat().id());
      break;
    case wire::DEREGISTER:
      ok = h.heartbeat().role() == "server" ? RoleAllows(u, "server", h.heartbeat().id())
                                            : RoleAllows(u, "worker", h.sender());
      break;
    case wire::SHUTDOWN:
    case wire::TRIGGER_CHECKPOINT:
      ok = RoleAllows(u, "ctl");
      break;
    case wire::CREATE_TABLE:
      ok = RoleAllows(u, "worker") || RoleAllows(u, "ctl");
      break;
    case wire::SEED_COPY:
      ok = RoleAllows(u, "worker", h.seed_data().worker());
      break;
    default:
      break;  // Reads: any key of the job.
  }
  if (ok) return Status::OK();
  return PermissionDeniedError("key '" + u + "' may not send " + wire::MsgType_Name(h.type()) +
                               " as claimed (under --security=curve a server or worker "
                               "registers with the id of its key)");
}

void CoordinatorImpl::Handle(Request req) {
  Dispatch(std::move(req));
  watchers_->Notify(map_);  // The request may have changed the map.
}

void CoordinatorImpl::Dispatch(Request req) {
  const wire::Header& h = req.msg.header;
  if (Status s = CheckRole(req); !s.ok()) {
    LOG_EVERY_T(WARNING, 1) << "refused: " << s;
    rpc_->ReplyStatus(req, s).IgnoreError();
    return;
  }
  switch (h.type()) {
    case wire::REGISTER:
      HandleRegister(std::move(req));
      return;
    case wire::HEARTBEAT:
      HandleHeartbeat(req);
      return;
    case wire::CREATE_TABLE:
      HandleCreateTable(std::move(req));
      return;
    case wire::GET_SHARD_MAP: {
      if (h.watch_ms() > 0) {
        watchers_->Add(std::move(req), map_, clock_->NowMs());
        return;
      }
      Message reply = MakeReply(h, Status::OK());
      *reply.header.mutable_shard_map() = map_;
      rpc_->Reply(req, std::move(reply)).IgnoreError();
      return;
    }
    case wire::GET_STATUS:
      HandleStatus(req);
      return;
    case wire::SEED_COPY:
      HandleSeedCopy(std::move(req));
      return;
    case wire::BARRIER:
      HandleBarrier(std::move(req));
      return;
    case wire::SET_LEARNING_RATE:
      HandleSetLearningRate(std::move(req));
      return;
    case wire::TRIGGER_CHECKPOINT:
      StartCheckpoint({std::make_shared<Request>(std::move(req))});
      return;
    case wire::SHUTDOWN:
      EndJob("relaxps-ctl shutdown");
      rpc_->ReplyStatus(req, Status::OK()).IgnoreError();
      return;
    case wire::DEREGISTER: {
      if (h.heartbeat().role() == "server") {
        if (members_.MarkServerDead(h.heartbeat().id())) {
          LOG(INFO) << "server " << h.heartbeat().id() << " left";
          RebuildServerList();
        }
        rpc_->ReplyStatus(req, Status::OK()).IgnoreError();
        return;
      }
      members_.RemoveWorker(h.sender());
      ++workers_left_;
      LOG(INFO) << "worker " << h.sender() << " left";
      auto shared = std::make_shared<Request>(std::move(req));
      BroadcastWorkerSet([this, shared](const Status& s) {
        rpc_->ReplyStatus(*shared, s).IgnoreError();
      });
      return;
    }
    default:
      LOG_EVERY_T(WARNING, 1) << "coordinator: unknown message type " << h.type();
      rpc_->ReplyStatus(req, InvalidArgumentError("unknown message type " +
                                                  std::to_string(h.type())))
          .IgnoreError();
  }
}

void CoordinatorImpl::RebuildServerList() {
  map_.clear_servers();
  // Server index in the map == server id (ids are dense from 0).
  int max_id = -1;
  for (const auto& [id, m] : members_.servers()) max_id = std::max(max_id, id);
  for (int id = 0; id <= max_id; ++id) {
    wire::ServerInfo* s = map_.add_servers();
    s->set_id(id);
    auto it = members_.servers().find(id);
    if (it != members_.servers().end()) {
      s->set_endpoint(it->second.endpoint);
      s->set_curve_public_key(server_keys_[id]);
      s->set_alive(it->second.alive && !seeding_.count(id));
    }
    auto spare = took_over_.find(id);
    if (spare != took_over_.end()) {
      for (int holder : spare->second) s->add_took_over(holder);
    }
  }
  map_.set_version(map_.version() + 1);
}

int CoordinatorImpl::MaxWorkers() const {
  if (options_.max_workers > 0) return options_.max_workers;
  // Room for replacements registering before the old worker expires.
  return options_.num_workers > 0 ? std::max(2 * options_.num_workers, options_.num_workers + 4)
                                  : 4096;
}

void CoordinatorImpl::ProbeBeforeTakeover(Request req, int id) {
  const MemberInfo& m = members_.servers().at(id);
  const std::string who = "server " + std::to_string(id) + " (" + m.endpoint + ", pid " +
                          std::to_string(m.pid) + ")";
  Message ping;
  ping.header.set_type(wire::PING);
  auto shared = std::make_shared<Request>(std::move(req));
  servers_rpc_->Call(server_peer_[id], std::move(ping), options_.takeover_probe_ms,
                     [this, shared, who](const Status& s, Message) {
                       rpc_->Post([this, shared, who, s] {
                         const wire::RegisterRequest& r = shared->msg.header.register_request();
                         if (s.ok()) {
                           LOG_EVERY_T(WARNING, 1)
                               << "refused a REGISTER for the id of live " << who << " from "
                               << r.endpoint() << " (pid " << r.pid() << ")";
                           rpc_->ReplyStatus(*shared, PermissionDeniedError(
                                                          who + " is alive and answered a probe; "
                                                          "another process may not take its id"))
                               .IgnoreError();
                           return;
                         }
                         LOG(WARNING) << who << " did not answer a probe within "
                                      << options_.takeover_probe_ms << " ms (" << s
                                      << "): pid " << r.pid() << " at " << r.endpoint()
                                      << " takes its id";
                         HandleRegister(std::move(*shared), /*old_confirmed_dead=*/true);
                       });
                     });
}

void CoordinatorImpl::HandleRegister(Request req, bool old_confirmed_dead) {
  const wire::RegisterRequest& r = req.msg.header.register_request();
  const int64_t now = clock_->NowMs();
  if (r.protocol_version() != kProtocolVersion) {
    LOG_EVERY_T(WARNING, 1) << "refused a " << r.role() << " REGISTER with protocol version "
                            << r.protocol_version();
    rpc_->ReplyStatus(req, FailedPreconditionError(
                               "protocol version mismatch: this coordinator speaks relaxps "
                               "protocol " + std::to_string(kProtocolVersion) + ", the " +
                               (r.role().empty() ? std::string("peer") : r.role()) +
                               " sent version " + std::to_string(r.protocol_version()) +
                               (r.protocol_version() == 0 ? " (a build from before protocol "
                                                            "versions)" : "") +
                               "; run binaries of the same release"))
        .IgnoreError();
    return;
  }
  Message reply = MakeReply(req.msg.header, Status::OK());
  wire::RegisterReply* rr = reply.header.mutable_register_reply();
  *rr->mutable_job() = job_;
  if (r.role() == "server") {
    if (r.endpoint().empty()) {
      rpc_->ReplyStatus(req, InvalidArgumentError("server registration without endpoint"))
          .IgnoreError();
      return;
    }
    if (r.requested_id() >= options_.num_servers) {
      rpc_->ReplyStatus(req, InvalidArgumentError(
                                 "server id " + std::to_string(r.requested_id()) +
                                 " is out of range: the job has " +
                                 std::to_string(options_.num_servers) + " server(s), ids 0.." +
                                 std::to_string(options_.num_servers - 1)))
          .IgnoreError();
      return;
    }
    // A retry of a REGISTER that was applied but whose reply came too late
    // (a slow or loaded server gives up after its timeout and asks again):
    // the same process, at the same endpoint, gets the same answer instead of
    // "job already has N servers".
    for (const auto& [id, m] : members_.servers()) {
      if (m.alive && m.endpoint == r.endpoint() && m.pid == r.pid() &&
          (r.requested_id() < 0 || r.requested_id() == id)) {
        LOG(INFO) << "server " << id << " (pid " << r.pid() << ") repeated its registration";
        rr->set_id(id);
        rr->set_coordinator_identity(identity_);
        rr->set_awaits_seed(seeding_.count(id) > 0);  // Stateless: still waiting for its seed.
        *rr->mutable_shard_map() = map_;
        rpc_->Reply(req, std::move(reply)).IgnoreError();
        return;
      }
    }
    if (r.requested_id() < 0 && members_.live_servers() >= options_.num_servers) {
      rpc_->ReplyStatus(req, FailedPreconditionError(
                                 "job already has " + std::to_string(options_.num_servers) +
                                 " server(s); pass --server_id to replace one"))
          .IgnoreError();
      return;
    }
    auto old = members_.servers().find(r.requested_id());
    if (old != members_.servers().end() && old->second.alive && !old_confirmed_dead) {
      // Another process wants the id of a live server (a forged REGISTER, or
      // a restart before the old one was declared dead): only if the old
      // instance does not answer.
      ProbeBeforeTakeover(std::move(req), old->first);
      return;
    }
    if (old != members_.servers().end()) {
      LOG(INFO) << "server " << r.requested_id() << " registers again (was "
                << (old->second.alive ? "alive" : "dead") << ", pid " << old->second.pid
                << "); it takes back its shards";
    }
    const bool was_live = old != members_.servers().end() && old->second.alive;
    const bool replaces = old != members_.servers().end();
    const int id = members_.AddServer(r.requested_id(), r.endpoint(), r.pid(), now);
    if (options_.curve.enabled() && !server_keys_.count(id)) {
      // CheckRole bound the id to the sender's key, so this file exists.
      StatusOr<std::string> key =
          LoadPublicKey(options_.curve.keys_dir, "server-" + std::to_string(id));
      if (key.ok()) server_keys_[id] = *key;
    }
    server_peer_[id] = servers_rpc_->Connect(r.endpoint(), server_keys_[id]);
    // Stateless: a server in place of a known one starts empty; it is seeded
    // from the workers' copies before anyone routes to it.
    if (hybrid() && was_live && map_.tables_size() > 0) {
      // Its state is gone: what it held alone is stranded like a loss.
      if (!SpliceOrStrand(&map_, id, Syncing()).stranded.empty()) Strand(id);
    }
    // Hybrid: a server with another id may take a stranded holder's place.
    const bool took_over = hybrid() && map_.tables_size() > 0 && TakeOverStranded(id) >= 0;
    // Under hybrid only a server whose ranges are stranded is seeded; the
    // others rejoin their chains by state transfer.
    const bool seed = recovery_->TrainsThroughServerLoss() && (replaces || took_over) &&
                      map_.tables_size() > 0 && (!chained() || stranded_holders_.count(id));
    if (seed) seeding_[id] = now;
    int joined = 0;
    if (chained() && map_.tables_size() > 0) {
      syncing_.erase(id);
      if (was_live && !hybrid()) {
        StatusOr<int> removed = RemoveFromChains(&map_, id, options_.replicas, Syncing());
        if (!removed.ok()) {
          FailJob(removed.status().message());
        }
      }
      joined = JoinChains(&map_, id, options_.num_servers, options_.replicas);
      if (hybrid()) {
        std::set<int> others = stranded_holders_;
        others.erase(id);
        const int kept_out = LeaveStrandedChains(&map_, id, others);
        joined -= kept_out;
        if (kept_out > 0) {
          LOG(INFO) << "server " << id << " joins " << kept_out
                    << " stranded chain(s) only once they are seeded";
        }
      }
      map_.set_epoch(map_.epoch() + 1);
      LOG(INFO) << "server " << id << " joins " << joined << " chain(s) as tail; epoch "
                << map_.epoch();
    }
    RebuildServerList();
    // Until it reports its state transfers done, it is no copy of those
    // chains (RemoveFromChains).
    if (joined > 0) syncing_[id] = map_.version();
    if (seed) {
      std::vector<int> workers;
      std::vector<int64_t> clocks;
      members_.LiveWorkers(&workers, &clocks);
      reseeder_.Begin(id, map_.version(), workers, now);
      rr->set_awaits_seed(true);
      LOG(INFO) << "server " << id << " replaces a lost one: asking " << workers.size()
                << " worker(s) for their copies of its ranges (map version " << map_.version()
                << ")";
    }
    LOG(INFO) << "server " << id << " registered at " << r.endpoint() << " (pid " << r.pid()
              << "); " << members_.live_servers() << "/" << options_.num_servers << " live";
    rr->set_id(id);
    rr->set_coordinator_identity(identity_);
    *rr->mutable_shard_map() = map_;
    rpc_->Reply(req, std::move(reply)).IgnoreError();
    if (joined > 0 || took_over) PushMap("server " + std::to_string(id) + " rejoined");
    return;
  }
  if (r.role() == "worker" && job_done_) {
    rpc_->ReplyStatus(req, FailedPreconditionError("the job is over (relaxps-ctl shutdown, or "
                                                   "every worker left)"))
        .IgnoreError();
    return;
  }
  if (r.role() == "worker") {
    std::vector<int> live_ids;
    std::vector<int64_t> live_clocks;
    members_.LiveWorkers(&live_ids, &live_clocks);
    const bool replaces = std::find(live_ids.begin(), live_ids.end(), r.requested_id()) !=
                          live_ids.end();
    if (!replaces && static_cast<int>(live_ids.size()) >= MaxWorkers()) {
      LOG_EVERY_T(WARNING, 1) << "refused a worker REGISTER (pid " << r.pid() << "): "
                              << live_ids.size() << " live workers";
      rpc_->ReplyStatus(req, FailedPreconditionError(
                                 "job already has " + std::to_string(live_ids.size()) +
                                 " live workers, the most it admits (--max_workers=" +
                                 std::to_string(MaxWorkers()) + ")"))
          .IgnoreError();
      return;
    }
    const int64_t start_clock = members_.MinWorkerClock();
    const int id = members_.AddWorker(r.requested_id(), start_clock, r.pid(), now);
    LOG(INFO) << "worker " << id << " registered (pid " << r.pid() << ") at clock "
              << start_clock;
    rr->set_id(id);
    rr->set_start_clock(start_clock);
    rr->set_barrier_generation(barriers_.generation());
    rr->set_incarnation(next_incarnation_++);
    *rr->mutable_shard_map() = map_;
    auto shared = std::make_shared<Request>(std::move(req));
    auto shared_reply = std::make_shared<Message>(std::move(reply));
    // Acknowledge only once every server counts this worker as live.
    BroadcastWorkerSet([this, shared, shared_reply](const Status& s) {
      if (!s.ok()) {
        rpc_->ReplyStatus(*shared, s.WithPrefix("announcing worker to servers")).IgnoreError();
        return;
      }
      rpc_->Reply(*shared, std::move(*shared_reply)).IgnoreError();
    });
    return;
  }
  if (r.role() == "observer") {
    rr->set_id(-1);
    *rr->mutable_shard_map() = map_;
    rpc_->Reply(req, std::move(reply)).IgnoreError();
    return;
  }
  rpc_->ReplyStatus(req, InvalidArgumentError("unknown role '" + r.role() + "'")).IgnoreError();
}

void CoordinatorImpl::HandleHeartbeat(const Request& req) {
  const wire::HeartbeatRequest& hb = req.msg.header.heartbeat();
  const int64_t now = clock_->NowMs();
  Message reply = MakeReply(req.msg.header, Status::OK());
  wire::HeartbeatReply* hr = reply.header.mutable_heartbeat_reply();
  bool known = true;
  if (hb.role() == "server") {
    known = members_.ServerHeartbeat(hb.id(), now);
    FillLiveWorkers(hr->mutable_live_workers());
    auto syncing = syncing_.find(hb.id());
    if (known && syncing != syncing_.end() && hb.shard_map_version() >= syncing->second &&
        !hb.awaiting_state()) {
      LOG(INFO) << "server " << hb.id() << " holds the state of every chain it joined";
      syncing_.erase(syncing);
    }
  } else if (hb.role() == "worker") {
    known = members_.WorkerHeartbeat(hb.id(), hb.clock(), now);
    for (const wire::ReseedRequest& q : reseeder_.RequestsFor(hb.id())) *hr->add_reseed() = q;
  }
  if (!known && job_error_.empty()) {
    StatusToProto(NotFoundError(hb.role() + " " + std::to_string(hb.id()) +
                                " is not a live member (declared dead?); re-register"),
                  reply.header.mutable_status());
  }
  hr->set_shard_map_version(map_.version());
  hr->set_job_error(job_error_);
  hr->set_job_done(job_done_);
  if (hb.shard_map_version() < map_.version()) *hr->mutable_shard_map() = map_;
  rpc_->Reply(req, std::move(reply)).IgnoreError();
}

void CoordinatorImpl::HandleCreateTable(Request req) {
  const TableOptions t = TableFromProto(req.msg.header.create_table());
  Status valid = t.Validate();
  if (valid.ok() && t.type == TableType::kDense && options_.max_table_bytes > 0 &&
      t.size > options_.max_table_bytes / sizeof(float)) {
    valid = InvalidArgumentError("table '" + t.name + "' of " + std::to_string(t.size) +
                                 " floats is larger than the job admits (--max_table_mb=" +
                                 std::to_string(options_.max_table_bytes >> 20) + ")");
  }
  if (!valid.ok()) {
    rpc_->ReplyStatus(req, valid).IgnoreError();
    return;
  }
  for (const wire::TableShards& ts : map_.tables()) {
    if (ts.table().name() != t.name) continue;
    std::string a, b;
    wire::TableProto requested, existing = ts.table();
    TableToProto(t, &requested);
    existing.clear_lr_changes();  // Later SetLearningRate calls are not part of the identity.
    requested.clear_lr_changes();
    existing.SerializeToString(&a);
    requested.SerializeToString(&b);
    Status s = a == b ? Status::OK()
                      : InvalidArgumentError("table '" + t.name +
                                             "' already exists with different options");
    // Identical: acknowledge once every server has the table (it may still be
    // in flight for the first creator; INSTALL_MAP is idempotent).
    if (!s.ok()) {
      rpc_->ReplyStatus(req, s).IgnoreError();
      return;
    }
    break;
  }
  if (!job_error_.empty()) {
    rpc_->ReplyStatus(req, AbortedError(job_error_)).IgnoreError();
    return;
  }
  if (members_.live_servers() < options_.num_servers) {
    rpc_->ReplyStatus(req, UnavailableError("waiting for servers: " +
                                            std::to_string(members_.live_servers()) + " of " +
                                            std::to_string(options_.num_servers) + " registered"))
        .IgnoreError();
    return;
  }
  const bool created =
      std::none_of(map_.tables().begin(), map_.tables().end(),
                   [&](const wire::TableShards& ts) { return ts.table().name() == t.name; });
  if (created) {
    wire::TableShards* ts = map_.add_tables();
    TableToProto(t, ts->mutable_table());
    if (t.type == TableType::kDense) {
      for (const wire::DenseRange& r :
           ShardMap::AssignDense(t.size, options_.num_servers, job_.replicas())) {
        *ts->add_ranges() = r;
      }
    } else {
      const int buckets =
          options_.sparse_buckets > 0 ? options_.sparse_buckets : options_.num_servers;
      for (const wire::SparseBucket& b :
           ShardMap::AssignBuckets(buckets, options_.num_servers, job_.replicas())) {
        *ts->add_buckets() = b;
      }
    }
    map_.set_version(map_.version() + 1);
    LOG(INFO) << "created " << (t.type == TableType::kDense ? "dense" : "sparse") << " table '"
              << t.name << "' (size " << t.size << ", width " << t.row_width << ", "
              << t.optimizer.name << " lr " << t.optimizer.lr << "), map version "
              << map_.version();
  }
  InstallMapAndReply(std::move(req), "installing shard map", created ? t.name : "");
}

void CoordinatorImpl::InstallMapAndReply(Request req, const std::string& what,
                                         const std::string& drop_on_failure) {
  Message install;
  install.header.set_type(wire::INSTALL_MAP);
  *install.header.mutable_shard_map() = map_;
  auto shared = std::make_shared<Request>(std::move(req));
  Broadcast(install, [this, shared, what, drop_on_failure](const Status& s) {
    if (!s.ok()) {
      // A table a server could not create (over its quota, out of memory)
      // leaves no trace: servers would otherwise retry it at every
      // heartbeat and every later CREATE_TABLE would fail too.
      if (!drop_on_failure.empty()) DropTable(drop_on_failure, s);
      rpc_->ReplyStatus(*shared, s.WithPrefix(what)).IgnoreError();
      return;
    }
    Message reply = MakeReply(shared->msg.header, Status::OK());
    *reply.header.mutable_shard_map() = map_;
    rpc_->Reply(*shared, std::move(reply)).IgnoreError();
  });
}

void CoordinatorImpl::HandleSetLearningRate(Request req) {
  const wire::Header& h = req.msg.header;
  const wire::LrChange& c = h.lr_change();
  Status bad;
  if (!h.has_lr_change() || !(c.lr() > 0) || !std::isfinite(c.lr()) || c.from_clock() < 0) {
    bad = InvalidArgumentError("SET_LEARNING_RATE needs a positive finite lr and a clock >= 0");
  } else if (!job_error_.empty()) {
    bad = AbortedError(job_error_);
  }
  wire::TableProto* table = nullptr;
  for (wire::TableShards& ts : *map_.mutable_tables()) {
    if (ts.table().name() == h.table()) table = ts.mutable_table();
  }
  if (bad.ok() && table == nullptr) bad = NotFoundError("unknown table '" + h.table() + "'");
  if (!bad.ok()) {
    rpc_->ReplyStatus(req, bad).IgnoreError();
    return;
  }
  // Sorted by clock; a second change at the same clock replaces the first.
  TableOptions t = TableFromProto(*table);
  auto at = std::lower_bound(t.lr_changes.begin(), t.lr_changes.end(),
                             std::make_pair(c.from_clock(), -1.0f));
  if (at != t.lr_changes.end() && at->first == c.from_clock()) {
    at->second = c.lr();
  } else {
    t.lr_changes.insert(at, {c.from_clock(), c.lr()});
  }
  TableToProto(t, table);
  map_.set_version(map_.version() + 1);
  LOG(INFO) << "table '" << t.name << "': learning rate " << c.lr() << " from clock "
            << c.from_clock() << " (worker " << h.sender() << "), map version " << map_.version();
  InstallMapAndReply(std::move(req), "installing the new learning rate");
}

void CoordinatorImpl::Broadcast(const Message& msg, std::function<void(const Status&)> done,
                                int timeout_ms, ReplyFn on_reply) {
  struct State {
    int remaining = 0;
    Status first_error;
    std::function<void(const Status&)> done;
  };
  auto state = std::make_shared<State>();
  state->done = std::move(done);
  std::vector<std::pair<int, int>> targets;
  for (const auto& [id, m] : members_.servers()) {
    if (m.alive) targets.emplace_back(id, server_peer_[id]);
  }
  state->remaining = static_cast<int>(targets.size());
  if (targets.empty()) {
    state->done(Status::OK());
    return;
  }
  for (const auto& [id, peer] : targets) {
    Message copy;
    copy.header = msg.header;
    const int server_id = id;
    servers_rpc_->Call(peer, std::move(copy), timeout_ms,
                       [this, state, server_id, on_reply](const Status& s, Message reply) {
                         auto shared = std::make_shared<Message>(std::move(reply));
                         rpc_->Post([state, s, server_id, on_reply, shared] {
                           if (!s.ok() && state->first_error.ok()) {
                             state->first_error = s.WithPrefix("server " + std::to_string(server_id));
                           }
                           if (s.ok() && on_reply) on_reply(server_id, *shared);
                           if (--state->remaining == 0) state->done(state->first_error);
                         });
                       });
  }
}

void CoordinatorImpl::BroadcastWorkerSet(std::function<void(const Status&)> done) {
  Message msg;
  msg.header.set_type(wire::WORKER_SET);
  FillLiveWorkers(msg.header.mutable_live_workers());
  auto live = std::make_shared<wire::LiveWorkers>(msg.header.live_workers());
  Broadcast(msg, [this, live, done = std::move(done)](const Status& s) {
    if (live->version() >= announced_version_) {
      announced_version_ = live->version();
      announced_workers_.assign(live->ids().begin(), live->ids().end());
      barriers_.Update(announced_workers_, clock_->NowMs());
    }
    done(s);
  });
}

void CoordinatorImpl::HandleBarrier(Request req) {
  const wire::Header& h = req.msg.header;
  if (!h.has_barrier() || h.barrier().timeout_ms() <= 0) {
    rpc_->ReplyStatus(req, InvalidArgumentError("BARRIER needs a barrier body with a positive "
                                                "timeout_ms"))
        .IgnoreError();
    return;
  }
  const wire::BarrierRequest b = h.barrier();  // Copies: req moves below.
  const int worker = h.sender();
  const int64_t now = clock_->NowMs();
  auto shared = std::make_shared<Request>(std::move(req));
  Barriers::Release release = [this, shared](const Status& s) {
    rpc_->ReplyStatus(*shared, s).IgnoreError();
  };
  if (b.start()) {
    barriers_.WaitStart(now + b.timeout_ms(), std::move(release));
  } else if (auto w = members_.workers().find(worker);
             w == members_.workers().end() || !w->second.alive) {
    release(NotFoundError("worker " + std::to_string(worker) +
                          " is not a live member and cannot join a barrier"));
    return;
  } else {
    barriers_.Arrive(worker, b.generation(), now + b.timeout_ms(), std::move(release));
  }
  barriers_.Update(announced_workers_, now);
}

void CoordinatorImpl::FillLiveWorkers(wire::LiveWorkers* lw) const {
  std::vector<int> ids;
  std::vector<int64_t> clocks;
  members_.LiveWorkers(&ids, &clocks);
  lw->set_version(members_.worker_set_version());
  for (size_t i = 0; i < ids.size(); ++i) {
    lw->add_ids(ids[i]);
    lw->add_clocks(clocks[i]);
  }
}

void CoordinatorImpl::DropTable(const std::string& name, const Status& why) {
  auto* tables = map_.mutable_tables();
  for (int i = 0; i < tables->size(); ++i) {
    if (tables->Get(i).table().name() != name) continue;
    tables->DeleteSubrange(i, 1);
    map_.set_version(map_.version() + 1);
    LOG(WARNING) << "table '" << name << "' dropped from the map (version " << map_.version()
                 << "): " << why;
    PushMap("table '" + name + "' dropped");
    return;
  }
}

void CoordinatorImpl::EndJob(const std::string& why) {
  if (job_done_) return;
  job_done_ = true;
  done_at_ms_ = clock_->NowMs();
  LOG(INFO) << "job over (" << why << "): workers finish their step and leave, then servers "
            << "flush and exit";
}

void CoordinatorImpl::MaybeExit(int64_t now) {
  if (!job_error_.empty() && options_.failed_exit_ms > 0 &&
      now - failed_at_ms_ >= options_.failed_exit_ms) {
    LOG(ERROR) << "exiting: the job failed " << (now - failed_at_ms_) << " ms ago: " << job_error_;
    result_ = AbortedError("job failed: " + job_error_);
    rpc_->Stop();
    return;
  }
  if (!job_done_) return;
  std::vector<int> ids;
  std::vector<int64_t> clocks;
  members_.LiveWorkers(&ids, &clocks);
  if (ids.empty() && members_.live_servers() == 0) {
    LOG(INFO) << "exiting: the job is over and every process left";
    rpc_->Stop();
  } else if (now - done_at_ms_ >= options_.done_grace_ms) {
    LOG(WARNING) << "exiting: the job is over; " << ids.size() << " worker(s) and "
                 << members_.live_servers() << " server(s) did not leave within "
                 << options_.done_grace_ms << " ms";
    rpc_->Stop();
  }
}

void CoordinatorImpl::FailJob(const std::string& reason) {
  if (!job_error_.empty()) return;
  job_error_ = reason;
  failed_at_ms_ = clock_->NowMs();
  LOG(ERROR) << "job failed: " << reason;
}

void CoordinatorImpl::HandleSeedCopy(Request req) {
  const int worker = req.msg.header.seed_data().worker();
  Message msg;
  msg.header = req.msg.header;
  msg.frames = std::move(req.msg.frames);
  Status s = reseeder_.AddCopy(std::move(msg));
  if (!s.ok()) LOG(WARNING) << "SEED_COPY from worker " << worker << ": " << s;
  rpc_->ReplyStatus(req, s).IgnoreError();
  FinishReseeds();
}

void CoordinatorImpl::FinishReseeds() {
  if (reseeder_.empty()) return;
  std::vector<int> workers;
  std::vector<int64_t> clocks;
  members_.LiveWorkers(&workers, &clocks);
  for (int server : reseeder_.Ready(workers, clock_->NowMs())) {
    ReseedSummary summary;
    StatusOr<Message> seed = reseeder_.Finish(server, map_, &summary);
    if (!seed.ok()) {
      FailJob("re-seeding server " + std::to_string(server) + ": " + seed.status().ToString());
      continue;
    }
    if (hybrid() && summary.seed_worker < 0) {
      // No live worker held a copy: the server keeps what it loaded at start
      // (run_local.sh restarts it with --restore_from=latest).
      summary.source = checkpoints_.latest()
                           ? "checkpoint@" + std::to_string(checkpoints_.latest()->clock())
                           : std::string("initializer");
      metrics_.OnRecovery("fallback");
      LOG(WARNING) << "FALLBACK cause=no-worker-copy server=" << server
                   << " ranges=" << DescribeRanges(RangesHeldAlone(map_, server))
                   << " action=restore source=" << summary.source
                   << (summary.changes_only + summary.buckets > 0
                           ? " plus the workers' merged changes"
                           : "")
                   << ": no live worker sent a copy of its ranges"
                   << (summary.buckets > 0 ? " (sparse rows never have one)" : "");
    }
    auto peer = server_peer_.find(server);
    if (peer == server_peer_.end()) continue;
    const int64_t registered = seeding_.count(server) ? seeding_[server] : clock_->NowMs();
    auto shared_summary = std::make_shared<ReseedSummary>(summary);
    servers_rpc_->Call(
        peer->second, std::move(seed).value(), 10000,
        [this, server, registered, shared_summary](const Status& s, Message) {
          rpc_->Post([this, server, registered, shared_summary, s] {
            if (!s.ok()) {
              // The new server died too: the next one to register is seeded.
              LOG(WARNING) << "seeding server " << server << " failed: " << s;
              return;
            }
            seeding_.erase(server);
            RebuildServerList();
            metrics_.OnRecoveryDone("reseed", (clock_->NowMs() - registered) / 1000.0);
            LOG(INFO) << "RESEED " << shared_summary->ToString() << " seconds="
                      << (clock_->NowMs() - registered) / 1000.0 << " map_version="
                      << map_.version();
            if (hybrid()) RejoinAfterSeed(server);
          });
        });
  }
}

void CoordinatorImpl::CheckLiveness() {
  const int64_t now = clock_->NowMs();
  watchers_->Expire(map_, now);
  FinishReseeds();
  if (options_.exit_when_done && options_.num_workers > 0 && !job_done_ &&
      static_cast<int>(members_.workers().size()) >= options_.num_workers) {
    std::vector<int> ids;
    std::vector<int64_t> clocks;
    members_.LiveWorkers(&ids, &clocks);
    if (ids.empty()) {
      // Every worker is gone: nothing will use the servers again. Workers
      // that went silent instead of saying goodbye make the exit non-zero.
      const int lost = static_cast<int>(members_.workers().size()) - workers_left_;
      EndJob(std::to_string(workers_left_) + " worker(s) left, " +
             std::to_string(std::max(0, lost)) + " lost");
      if (lost > 0) {
        result_ = AbortedError(std::to_string(lost) +
                               " worker(s) went silent without leaving; the job is over");
      }
    }
  }
  MaybeExit(now);
  for (int id : members_.ExpireServers(now)) {
    if (job_done_) continue;  // Leaving at the end is not a failure.
    const MemberInfo& m = members_.servers().at(id);
    const std::string what = "server " + std::to_string(id) + " (" + m.endpoint + ", pid " +
                             std::to_string(m.pid) + ") missed heartbeats for " +
                             std::to_string(options_.heartbeat_timeout_ms) + " ms";
    LOG(WARNING) << what;
    metrics_.OnDeclaredDead("server");
    // Whatever waits on the dead server (a checkpoint in flight) fails now,
    // not at its deadline: a checkpoint that waited out its 120 s blocked
    // every later one, so a second kill rolled back to before the first.
    servers_rpc_->CancelPeer(server_peer_[id], UnavailableError(what));
    if (recovery_->on_server_loss() == RecoveryPolicy::OnServerLoss::kReconfigure) {
      Reconfigure(id, what);
      continue;
    }
    RebuildServerList();
    if (recovery_->on_server_loss() == RecoveryPolicy::OnServerLoss::kFailJob) {
      FailJob(what + "; recovery policy '" + recovery_->Name() + "' ends the job");
    } else {
      LOG(WARNING) << "waiting for server " << id << ": " << recovery_->RestartAdvice(id);
    }
  }
  if (checkpoints_.enabled() && job_error_.empty() &&
      members_.live_servers() >= options_.num_servers && map_.tables_size() > 0 &&
      checkpoints_.Due(members_.MinWorkerClock(), now)) {
    StartCheckpoint({});
  }
  barriers_.Update(announced_workers_, now);  // Expires held barrier requests.
  std::vector<int> dead_workers = members_.ExpireWorkers(now);
  for (int id : dead_workers) {
    metrics_.OnDeclaredDead("worker");
    LOG(WARNING) << "worker " << id << " missed heartbeats for "
                 << options_.heartbeat_timeout_ms << " ms; dropped from the live set";
  }
  if (!dead_workers.empty()) {
    BroadcastWorkerSet([](const Status& s) {
      if (!s.ok()) LOG(WARNING) << "announcing live workers: " << s;
    });
  }
  watchers_->Notify(map_);
}

void CoordinatorImpl::OnDisconnect(int peer) {
  int id = -1;
  for (const auto& [server, p] : server_peer_) {
    if (p == peer) id = server;
  }
  auto it = members_.servers().find(id);
  if (id < 0 || it == members_.servers().end() || !it->second.alive) return;
  const std::string endpoint = it->second.endpoint;
  const int64_t since = clock_->NowMs();
  Message ping;
  ping.header.set_type(wire::PING);
  servers_rpc_->Call(peer, std::move(ping), options_.probe_timeout_ms,
                     [this, id, endpoint, since](const Status& s, Message) {
                       if (s.ok()) return;
                       rpc_->Post([this, id, endpoint, since, s] {
                         auto it = members_.servers().find(id);
                         // Still the same incarnation of the server, still live?
                         if (it == members_.servers().end() || !it->second.alive ||
                             it->second.endpoint != endpoint) {
                           return;
                         }
                         members_.MarkServerDead(id);
                         servers_rpc_->CancelPeer(
                             server_peer_[id],
                             UnavailableError("server " + std::to_string(id) + " is dead"));
                         Reconfigure(id, "server " + std::to_string(id) + " (" + endpoint +
                                             ") closed its connection and did not answer a "
                                             "probe within " +
                                             std::to_string(clock_->NowMs() - since) + " ms");
                       });
                     });
}

void CoordinatorImpl::Reconfigure(int server_id, const std::string& why) {
  LOG(WARNING) << why;
  metrics_.OnRecovery("failover");
  syncing_.erase(server_id);
  if (hybrid()) {
    took_over_.erase(server_id);  // A spare lost before its seed: stranded again.
    const SpliceResult r = SpliceOrStrand(&map_, server_id, Syncing());
    map_.set_epoch(map_.epoch() + 1);
    RebuildServerList();
    LOG(WARNING) << "server " << server_id << " removed from " << r.changed
                 << " chain(s); epoch " << map_.epoch() << ", map version " << map_.version();
    if (!r.stranded.empty()) {
      Strand(server_id);
      metrics_.OnRecovery("fallback");
      LOG(WARNING) << "FALLBACK cause=all-replicas-lost server=" << server_id
                   << " ranges=" << DescribeRanges(r.stranded)
                   << " action=stateless-reseed epoch=" << map_.epoch() << " (" << why
                   << "): workers train on their own copies until a server registers with id "
                   << server_id << " and is seeded from them";
    }
    LOG(WARNING) << recovery_->RestartAdvice(server_id);
    PushMap("server " + std::to_string(server_id) + " lost");
    watchers_->Notify(map_);
    return;
  }
  StatusOr<int> changed = RemoveFromChains(&map_, server_id, options_.replicas, Syncing());
  if (!changed.ok()) {
    RebuildServerList();
    FailJob(why + "; " + changed.status().message() + ": every replica is lost");
    return;
  }
  map_.set_epoch(map_.epoch() + 1);
  RebuildServerList();
  LOG(WARNING) << "server " << server_id << " removed from " << *changed
               << " chain(s); epoch " << map_.epoch() << ", map version " << map_.version()
               << ". " << recovery_->RestartAdvice(server_id);
  PushMap("server " + std::to_string(server_id) + " lost");
  watchers_->Notify(map_);
}

void CoordinatorImpl::RejoinAfterSeed(int seeded) {
  stranded_holders_.erase(seeded);
  stranded_since_.erase(seeded);
  took_over_.erase(seeded);
  int joined = 0;
  std::vector<int> joiners;
  for (const auto& [id, m] : members_.servers()) {
    if (!m.alive || seeding_.count(id) || stranded_holders_.count(id)) continue;
    const int n = JoinChains(&map_, id, options_.num_servers, options_.replicas) -
                  LeaveStrandedChains(&map_, id, stranded_holders_);
    if (n > 0) joiners.push_back(id);
    joined += n;
  }
  if (joined > 0) {
    map_.set_epoch(map_.epoch() + 1);
    map_.set_version(map_.version() + 1);
    // They hold no state of those chains until their state transfers arrive.
    for (int id : joiners) syncing_[id] = map_.version();
    LOG(INFO) << joined << " replica(s) join the chains seeded on server " << seeded << " as tail; epoch "
              << map_.epoch();
  }
  PushMap("server " + std::to_string(seeded) + " seeded");
  watchers_->Notify(map_);
}

int CoordinatorImpl::TakeOverStranded(int spare) {
  if (stranded_holders_.count(spare)) return -1;  // Its own restart.
  std::set<int> busy;  // Holders restarted and being seeded now.
  for (const auto& [id, since] : seeding_) {
    auto m = members_.servers().find(id);
    if (m != members_.servers().end() && m->second.alive) busy.insert(id);
  }
  const int holder = PickStrandedForSpare(stranded_since_, busy, spare, clock_->NowMs(),
                                          options_.spare_takeover_ms);
  if (holder < 0) return -1;
  const std::vector<StrandedRange> moved = MoveStranded(&map_, holder, spare);
  const int64_t since = stranded_since_[holder];
  stranded_holders_.erase(holder);
  stranded_since_.erase(holder);
  stranded_holders_.insert(spare);
  stranded_since_[spare] = since;
  took_over_[spare].push_back(holder);
  LOG(WARNING) << "TAKEOVER server=" << spare << " holder=" << holder
               << " ranges=" << DescribeRanges(moved) << " stranded_ms="
               << clock_->NowMs() - since << ": server " << spare
               << " is seeded from the workers' copies in place of server " << holder;
  return holder;
}

void CoordinatorImpl::PushMap(const std::string& why) {
  Message install;
  install.header.set_type(wire::INSTALL_MAP);
  *install.header.mutable_shard_map() = map_;
  const uint64_t epoch = map_.epoch();
  Broadcast(install, [why, epoch](const Status& s) {
    if (!s.ok()) LOG(WARNING) << "installing the map of epoch " << epoch << " (" << why << "): " << s;
  }, 2000);
}

void CoordinatorImpl::StartCheckpoint(std::vector<std::shared_ptr<Request>> waiters) {
  if (checkpoints_.in_flight()) {
    for (auto& w : waiters) queued_checkpoint_requests_.push_back(std::move(w));
    return;
  }
  auto answer = [this](const std::vector<std::shared_ptr<Request>>& ws, const Status& s,
                       const wire::CheckpointRecord* record) {
    for (const auto& w : ws) {
      Message reply = MakeReply(w->msg.header, s);
      if (record != nullptr) *reply.header.mutable_checkpoint_record() = *record;
      rpc_->Reply(*w, std::move(reply)).IgnoreError();
    }
  };
  if (!job_error_.empty()) {
    answer(waiters, AbortedError(job_error_), nullptr);
    return;
  }
  if (members_.live_servers() < options_.num_servers) {
    answer(waiters, UnavailableError("cannot checkpoint: " +
                                     std::to_string(members_.live_servers()) + " of " +
                                     std::to_string(options_.num_servers) + " servers live"),
           nullptr);
    return;
  }
  const int64_t now = clock_->NowMs();
  const int64_t clock = members_.MinWorkerClock();
  checkpoints_.Start(clock, now);
  LOG(INFO) << "checkpoint at clock " << clock << " started";
  Message msg;
  msg.header.set_type(wire::CHECKPOINT);
  msg.header.mutable_checkpoint_request()->set_clock(clock);
  auto record = std::make_shared<wire::CheckpointRecord>();
  record->set_clock(clock);
  auto shared_waiters = std::make_shared<std::vector<std::shared_ptr<Request>>>(std::move(waiters));
  Broadcast(
      msg,
      [this, record, shared_waiters, answer, now, clock](const Status& s) {
        std::sort(record->mutable_shards()->begin(), record->mutable_shards()->end(),
                  [](const wire::ShardCheckpoint& a, const wire::ShardCheckpoint& b) {
                    return a.server() < b.server();
                  });
        Status result = s;
        if (result.ok() && record->shards_size() < options_.num_servers) {
          result = UnavailableError("only " + std::to_string(record->shards_size()) + " of " +
                                    std::to_string(options_.num_servers) +
                                    " servers wrote the checkpoint");
        }
        record->set_seconds((clock_->NowMs() - now) / 1000.0);
        record->set_unix_s(NowUnixMs() / 1000.0);
        if (result.ok()) {
          LOG(INFO) << "checkpoint at clock " << clock << " complete on "
                    << record->shards_size() << " server(s) in " << record->seconds() << " s";
        } else {
          LOG(ERROR) << "checkpoint at clock " << clock << " failed: " << result;
        }
        checkpoints_.Finish(result, *record, clock_->NowMs());
        metrics_.OnCheckpoint(result.ok(), record->seconds());
        answer(*shared_waiters, result.WithPrefix("checkpoint at clock " + std::to_string(clock)),
               result.ok() ? record.get() : nullptr);
        if (!queued_checkpoint_requests_.empty()) {
          std::vector<std::shared_ptr<Request>> next;
          next.swap(queued_checkpoint_requests_);
          StartCheckpoint(std::move(next));
        }
      },
      options_.checkpoint_timeout_ms,
      [record](int, const Message& reply) {
        if (reply.header.has_shard_checkpoint()) {
          *record->add_shards() = reply.header.shard_checkpoint();
        }
      });
}

void CoordinatorImpl::HandleStatus(const Request& req) {
  Message reply = MakeReply(req.msg.header, Status::OK());
  *reply.header.mutable_status_reply() = BuildStatus();
  rpc_->Reply(req, std::move(reply)).IgnoreError();
}

wire::StatusReply CoordinatorImpl::BuildStatus() const {
  const int64_t now = clock_->NowMs();
  wire::StatusReply status;
  wire::StatusReply* sr = &status;
  *sr->mutable_job() = job_;
  *sr->mutable_shard_map() = map_;
  for (const auto& [id, m] : members_.servers()) {
    wire::ServerState* s = sr->add_servers();
    s->mutable_info()->set_id(id);
    s->mutable_info()->set_endpoint(m.endpoint);
    s->mutable_info()->set_alive(m.alive);
    s->set_last_heartbeat_ms_ago(now - m.last_heartbeat_ms);
    s->set_pid(m.pid);
  }
  for (const auto& [id, m] : members_.workers()) {
    wire::WorkerState* w = sr->add_workers();
    w->set_id(id);
    w->set_clock(m.clock);
    w->set_alive(m.alive);
    w->set_last_heartbeat_ms_ago(now - m.last_heartbeat_ms);
  }
  sr->set_job_error(job_error_);
  sr->set_uptime_s((now - start_ms_) / 1000.0);
  if (checkpoints_.latest()) *sr->mutable_latest_checkpoint() = *checkpoints_.latest();
  for (const wire::CheckpointRecord& c : checkpoints_.history()) *sr->add_checkpoints() = c;
  sr->set_checkpoints_failed(checkpoints_.failed());
  return status;
}

}  // namespace

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  auto c = std::make_unique<CoordinatorImpl>(options);
  RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace relaxps
