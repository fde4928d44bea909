// Registration, heartbeats, coordinator calls and table metadata of the
// client; the data path is client/internal/requests.cc.
#include "client/client.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "client/internal/client_impl.h"
#include "client/testing.h"
#include "common/advertise.h"
#include "common/fault_injecting_transport.h"
#include "common/rpc_client.h"

namespace relaxps {

// ---- Future adapters (shared by every implementation) ------------------------

namespace {

std::pair<Client::Callback, std::future<Status>> MakePromise() {
  auto p = std::make_shared<std::promise<Status>>();
  std::future<Status> f = p->get_future();
  return {[p](const Status& s) { p->set_value(s); }, std::move(f)};
}

std::pair<Client::ParamsCallback, std::future<StatusOr<FloatBuffer>>> MakeParamsPromise() {
  auto p = std::make_shared<std::promise<StatusOr<FloatBuffer>>>();
  std::future<StatusOr<FloatBuffer>> f = p->get_future();
  return {[p](const Status& s, FloatBuffer params) {
            if (s.ok()) {
              p->set_value(std::move(params));
            } else {
              p->set_value(s);
            }
          },
          std::move(f)};
}

// Longest wait for the coordinator's answer to a goodbye at shutdown.
constexpr int kDeregisterTimeoutMs = 300;
// How long the coordinator holds a map watch before answering it unchanged.
constexpr int kMapWatchMs = 10000;

// client_registered (nothing without a log).
void EmitRegistered(EventLog* events, const ClientOptions& options, const JobInfo& job,
                    uint64_t incarnation, int64_t clock, bool again) {
  EmitEvent(events, "client_registered",
            {{"role", options.role},
             {"worker", job.worker_id},
             {"incarnation", incarnation},
             {"clock", clock},
             {"coordinator", options.coordinator},
             {"recovery", job.recovery},
             {"again", again}});
}

// "tcp://host:port" or "ipc://path": refused at once rather than after the
// registration timeout.
Status ValidateEndpoint(const std::string& endpoint) {
  const std::string why = "coordinator endpoint '" + endpoint + "' is not ";
  if (endpoint.rfind("ipc://", 0) == 0 && endpoint.size() > 6) return Status::OK();
  if (endpoint.rfind("tcp://", 0) != 0) {
    return InvalidArgumentError(why + "tcp://host:port (or ipc://path)");
  }
  const size_t colon = endpoint.rfind(':');
  const std::string port = colon == std::string::npos ? "" : endpoint.substr(colon + 1);
  if (colon <= 6 || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) == 0 ||
      std::stoi(port) > 65535) {
    return InvalidArgumentError(why + "tcp://host:port with a port in 1..65535");
  }
  return Status::OK();
}

}  // namespace

std::future<Status> Client::Push(const std::string& table, uint64_t offset, FloatBuffer grads) {
  auto [cb, f] = MakePromise();
  Push(table, offset, std::move(grads), std::move(cb));
  return std::move(f);
}

std::future<Status> Client::Pull(const std::string& table, uint64_t offset, FloatBuffer out) {
  auto [cb, f] = MakePromise();
  Pull(table, offset, std::move(out), std::move(cb));
  return std::move(f);
}

std::future<Status> Client::PushPull(const std::string& table, uint64_t offset,
                                     FloatBuffer grads, FloatBuffer out) {
  auto [cb, f] = MakePromise();
  PushPull(table, offset, std::move(grads), std::move(out), std::move(cb));
  return std::move(f);
}

std::future<StatusOr<FloatBuffer>> Client::PullZeroCopy(const std::string& table,
                                                        uint64_t offset, size_t n) {
  auto [cb, f] = MakeParamsPromise();
  PullZeroCopy(table, offset, n, std::move(cb));
  return std::move(f);
}

std::future<StatusOr<FloatBuffer>> Client::PushPullZeroCopy(const std::string& table,
                                                            uint64_t offset, FloatBuffer grads) {
  auto [cb, f] = MakeParamsPromise();
  PushPullZeroCopy(table, offset, std::move(grads), std::move(cb));
  return std::move(f);
}

std::future<Status> Client::PullRows(const std::string& table, KeyBuffer ids, FloatBuffer out) {
  auto [cb, f] = MakePromise();
  PullRows(table, std::move(ids), std::move(out), std::move(cb));
  return std::move(f);
}

std::future<Status> Client::PushRows(const std::string& table, KeyBuffer ids,
                                     FloatBuffer grads) {
  auto [cb, f] = MakePromise();
  PushRows(table, std::move(ids), std::move(grads), std::move(cb));
  return std::move(f);
}

namespace client_internal {

StatusOr<Message> ClientImpl::CallCoordinator(Message msg, bool retry_unavailable) {
  const int64_t give_up = clock_source_->NowMs() + options_.request_timeout_ms;
  while (true) {
    Message attempt;
    attempt.header = msg.header;
    StampToken(&attempt.header);
    const int64_t left = std::max<int64_t>(100, give_up - clock_source_->NowMs());
    // A standby's redirect, or a dead or leaderless coordinator with others
    // known, moves to another one (`next`): ask it.
    bool next = false;
    StatusOr<Message> reply = coordinators_.CallSync(
        std::move(attempt), static_cast<int>(std::min<int64_t>(left, 2000)), &next);
    const StatusCode code = reply.status().code();
    const bool retry = code == StatusCode::kDeadlineExceeded || next ||
                       (retry_unavailable && code == StatusCode::kUnavailable);
    if (!retry || clock_source_->NowMs() >= give_up) {
      if (reply.ok()) return reply;
      return reply.status().WithPrefix("coordinator " + options_.coordinator);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(clock_source_->RealWaitMs(50)));
  }
}

Status ClientImpl::Init() {
  ASSIGN_OR_RETURN(std::vector<std::string> coordinators,
                   CoordinatorPeers::Split(options_.coordinator));
  for (const std::string& e : coordinators) RETURN_IF_ERROR(ValidateEndpoint(e));
  RETURN_IF_ERROR(CheckSourceAddress(options_.source_address));
  if (options_.role != "worker" && options_.role != "observer" && options_.role != "operator") {
    return InvalidArgumentError("role must be worker, observer or operator");
  }
  if (options_.wire_dtype == "fp16") {
    encoding_ = wire::ENC_FP16;
  } else if (options_.wire_dtype != "fp32") {
    return InvalidArgumentError("wire_dtype must be fp32 or fp16, got '" + options_.wire_dtype + "'");
  }
  if (options_.request_timeout_ms <= 0 || options_.heartbeat_ms <= 0 ||
      options_.recovery_timeout_ms <= 0 || options_.barrier_timeout_ms <= 0 ||
      options_.coordinator_timeout_ms <= 0) {
    return InvalidArgumentError(
        "request_timeout_ms, heartbeat_ms, recovery_timeout_ms, barrier_timeout_ms and "
        "coordinator_timeout_ms must be positive");
  }
  RpcClientOptions ro;
  ro.default_timeout_ms = options_.request_timeout_ms;
  ro.clock = clock_source_;
  ro.max_message_bytes = options_.max_message_bytes;
  ro.source_address = options_.source_address;
  if (options_.curve.enabled() && options_.role == "worker" && options_.worker_id < 0) {
    return InvalidArgumentError("--security=curve needs --worker_id (the id of the worker's key)");
  }
  RETURN_IF_ERROR(ro.UseCurve(options_.curve));
  // The policy is known only after registering: the hook ignores
  // disconnects until Init() enabled it.
  ro.on_disconnect = [this](int peer) {
    if (local_on_disconnect_.load()) fallback_->OnDisconnect(peer);
  };
  rpc_ = std::make_unique<RpcClient>(ro);
  if (faults_.any()) rpc_ = FaultInjectingTransport::Wrap(std::move(rpc_), faults_);
  RETURN_IF_ERROR(coordinators_.Connect(rpc_.get(), options_.coordinator));
  router_ = std::make_unique<client_internal::Router>(rpc_.get());

  ASSIGN_OR_RETURN(Message reply,
                   CallCoordinator(RegisterMessage(options_.worker_id), true));
  const wire::RegisterReply& rr = reply.header.register_reply();
  job_.worker_id = rr.id();
  ASSIGN_OR_RETURN(job_.consistency, ParseConsistencyModel(rr.job().consistency()));
  job_.staleness = rr.job().staleness();
  job_.recovery = rr.job().recovery();
  ASSIGN_OR_RETURN(consistency_, NewConsistencyPolicy({job_.consistency, job_.staleness}));
  // The bound workers actually get: BSP is SSP with staleness 0.
  if (job_.consistency == ConsistencyModel::kBsp) job_.staleness = 0;
  ASSIGN_OR_RETURN(recovery_, NewRecoveryPolicy(job_.recovery));
  recovery::ClientRecoveryOptions role_options;
  role_options.worker = options_.role == "worker";
  role_options.request_timeout_ms = options_.request_timeout_ms;
  role_options.heartbeat_ms = options_.heartbeat_ms;
  role_options.local_after_ms = options_.local_after_ms;
  role_options.update_log_bytes = options_.update_log_bytes;
  role_options.policy_options = RecoveryOptionValues(rr.job().recovery_options().begin(),
                                                     rr.job().recovery_options().end());
  role_ = recovery_->NewClientRecovery(role_options);
  CHECK(role_ != nullptr) << "recovery policy " << recovery_->Name() << " made no client role";
  features_ = role_->features();
  job_.num_servers = rr.job().num_servers();
  job_.expected_workers = rr.job().num_workers();
  incarnation_ = rr.incarnation();
  set_member_token(rr.member_token());
  barrier_generation_.store(rr.barrier_generation());
  clock_.store(rr.start_clock());
  resender_ = std::make_unique<client_internal::Resender>(clock_source_,
                                                          options_.recovery_timeout_ms);
  gate_ = std::make_unique<client_internal::ServerGate>(features_.hold_restarted_servers);
  client_internal::PartSender::Options po;
  po.worker_id = job_.worker_id;
  po.request_timeout_ms = options_.request_timeout_ms;
  po.features = features_;
  po.events = options_.events.get();
  parts_ = std::make_unique<client_internal::PartSender>(
      po, rpc_.get(), router_.get(), resender_.get(), gate_.get(), role_.get(), consistency_.get(),
      static_cast<client_internal::PartSender::Host*>(this), clock_source_);
  if (options_.ssp_cache && consistency_->ServesCachedReads()) {
    cache_ = std::make_unique<client_internal::SspCache>(consistency_->staleness_bound());
  }
  if (features_.local_copies) {
    client_internal::LocalFallback::Options fo;
    fo.chain_routing = features_.chain_routing;
    fo.disconnect_probe_ms = options_.disconnect_probe_ms;
    fo.stalled_probe_ms = options_.local_after_ms;
    fo.events = options_.events.get();
    ASSIGN_OR_RETURN(fallback_,
                     client_internal::LocalFallback::New(this, router_.get(), rpc_.get(), fo));
  }
  client_internal::DataPath::Options dpo;
  dpo.dense_split_bytes = options_.dense_split_bytes;
  dpo.dense_part_bytes = options_.dense_part_bytes;
  dpo.pull_rows_split = options_.pull_rows_split;
  dpo.pull_rows_part = options_.pull_rows_part;
  dpo.features = features_;
  dpo.encoding = encoding_;
  data_path_ = std::make_unique<client_internal::DataPath>(
      dpo, router_.get(), parts_.get(), role_.get(), cache_.get(), fallback_.get(),
      static_cast<client_internal::DataPath::Host*>(this));
  role_->Attach(this);
  RETURN_IF_ERROR(SetMap(rr.shard_map()));
  if (EventLog* events = options_.events.get(); events != nullptr) {
    if (events->process().empty()) {
      events->set_process(options_.role == "worker" ? "worker-" + std::to_string(job_.worker_id)
                                                    : options_.role);
    }
    EmitRegistered(events, options_, job_, incarnation_, rr.start_clock(), /*again=*/false);
  }
  local_on_disconnect_.store(fallback_ != nullptr && features_.probe_on_disconnect);
  if (options_.role == "worker") {
    session_.Start(options_.heartbeat_ms, [this] { Heartbeat(); });
  }
  role_->OnStarted();  // E.g. arms a map watch (before the start barrier).
  // The start barrier (BSP/SSP with --num_workers): held by the
  // coordinator until the job's workers are live; a no-op otherwise.
  if (options_.role == "worker" && job_.expected_workers > 0 &&
      job_.consistency != ConsistencyModel::kAsync) {
    RETURN_IF_ERROR(WaitAtBarrier(true, 0, rr.job().start_barrier_timeout_ms()));
  }
  return Status::OK();
}

Message ClientImpl::RegisterMessage(int requested_id) const {
  Message reg;
  reg.header.set_type(wire::REGISTER);
  wire::RegisterRequest* r = reg.header.mutable_register_request();
  r->set_role(options_.role);
  r->set_requested_id(requested_id);
  r->set_pid(getpid());
  r->set_protocol_version(kProtocolVersion);
  return reg;
}

Status ClientImpl::RegisterAgain(const std::string& why) {
  StatusOr<Message> reply =
      coordinators_.CallSync(RegisterMessage(job_.worker_id),
                             std::max(1000, options_.heartbeat_ms * 5));
  if (!reply.ok()) {
    if (session_.ShouldLog()) {
      LOG(WARNING) << "worker " << job_.worker_id << " could not register again (" << why
                   << "): " << reply.status();
    }
    return reply.status();
  }
  set_member_token(reply->header.register_reply().member_token());  // The old one is revoked.
  LOG(WARNING) << "worker " << job_.worker_id << " registered again with its id at clock "
               << clock_.load() << " (the coordinator said: " << why << ")";
  EmitRegistered(options_.events.get(), options_, job_, incarnation_, clock_.load(),
                 /*again=*/true);
  session_.Registered();
  return Status::OK();
}

Status ClientImpl::WaitAtBarrier(bool start, int64_t generation, int timeout_ms) {
  Message m;
  m.header.set_type(wire::BARRIER);
  m.header.set_sender(job_.worker_id);
  StampToken(&m.header);
  wire::BarrierRequest* b = m.header.mutable_barrier();
  b->set_start(start);
  b->set_generation(generation);
  b->set_timeout_ms(std::max(1, timeout_ms));
  // The coordinator answers at its timeout with who is missing; the
  // client's own deadline is a little later, for a coordinator that is gone.
  constexpr int kGraceMs = 5000;
  StatusOr<Message> reply = coordinators_.CallSync(std::move(m), std::max(1, timeout_ms) + kGraceMs);
  if (!reply.ok()) return reply.status().WithPrefix("coordinator " + options_.coordinator);
  return Status::OK();
}

Status ClientImpl::Barrier() {
  RETURN_IF_ERROR(JobError());
  if (options_.role != "worker") return InvalidArgumentError("Barrier() is for workers only");
  const int64_t generation = barrier_generation_.fetch_add(1);
  return WaitAtBarrier(false, generation, options_.barrier_timeout_ms);
}

void ClientImpl::WatchMap() {
  if (shutting_down_.load() || !session_.BeginMapWatch()) return;
  Message watch;
  watch.header.set_type(wire::GET_SHARD_MAP);
  watch.header.set_sender(job_.worker_id);
  StampToken(&watch.header);
  watch.header.set_shard_map_version(router_->map()->version());
  watch.header.set_watch_ms(kMapWatchMs);
  coordinators_.Call(std::move(watch), kMapWatchMs + 5000,
             [this](const Status& st, Message&& reply) {
               session_.EndMapWatch();
               if (shutting_down_.load() || !st.ok()) return;  // The heartbeat re-arms it.
               if (reply.header.has_shard_map()) {
                 Status s = SetMap(reply.header.shard_map());
                 if (!s.ok()) LOG(ERROR) << "bad shard map from coordinator: " << s;
               }
               WatchMap();
             });
}

ClientImpl::~ClientImpl() {
  // Prompt even when the servers and the coordinator are gone: nothing here
  // waits for a deadline. In-flight requests (a heartbeat included) fail
  // with Aborted now, parked ones too, and the goodbye is sent only to a
  // coordinator that answered the last heartbeat, bounded by a short wait.
  shutting_down_.store(true);
  if (rpc_ != nullptr) rpc_->CancelAll(AbortedError("client is shutting down"));
  // Parts waiting to be sent again after a ResourceExhausted refusal: failed
  // now, before the transport (they use it) and the data path (their
  // callbacks) go.
  if (parts_ != nullptr) parts_->StopResends();
  if (resender_ != nullptr) resender_->FailExpired(AbortedError("client is shutting down"));
  if (gate_ != nullptr) {
    for (client_internal::ServerGate::Held& h : gate_->TakeAll()) {
      h.done(AbortedError("client is shutting down"), Message());
    }
  }
  if (session_.started()) {
    session_.Stop();
    if (session_.healthy()) {
      Message bye;
      bye.header.set_type(wire::DEREGISTER);
      bye.header.set_sender(job_.worker_id);
      StampToken(&bye.header);
      coordinators_.CallSync(std::move(bye), kDeregisterTimeoutMs)
          .status()
          .IgnoreError();
    }
  }
  rpc_.reset();  // Fails anything sent meanwhile with Aborted.
}

namespace {

// A worker's HEARTBEAT (ReportFinished sets `finished` on one).
Message WorkerHeartbeat(int worker, const std::string& token, int64_t clock, uint64_t map_version,
                        uint64_t incarnation, uint64_t acked_updates) {
  Message hb = MemberMessage(wire::HEARTBEAT, "worker", worker, token);
  wire::HeartbeatRequest* h = hb.header.mutable_heartbeat();
  h->set_clock(clock);
  h->set_shard_map_version(map_version);
  h->set_incarnation(incarnation);
  h->set_acked_updates(acked_updates);
  return hb;
}

// client_server_lost / client_server_back for each server whose liveness
// differs between two maps. A server alive in both at different endpoints died
// and came back between them (the client missed the map that showed it dead):
// it gets both events, lost with the old endpoint, then back with the new.
void EmitServerChanges(EventLog* events, int worker, const ShardMap& before,
                       const ShardMap& after) {
  if (events == nullptr) return;
  auto emit = [&](const char* kind, int server, const std::string& endpoint) {
    events->Emit(kind, {{"worker", worker},
                        {"server", server},
                        {"endpoint", endpoint},
                        {"map_version", after.version()},
                        {"epoch", after.proto().epoch()}});
  };
  for (int i = 0; i < after.num_servers() && i < before.num_servers(); ++i) {
    const bool was = before.proto().servers(i).alive();
    const bool is = after.proto().servers(i).alive();
    const bool restarted =
        was && is && before.server_endpoint(i) != after.server_endpoint(i);
    if (was && (!is || restarted)) emit("client_server_lost", i, before.server_endpoint(i));
    if (is && (!was || restarted)) emit("client_server_back", i, after.server_endpoint(i));
  }
}

}  // namespace

Status ClientImpl::SetMap(const wire::ShardMap& proto) {
  const std::shared_ptr<const ShardMap> before = router_->map();
  ASSIGN_OR_RETURN(std::vector<client_internal::Router::Moved> moved,
                   router_->Install(proto, /*cancel_dead=*/features_.chain_routing));
  std::shared_ptr<const ShardMap> current = router_->map();
  if (before != nullptr && current != before) {
    EmitServerChanges(options_.events.get(), job_.worker_id, *before, *current);
  }
  // A server's first endpoint is open at the gate; a restarted server's new
  // one waits for the role's ReleaseServer.
  if (gate_->enabled()) {
    for (int i = 0; i < current->num_servers(); ++i) {
      for (client_internal::ServerGate::Held& h : gate_->OpenIfNew(i, current->server_endpoint(i))) {
        parts_->Send(h.server, std::move(h.make), std::move(h.done), h.give_up_ms);
      }
    }
  }
  // Requests still waiting on a dead server's old endpoint fail now (and are
  // resent by PartSender::Send) instead of at their deadlines.
  std::vector<int> restarted;
  for (const client_internal::Router::Moved& m : moved) {
    const std::string why = "server " + std::to_string(m.server) + " moved to " + m.endpoint;
    LOG(INFO) << why << "; resending what it had not answered";
    rpc_->CancelPeer(m.old_peer, UnavailableError(why));
    if (m.restarted) restarted.push_back(m.server);
  }
  // A worker's copies of dense ranges follow the moves of this map.
  if (fallback_ != nullptr && before != nullptr && current != before) {
    const int followed = fallback_->FollowMoves(*current);
    if (followed > 0) VLOG(1) << followed << " local copies follow moved ranges";
  }
  // Parts parked for a server whose keys the map moved away (a drained
  // server that left before this worker had the map) are routed again.
  for (client_internal::Resender::Parked& p : resender_->TakeMoved(
           [this](const client_internal::Resender::Parked& p) {
             return parts_->MovedAway(p.make(), p.server);
           })) {
    parts_->FailMoved(p.server, p.done);
  }
  for (client_internal::Resender::Parked& p : resender_->TakeRestarted(*current)) {
    parts_->Send(p.server, std::move(p.make), std::move(p.done), p.give_up_ms, p.past_gate);
  }
  role_->OnMapInstalled(*router_->map(), restarted);
  return Status::OK();
}

Status ClientImpl::ReportFinished(const Status& outcome, int timeout_ms) {
  if (options_.role != "worker") return InvalidArgumentError("ReportFinished() is for workers only");
  if (!coordinator_healthy()) {
    return UnavailableError("not reporting the end: the coordinator is not answering or the job "
                            "failed");
  }
  const int64_t give_up = clock_source_->NowMs() + std::max(1, timeout_ms);
  Status last;
  while (true) {
    Message hb = WorkerHeartbeat(job_.worker_id, member_token(), clock_.load(),
                                 router_->map()->version(), incarnation_, parts_->acked_updates());
    hb.header.mutable_heartbeat()->set_finished(true);
    if (!outcome.ok()) hb.header.mutable_heartbeat()->set_failure(outcome.ToString());
    const int64_t left = give_up - clock_source_->NowMs();
    StatusOr<Message> reply =
        coordinators_.CallSync(std::move(hb), static_cast<int>(std::clamp<int64_t>(left, 1, 1000)));
    // Answered (even "not a live member": a worker declared dead cannot
    // finish any more) or out of time.
    if (reply.ok() || reply.status().code() == StatusCode::kNotFound) return reply.status();
    last = reply.status();
    if (clock_source_->NowMs() >= give_up) return last.WithPrefix("reporting the end to the coordinator");
    std::this_thread::sleep_for(std::chrono::milliseconds(clock_source_->RealWaitMs(50)));
  }
}

void ClientImpl::SetJobError(const std::string& reason) {
  {
    MutexLock l(&mu_);
    if (!job_error_.empty()) return;
    job_error_ = reason;
    has_job_error_.store(true);
  }
  LOG(ERROR) << "job failed: " << reason;
  // Requests waiting on a dead server would otherwise wait for their
  // deadlines; fail them now.
  rpc_->CancelAll(AbortedError("job failed: " + reason));
}

Status ClientImpl::JobError() const {
  if (!has_job_error_.load()) return Status::OK();
  MutexLock l(&mu_);
  return job_error_.empty() ? Status::OK() : AbortedError("job failed: " + job_error_);
}

void ClientImpl::Heartbeat() {
  if (shutting_down_.load()) return;
  resender_->FailExpired(JobError());
  role_->OnHeartbeat();
  Message hb = WorkerHeartbeat(job_.worker_id, member_token(), clock_.load(),
                               router_->map()->version(), incarnation_, parts_->acked_updates());
  // The coordinator announces a newer complete checkpoint only (the role
  // hears of it in OnHeartbeatReply).
  hb.header.mutable_heartbeat()->set_checkpoint_seq(session_.checkpoint_seq());
  StatusOr<Message> reply =
      coordinators_.CallSync(std::move(hb), std::max(500, options_.heartbeat_ms * 5));
  if (!reply.ok()) {
    if (shutting_down_.load()) return;  // Cancelled by the destructor.
    if (reply.status().code() == StatusCode::kNotFound && options_.role == "worker" &&
        RegisterAgain(reply.status().message()).ok()) {
      return;
    }
    const client_internal::MemberSession::Silence silence = session_.Failed();
    if (silence.lost) SetJobError(silence.why);
    if (silence.log) LOG(WARNING) << "heartbeat to coordinator failed: " << reply.status();
    return;
  }
  const wire::HeartbeatReply& hr = reply->header.heartbeat_reply();
  const client_internal::MemberSession::News news = session_.Answered(hr);
  if (!hr.job_error().empty()) SetJobError(hr.job_error());
  if (news.job_done) {
    LOG(INFO) << "the coordinator ended the job: finishing the current step";
    if (options_.on_job_done) options_.on_job_done();
  }
  if (hr.has_shard_map()) {
    Status s = SetMap(hr.shard_map());
    if (!s.ok()) LOG(ERROR) << "bad shard map from coordinator: " << s;
  }
  role_->OnHeartbeatReply(hr);
}

void ClientImpl::RetryParkedBefore(int64_t ms) {
  for (client_internal::Resender::Parked& p : resender_->TakeParkedBefore(ms)) {
    parts_->Send(p.server, std::move(p.make), std::move(p.done), p.give_up_ms, p.past_gate);
  }
}

void ClientImpl::ReleaseServer(int server) {
  std::string endpoint;
  if (router_->Peer(server, &endpoint) < 0) return;
  for (client_internal::ServerGate::Held& h : gate_->Release(server, endpoint)) {
    parts_->Send(h.server, std::move(h.make), std::move(h.done), h.give_up_ms);
  }
}

Status ClientImpl::CreateTable(const TableOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  Message m;
  m.header.set_type(wire::CREATE_TABLE);
  m.header.set_sender(job_.worker_id);
  TableToProto(options, m.header.mutable_create_table());
  ASSIGN_OR_RETURN(Message reply, CallCoordinator(std::move(m), true));
  return SetMap(reply.header.shard_map());
}

Status ClientImpl::SetLearningRate(const std::string& table, float lr) {
  if (!(lr > 0) || !std::isfinite(lr)) {
    return InvalidArgumentError("learning rate must be positive and finite");
  }
  Message m;
  m.header.set_type(wire::SET_LEARNING_RATE);
  m.header.set_sender(job_.worker_id);
  m.header.set_table(table);
  m.header.mutable_lr_change()->set_from_clock(clock_.load());
  m.header.mutable_lr_change()->set_lr(lr);
  ASSIGN_OR_RETURN(Message reply, CallCoordinator(std::move(m), true));
  return SetMap(reply.header.shard_map());
}

StatusOr<std::vector<TableInfo>> ClientImpl::ListTables() {
  Message m;
  m.header.set_type(wire::GET_SHARD_MAP);
  ASSIGN_OR_RETURN(Message reply, CallCoordinator(std::move(m), false));
  RETURN_IF_ERROR(SetMap(reply.header.shard_map()));
  std::vector<TableInfo> out;
  for (const wire::TableShards& ts : reply.header.shard_map().tables()) {
    out.push_back(TableInfo{TableFromProto(ts.table())});
  }
  return out;
}

StatusOr<TableInfo> ClientImpl::GetTable(const std::string& name) {
  if (const wire::TableShards* ts = router_->map()->FindTable(name)) {
    return TableInfo{TableFromProto(ts->table())};
  }
  ASSIGN_OR_RETURN(auto tables, ListTables());
  for (const TableInfo& t : tables) {
    if (t.options.name == name) return t;
  }
  return NotFoundError("unknown table '" + name + "'");
}

ClientStats ClientImpl::stats() const {
  TransportStats r = rpc_->stats();
  ClientStats s;
  s.bytes_sent = r.bytes_sent;
  s.bytes_received = r.bytes_received;
  s.requests = r.requests;
  s.errors = errors_.load();
  s.replies_handed_over = data_path_ != nullptr ? data_path_->replies_handed_over() : 0;
  s.replies_read_by_caller = r.replies_read_by_caller;
  if (cache_ != nullptr) {
    s.cache_hits = cache_->hits();
    s.cache_misses = cache_->misses();
  }
  if (fallback_ != nullptr) s.local_steps = fallback_->local_steps();
  s.acked_updates = parts_->acked_updates();
  s.incarnation = incarnation_;
  role_->AddCounters(&s.recovery_counters);
  return s;
}

}  // namespace client_internal

StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  return ConnectWithFaults(options, FaultOptions{});
}

StatusOr<std::unique_ptr<Client>> ConnectWithFaults(const ClientOptions& options,
                                                    const FaultOptions& faults) {
  auto c = std::make_unique<client_internal::ClientImpl>(options, faults);
  RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Client>(std::move(c));
}

std::string MemberTokenOf(const Client& client) {
  const auto* impl = dynamic_cast<const client_internal::ClientImpl*>(&client);
  return impl != nullptr ? impl->member_token() : std::string();
}

}  // namespace relaxps
