// Start-up, leadership, request dispatch, the end of the job and status.
#include "coordinator/internal/coordinator_impl.h"

#include <unistd.h>

#include <algorithm>
#include <random>

#include "common/advertise.h"
#include "consistency/consistency_policy.h"

namespace relaxps {

namespace {

recovery::CoordinatorJob JobShape(const CoordinatorOptions& o) {
  recovery::CoordinatorJob job;
  job.num_servers = o.num_servers;
  job.replicas = o.replicas;
  job.spare_takeover_ms = o.spare_takeover_ms;
  // Validate() refuses options the policy does not take.
  StatusOr<RecoveryOptionValues> options = ResolveRecoveryOptions(o.recovery, o.recovery_options);
  if (options.ok()) job.options = std::move(options).value();
  return job;
}

}  // namespace

Status CoordinatorOptions::Validate() const {
  if (num_servers < 1) return InvalidArgumentError("--num_servers must be >= 1");
  if (num_workers < 0) return InvalidArgumentError("--num_workers must be >= 0");
  if (start_barrier_timeout_ms < 1) {
    return InvalidArgumentError("--start_barrier_timeout_ms must be > 0");
  }
  ConsistencyOptions co{consistency, staleness};
  RETURN_IF_ERROR(NewConsistencyPolicy(co).status());
  RETURN_IF_ERROR(CheckRecoveryPolicyName(recovery));
  RETURN_IF_ERROR(ResolveRecoveryOptions(recovery, recovery_options).status());
  if (heartbeat_timeout_ms < 50) return InvalidArgumentError("--heartbeat_timeout_ms must be >= 50");
  if (checkpoint_every_clocks < 0 || checkpoint_every_s < 0) {
    return InvalidArgumentError("--checkpoint_every_clocks and --checkpoint_every_s must be >= 0");
  }
  if (checkpoint_timeout_ms < 1) return InvalidArgumentError("checkpoint_timeout_ms must be > 0");
  if (reseed_timeout_ms < 1) return InvalidArgumentError("--reseed_timeout_ms must be > 0");
  if (spare_takeover_ms < 0) return InvalidArgumentError("--spare_takeover_ms must be >= 0");
  {
    // The job's shape as the policy needs it (e.g. replicas for chains).
    ASSIGN_OR_RETURN(std::unique_ptr<RecoveryPolicy> policy, NewRecoveryPolicy(recovery));
    RETURN_IF_ERROR(policy->NewCoordinatorRecovery()->Configure(JobShape(*this)));
  }
  if (probe_timeout_ms < 1) return InvalidArgumentError("probe_timeout_ms must be > 0");
  if (takeover_probe_ms < 1) return InvalidArgumentError("--takeover_probe_ms must be > 0");
  if (max_workers < 0) return InvalidArgumentError("--max_workers must be >= 0");
  if (max_members < 1 || max_tables < 1) {
    return InvalidArgumentError("--max_members and --max_tables must be >= 1");
  }
  if (failed_exit_ms < 0 || done_grace_ms < 1) {
    return InvalidArgumentError("--failed_exit_ms must be >= 0 and done_grace_ms > 0");
  }
  if (!data_dir.empty() && !coordination.empty()) {
    return InvalidArgumentError("give --data_dir (a local RocksDB) or --coordination (ZooKeeper), "
                                "not both");
  }
  if (!coordination.empty()) {
    RETURN_IF_ERROR(ParseZkAddress(coordination).status());
    if (zk_session_timeout_ms < 100) {
      return InvalidArgumentError("--zk_session_timeout_ms must be >= 100");
    }
  }
  if (sparse_buckets < 0 || sparse_buckets > 65536) {
    return InvalidArgumentError("--sparse_buckets must be between 0 and 65536, got " +
                                std::to_string(sparse_buckets));
  }
  return Status::OK();
}

namespace coordinator_internal {

CheckpointSchedulerOptions CheckpointScheduleFor(const CoordinatorOptions& options) {
  recovery::CheckpointSchedule schedule{options.checkpoint_every_clocks,
                                        options.checkpoint_every_s};
  StatusOr<std::unique_ptr<RecoveryPolicy>> policy = NewRecoveryPolicy(options.recovery);
  if (policy.ok()) {
    std::unique_ptr<recovery::CoordinatorRecovery> role = (*policy)->NewCoordinatorRecovery();
    if (role->Configure(JobShape(options)).ok()) schedule = role->Checkpoints(schedule);
  }
  return CheckpointSchedulerOptions{schedule.every_clocks, schedule.every_s, 16};
}

Status CoordinatorImpl::Init() {
  ASSIGN_OR_RETURN(policy_, NewRecoveryPolicy(options_.recovery));
  recovery_ = policy_->NewCoordinatorRecovery();
  RETURN_IF_ERROR(recovery_->Configure(JobShape(options_)));
  RETURN_IF_ERROR(CheckSourceAddress(options_.source_address));
  RpcServerOptions ro;
  ro.bind = options_.bind;
  ro.clock = clock_;
  ro.max_message_bytes = options_.max_message_bytes;
  ro.curve = options_.curve;
  ASSIGN_OR_RETURN(rpc_, RpcServer::Bind(ro));
  if (StatusOr<std::string> a = AdvertisedEndpoint(rpc_->endpoint(), options_.advertise); a.ok()) {
    endpoint_ = *a;
  } else if (!options_.coordination.empty()) {
    return a.status();  // Standbys would send clients to an address they cannot reach.
  } else {
    endpoint_ = rpc_->endpoint();
  }
  {
    EventLogOptions eo;
    eo.path = options_.events_file;
    eo.process = "coordinator";
    eo.clock = clock_;
    // Every event also enters the ring relaxps-ctl events reads; held
    // GET_EVENTS requests are answered on the loop.
    eo.on_line = [this](const std::string& line) {
      ring_.Append(line);
      rpc_->Post([this] { AnswerEventWaiters(clock_->NowMs()); });
    };
    ASSIGN_OR_RETURN(events_, EventLog::Open(eo));
  }
  watchers_ = std::make_unique<MapWatchers>(rpc_.get());
  if (status_collector_) metrics_.AddStatusCollector(rpc_.get(), [this] { return BuildStatus(); });
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
  co.source_address = options_.source_address;
  RETURN_IF_ERROR(co.UseCurve(options_.curve));
  if (recovery_->ProbesClosedConnections()) {
    co.on_disconnect = [this](int peer) { rpc_->Post([this, peer] { OnDisconnect(peer); }); };
  }
  servers_rpc_ = std::make_unique<RpcClient>(co);
  // Real wall time: incarnations stay unique across coordinator restarts.
  next_incarnation_ = static_cast<uint64_t>(RealClock()->NowUnixMs()) * 1000;
  job_.set_consistency(ConsistencyModelName(options_.consistency));
  job_.set_staleness(options_.staleness);
  job_.set_recovery(policy_->Name());
  job_.set_num_servers(options_.num_servers);
  job_.set_num_workers(options_.num_workers);
  job_.set_start_barrier_timeout_ms(options_.start_barrier_timeout_ms);
  job_.set_heartbeat_timeout_ms(options_.heartbeat_timeout_ms);
  job_.set_replicas(recovery_->ReplicasPerRange());
  for (const auto& [flag, value] : JobShape(options_).options) {
    (*job_.mutable_recovery_options())[flag] = value;
  }
  map_.set_version(1);
  map_.set_epoch(1);
  rpc_->AddTimer(std::max(20, options_.heartbeat_timeout_ms / 5), [this] { CheckLiveness(); });
  rpc_->AddTimer(50, [this] { RetryMoveStep(); });
  start_ms_ = clock_->NowMs();
  LOG(INFO) << "coordinator on " << endpoint_ << " (bound " << rpc_->endpoint() << "): consistency "
            << ConsistencyModelName(options_.consistency) << " staleness bound "
            << StalenessBoundText({options_.consistency, options_.staleness})
            << " recovery " << policy_->Name() << ", waiting for " << options_.num_servers << " server(s)";
  const CheckpointSchedulerOptions schedule = CheckpointScheduleFor(options_);
  if (checkpoints_.enabled()) {
    LOG(INFO) << "coordinated checkpoints every " << schedule.every_clocks << " clocks / "
              << schedule.every_s << " s (0: off)";
  }
  Emit("coordinator_started", {{"endpoint", endpoint_},
                               {"consistency", ConsistencyModelName(options_.consistency)},
                               {"staleness", options_.staleness},
                               {"recovery", policy_->Name()},
                               {"num_servers", options_.num_servers},
                               {"num_workers", options_.num_workers},
                               {"checkpoint_every_clocks", schedule.every_clocks},
                               {"checkpoint_every_s", schedule.every_s},
                               {"pid", static_cast<int>(getpid())}});
  return OpenStore();
}

void CoordinatorImpl::Handle(Request req) {
  if (!leadership_.leading()) {
    // A standby (or a deposed leader standing by): Unavailable, and where
    // the leader is (common/coordinator_peers.h follows it). Its own
    // endpoint while it is taking over: the caller retries here.
    const std::string leader = leadership_.leader_endpoint();
    const bool elsewhere = !leader.empty() && leader != endpoint_;
    Message reply = MakeReply(
        req.msg.header,
        UnavailableError("coordinator " + endpoint_ + " is a standby, not the leader" +
                         (elsewhere ? "; the leader is " + leader
                                    : leader.empty() ? "; no coordinator leads yet"
                                                     : "; it is taking over")));
    if (elsewhere) reply.header.set_leader_endpoint(leader);
    ListCoordinators(&reply.header);
    rpc_->Reply(req, std::move(reply)).IgnoreError();
    return;
  }
  Dispatch(std::move(req));
  // Whatever the request changed is stored before anything else shows it.
  if (!Persist()) return;
  watchers_->Notify(map_);  // The request may have changed the map.
}

void CoordinatorImpl::Dispatch(Request req) {
  const wire::Header& h = req.msg.header;
  Status allowed = CheckRole(req);
  if (allowed.ok()) allowed = CheckToken(req);
  if (!allowed.ok()) {
    Refuse(req, allowed);
    return;
  }
  if (h.type() == wire::REGISTER && h.register_request().role() != "observer" &&
      members_.size() >= options_.max_members) {
    Refuse(req, FailedPreconditionError(
                    "the job lists " + std::to_string(members_.size()) +
                    " members, the most it admits (--max_members=" +
                    std::to_string(options_.max_members) + ")"));
    return;
  }
  if (h.type() == wire::SET_LEARNING_RATE || h.type() == wire::TRIGGER_CHECKPOINT) {
    if (Status s = control_limiter_.Take(req.identity, wire::MsgType_Name(h.type()),
                                         clock_->NowMs());
        !s.ok()) {
      Refuse(req, s);
      return;
    }
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
    case wire::GET_EVENTS:
      HandleGetEvents(std::move(req));
      return;
    case wire::ADD_SERVER:
      HandleAddServer(std::move(req));
      return;
    case wire::DRAIN_SERVER:
      HandleDrainServer(std::move(req));
      return;
    case wire::SHUTDOWN:
      EndJob("relaxps-ctl shutdown");
      if (!Persist()) return;
      rpc_->ReplyStatus(req, Status::OK()).IgnoreError();
      return;
    case wire::DEREGISTER: {
      if (h.heartbeat().role() == "server") {
        if (members_.MarkServerDead(h.heartbeat().id())) {
          LOG(INFO) << "server " << h.heartbeat().id() << " left";
          Emit("member_left", {{"role", "server"}, {"id", h.heartbeat().id()}});
          RebuildServerList();
        }
        if (!Persist()) return;
        rpc_->ReplyStatus(req, Status::OK()).IgnoreError();
        return;
      }
      members_.RemoveWorker(h.sender());
      members_.MarkWorkerFinished(h.sender());
      outcome_.WorkerLeft();
      LOG(INFO) << "worker " << h.sender() << " left";
      Emit("member_left", {{"role", "worker"}, {"id", h.sender()}});
      auto shared = std::make_shared<Request>(std::move(req));
      BroadcastWorkerSet([this, shared](const Status& s) {
        rpc_->ReplyStatus(*shared, s).IgnoreError();
      });
      return;
    }
    default:
      Refuse(req, InvalidArgumentError("unknown message type " + std::to_string(h.type())));
  }
}

void CoordinatorImpl::Refuse(const Request& req, const Status& why) {
  const std::string type = wire::MsgType_Name(req.msg.header.type());
  LOG_LIMITED(WARNING, rpc_->log_limiter(),
              (type.empty() ? std::string("message") : type) + "/" + StatusCodeName(why.code()))
      << "refused " << (type.empty() ? std::string("a message") : type) << ": " << why;
  rpc_->ReplyStatus(req, why).IgnoreError();
}

void CoordinatorImpl::EndJob(const std::string& why) {
  if (!outcome_.End(why, clock_->NowMs())) return;
  LOG(INFO) << "job over (" << why << "): workers finish their step and leave, then servers "
            << "flush and exit";
}

void CoordinatorImpl::MaybeExit(int64_t now) {
  std::vector<int> ids;
  std::vector<int64_t> clocks;
  members_.LiveWorkers(&ids, &clocks);
  switch (outcome_.ShouldExit(now, static_cast<int>(ids.size()), members_.live_servers())) {
    case JobOutcome::Exit::kStay:
      return;
    case JobOutcome::Exit::kFailed:
      LOG(ERROR) << "exiting: the job failed " << (now - outcome_.failed_at_ms())
                 << " ms ago: " << outcome_.error();
      outcome_.Abort("job failed: " + outcome_.error());
      break;
    case JobOutcome::Exit::kEveryoneLeft:
      LOG(INFO) << "exiting: the job is over and every process left";
      break;
    case JobOutcome::Exit::kGraceOver:
      LOG(WARNING) << "exiting: the job is over; " << ids.size() << " worker(s) and "
                   << members_.live_servers() << " server(s) did not leave within "
                   << outcome_.done_grace_ms() << " ms";
      break;
  }
  EndRunAndStop();
}

void CoordinatorImpl::FailJob(const std::string& reason) {
  if (!outcome_.Fail(reason, clock_->NowMs())) return;
  LOG(ERROR) << "job failed: " << reason;
  Emit("job_failed", {{"reason", reason}});
}

JobEndFacts CoordinatorImpl::EndFacts() const {
  JobEndFacts facts;
  facts.stepped_down = leadership_.stepped_down();
  facts.ever_led = leadership_.term() != 0;
  facts.ends_by_itself = options_.exit_when_done && options_.num_workers > 0;
  facts.lost_workers = members_.LostWorkers();
  facts.failed_workers = members_.FailedWorkers();
  std::vector<int> ids;
  std::vector<int64_t> clocks;
  members_.LiveWorkers(&ids, &clocks);
  facts.live_workers = static_cast<int>(ids.size());
  return facts;
}

void CoordinatorImpl::EndRunAndStop() {
  EndRun();
  // Followers (relaxps-ctl events --follow) get job_end before the loop stops.
  AnswerEventWaiters(clock_->NowMs());
  rpc_->Stop();
}

void CoordinatorImpl::EndRun() {
  if (!outcome_.Finish(EndFacts())) return;
  if (leadership_.rejoins()) return;  // The process stands by again: the job goes on.
  const JobEnd& end = outcome_.job_end();
  Emit("job_end", {{"verdict", end.verdict},
                   {"reason", end.reason},
                   {"exit_code", end.exit_code},
                   {"uptime_s", (clock_->NowMs() - start_ms_) / 1000.0}});
}

void CoordinatorImpl::HandleGetEvents(Request req) {
  followers_.Add(std::move(req), clock_->NowMs());
  AnswerEventWaiters(clock_->NowMs());
}

void CoordinatorImpl::AnswerEventWaiters(int64_t now) {
  for (EventFollowers::Due& due : followers_.TakeDue(ring_, now)) {
    Message reply = MakeReply(due.req->msg.header, Status::OK());
    wire::EventsReply* er = reply.header.mutable_events_reply();
    for (const std::string& line : due.slice.lines) er->add_lines(line);
    er->set_last_seq(due.slice.last_seq);
    er->set_missed(due.slice.missed);
    rpc_->Reply(*due.req, std::move(reply)).IgnoreError();
  }
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
    w->set_incarnation(m.incarnation);
    w->set_acked_updates(m.acked_updates);
  }
  sr->set_job_error(outcome_.error());
  sr->set_uptime_s((now - start_ms_) / 1000.0);
  if (checkpoints_.latest()) *sr->mutable_latest_checkpoint() = *checkpoints_.latest();
  for (const wire::CheckpointRecord& c : checkpoints_.history()) *sr->add_checkpoints() = c;
  sr->set_checkpoints_failed(checkpoints_.failed());
  return status;
}

}  // namespace coordinator_internal

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  // Under ZooKeeper a deposed coordinator stands by again instead of exiting.
  const bool rejoins = !options.coordination.empty();
  auto c = std::make_unique<coordinator_internal::CoordinatorImpl>(options, !rejoins);
  RETURN_IF_ERROR(c->Init());
  if (rejoins) {
    return coordinator_internal::RejoinWhenDeposed(options, std::move(c));
  }
  return std::unique_ptr<Coordinator>(std::move(c));
}

}  // namespace relaxps
