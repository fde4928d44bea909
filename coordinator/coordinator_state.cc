// Leadership and the durable state: opening the state store, the election,
// taking over from stored records, writing every change before it takes
// effect, and stepping down.
#include "coordinator/internal/coordinator_impl.h"

#include <algorithm>

namespace relaxps {
namespace coordinator_internal {
namespace {

constexpr char kJob[] = "job";
constexpr char kMap[] = "map";
constexpr char kMembers[] = "members";
constexpr char kRecovery[] = "recovery";
constexpr char kCheckpoints[] = "checkpoints";
constexpr char kMoves[] = "moves";

// The job's policy options, with the policy's defaults for those a job
// stored before the policy had them does not name.
RecoveryOptionValues StoredOptions(const wire::JobConfig& job) {
  RecoveryOptionValues given(job.recovery_options().begin(), job.recovery_options().end());
  StatusOr<RecoveryOptionValues> resolved = ResolveRecoveryOptions(job.recovery(), given);
  return resolved.ok() ? *resolved : given;
}

// " options checkpoint_mode=sync ..." ("" without options), for messages.
std::string DescribeOptions(const wire::JobConfig& job) {
  std::string out;
  for (const auto& [flag, value] :
       RecoveryOptionValues(job.recovery_options().begin(), job.recovery_options().end())) {
    out += (out.empty() ? " options " : " ") + flag + "=" + value;
  }
  return out;
}

template <typename Proto>
Status ParseRecord(const StateRecords& records, const char* name, Proto* out) {
  auto it = records.find(name);
  if (it == records.end()) return NotFoundError(name);
  if (!out->ParseFromString(it->second)) {
    return CorruptionError(std::string("coordinator state record '") + name + "' is corrupt");
  }
  return Status::OK();
}

}  // namespace

Status CoordinatorImpl::OpenStore() {
  if (!options_.coordination.empty()) {
    ASSIGN_OR_RETURN(ZkAddress address, ParseZkAddress(options_.coordination));
    ZkSessionOptions zo;
    zo.hosts = address.hosts;
    zo.session_timeout_ms = options_.zk_session_timeout_ms;
    ASSIGN_OR_RETURN(zk_, ZkSession::Connect(zo));
    ASSIGN_OR_RETURN(store_, NewZkStateStore(zk_.get(), address.path));
    zk_->OnEvent([this](ZkEvent e) { rpc_->Post([this, e] { OnZkEvent(e); }); });
    LOG(INFO) << "coordinator " << endpoint() << ": ZooKeeper " << address.hosts << " session "
              << zk_->session_timeout_ms() << " ms, job " << address.path
              << "; standby until elected";
    ASSIGN_OR_RETURN(election_, LeaderElection::Start(zk_.get(), address.path, endpoint_, [this] {
                       rpc_->Post([this] {
                         Status s = TakeOver();
                         // A stored job this coordinator's flags do not
                         // match, or a corrupt record: no use trying again.
                         const bool config = s.code() == StatusCode::kFailedPrecondition ||
                                             s.code() == StatusCode::kCorruption ||
                                             s.code() == StatusCode::kInvalidArgument;
                         if (!s.ok()) StepDown("taking over: " + s.ToString(), !config);
                       });
                     }));
    return Status::OK();
  }
  if (!options_.data_dir.empty()) {
    ASSIGN_OR_RETURN(store_, NewRocksDbStateStore(options_.data_dir, options_.file_system));
  } else {
    store_ = NewMemoryStateStore();
  }
  return TakeOver();
}

Status CoordinatorImpl::TakeOver() {
  if (stepped_down_) return Status::OK();
  const int64_t since = clock_->NowMs();
  ASSIGN_OR_RETURN(ClaimedState claimed, store_->Claim());
  term_ = claimed.term;
  RETURN_IF_ERROR(Restore(claimed.records));
  written_ = claimed.records;
  leading_.store(true);
  if (!Persist()) {
    // result_ names why (the store's error, e.g. a full disk).
    return AbortedError("the first write of the coordinator state failed: " +
                        result_.ToString());
  }
  LOG(INFO) << "LEADER coordinator " << endpoint() << " serves the job from " << store_->Name()
            << " (term " << term_ << ", map version " << map_.version() << ", epoch "
            << map_.epoch() << ", " << members_.live_servers() << " live server(s), "
            << announced_workers_.size() << " live worker(s)) after loading for "
            << (clock_->NowMs() - since) << " ms";
  // HA takeover: a term > 1 resumed a job another coordinator (or an
  // earlier run of this one) served.
  // A move the previous leader ran is run again (each step is idempotent
  // on the servers); one it had published is dropped.
  rpc_->Post([this] { RunNextMove(); });
  Emit("leader_elected", {{"endpoint", endpoint()},
                          {"term", term_},
                          {"store", store_->Name()},
                          {"resumed", term_ > 1},
                          {"map_version", map_.version()},
                          {"epoch", map_.epoch()},
                          {"live_servers", members_.live_servers()},
                          {"load_ms", clock_->NowMs() - since}});
  return Status::OK();
}

void CoordinatorImpl::StepDown(const std::string& why, bool rejoin) {
  if (stepped_down_) return;
  stepped_down_ = true;
  rejoin_ = rejoin && !options_.coordination.empty() && !stop_requested_.load();
  leading_.store(false);
  LOG(ERROR) << "STEPDOWN coordinator " << endpoint() << " stops serving: " << why
             << (rejoin_ ? " (it stands by again)" : "");
  Emit("leader_stepped_down", {{"endpoint", endpoint()}, {"term", term_}, {"reason", why}});
  result_ = AbortedError("coordinator stepped down: " + why);
  EndRunAndStop();
}

void CoordinatorImpl::OnZkEvent(ZkEvent e) {
  if (e == ZkEvent::kExpired) {
    StepDown("its ZooKeeper session expired", /*rejoin=*/true);
  } else if (e == ZkEvent::kDisconnected && leading_.load()) {
    // Another coordinator may lead once the session expires: stop serving
    // at once. But the session (and with it this leader's election node,
    // which keeps every other candidate from leading) may well survive a
    // short disconnection: stepping down here would hand the job to a
    // standby and make a second term out of one takeover. So it only
    // pauses, and resumes the same term if it reconnects within its
    // session; if the session expired instead, kExpired steps it down.
    suspended_ = true;
    leading_.store(false);
    LOG(WARNING) << "coordinator " << endpoint() << " lost its ZooKeeper connection: it stops "
                 << "serving until it reconnects within its session (term " << term_ << ")";
  } else if (e == ZkEvent::kReconnected && suspended_ && !stepped_down_) {
    suspended_ = false;
    // Members could not reach it meanwhile: none is dead for that.
    members_.ForgiveSilence(clock_->NowMs());
    leading_.store(true);
    LOG(WARNING) << "coordinator " << endpoint() << " reconnected to ZooKeeper within its "
                 << "session: it serves again (term " << term_ << ", no takeover)";
  }
}

bool CoordinatorImpl::Persist() {
  if (!leading_.load()) return false;
  StateRecords changed;
  for (auto& [name, value] : Snapshot()) {
    auto it = written_.find(name);
    if (it == written_.end() || it->second != value) changed[name] = std::move(value);
  }
  if (changed.empty()) return true;
  if (Status s = store_->Write(changed); !s.ok()) {
    // Under ZooKeeper a failed write means another coordinator claimed the
    // store, or ZooKeeper is away: this one stands by again.
    StepDown("writing the coordinator state: " + s.ToString(), /*rejoin=*/true);
    return false;
  }
  for (auto& [name, value] : changed) written_[name] = std::move(value);
  return true;
}

StateRecords CoordinatorImpl::Snapshot() const {
  StateRecords r;
  wire::StoredJob job;
  *job.mutable_job() = job_;
  job.set_next_incarnation(next_incarnation_);
  job.set_job_error(job_error_);
  job.set_job_done(job_done_);
  job.SerializeToString(&r[kJob]);
  map_.SerializeToString(&r[kMap]);
  wire::StoredMembership m;
  for (const auto& [id, info] : members_.servers()) {
    wire::StoredMember* s = m.add_servers();
    s->set_id(id);
    s->set_endpoint(info.endpoint);
    s->set_pid(info.pid);
    s->set_alive(info.alive);
    s->set_token(info.token);
  }
  for (const auto& [id, info] : members_.workers()) {
    wire::StoredMember* w = m.add_workers();
    w->set_id(id);
    w->set_pid(info.pid);
    w->set_alive(info.alive);
    w->set_token(info.token);
    w->set_finished(info.finished);
    w->set_failure(info.failure);
  }
  m.set_worker_set_version(members_.worker_set_version());
  m.set_workers_left(workers_left_);
  m.SerializeToString(&r[kMembers]);
  wire::StoredRecovery rec;
  recovery_->SaveState(&rec);
  for (const auto& [id, version] : syncing_) {
    rec.add_syncing_ids(id);
    rec.add_syncing_versions(version);
  }
  for (const auto& [id, since] : seeding_) rec.add_seeding(id);
  rec.SerializeToString(&r[kRecovery]);
  wire::StoredCheckpoints cps;
  for (const wire::CheckpointRecord& c : checkpoints_.history()) *cps.add_history() = c;
  cps.set_failed(checkpoints_.failed());
  cps.SerializeToString(&r[kCheckpoints]);
  wire::StoredMoves moves;
  for (const wire::RangeMove& m : moves_) *moves.add_queue() = m;
  moves.set_next_id(next_move_id_);
  for (int id : draining_) moves.add_draining(id);
  moves.SerializeToString(&r[kMoves]);
  return r;
}

Status CoordinatorImpl::Restore(const StateRecords& records) {
  if (records.empty()) return Status::OK();  // A new job.
  const int64_t now = clock_->NowMs();
  wire::StoredJob job;
  RETURN_IF_ERROR(ParseRecord(records, kJob, &job));
  const wire::JobConfig& j = job.job();
  if (j.consistency() != job_.consistency() || j.staleness() != job_.staleness() ||
      j.recovery() != job_.recovery() || j.num_servers() != job_.num_servers() ||
      j.replicas() != job_.replicas() || StoredOptions(j) != StoredOptions(job_)) {
    return FailedPreconditionError(
        "the stored job (" + store_->Name() + ") has consistency " + j.consistency() +
        " staleness " + std::to_string(j.staleness()) + " recovery " + j.recovery() +
        " num_servers " + std::to_string(j.num_servers()) + " replicas " +
        std::to_string(j.replicas()) + DescribeOptions(j) +
        "; this coordinator was started with consistency " +
        job_.consistency() + " staleness " + std::to_string(job_.staleness()) + " recovery " +
        job_.recovery() + " num_servers " + std::to_string(job_.num_servers()) + " replicas " +
        std::to_string(job_.replicas()) + DescribeOptions(job_) +
        ": give it the job's flags (or a new --data_dir / PATH)");
  }
  next_incarnation_ = std::max(next_incarnation_, job.next_incarnation());
  if (!job.job_error().empty()) {
    job_error_ = job.job_error();
    failed_at_ms_ = now;
  }
  if (job.job_done()) {
    job_done_ = true;
    done_at_ms_ = now;
  }
  RETURN_IF_ERROR(ParseRecord(records, kMap, &map_));
  for (const wire::ServerInfo& s : map_.servers()) {
    Registration& registration = registrations_[s.id()];
    registration.incarnation = s.incarnation();
    registration.restored = s.has_restored_from();
    registration.restored_from = s.restored_from();
  }
  wire::StoredMembership m;
  RETURN_IF_ERROR(ParseRecord(records, kMembers, &m));
  // Members get a heartbeat timeout of grace on top: they are looking for
  // the new coordinator.
  const int64_t seen = now + options_.heartbeat_timeout_ms;
  for (const wire::StoredMember& s : m.servers()) {
    members_.AddServer(s.id(), s.endpoint(), s.pid(), seen);
    members_.SetServerToken(s.id(), s.token());
    if (!s.alive()) members_.MarkServerDead(s.id());
    if (options_.curve.enabled()) {
      StatusOr<std::string> key =
          LoadPublicKey(options_.curve.keys_dir, "server-" + std::to_string(s.id()));
      if (key.ok()) server_keys_[s.id()] = *key;
    }
    server_peer_[s.id()] = servers_rpc_->Connect(s.endpoint(), server_keys_[s.id()]);
  }
  for (const wire::StoredMember& w : m.workers()) {
    members_.AddWorker(w.id(), 0, w.pid(), seen);
    members_.SetWorkerToken(w.id(), w.token());
    if (!w.alive()) members_.RemoveWorker(w.id());
    if (w.finished()) members_.MarkWorkerFinished(w.id(), w.failure());
  }
  // One ahead of what servers saw: the next live set supersedes theirs.
  members_.set_worker_set_version(m.worker_set_version() + 1);
  workers_left_ = m.workers_left();
  wire::StoredRecovery rec;
  RETURN_IF_ERROR(ParseRecord(records, kRecovery, &rec));
  recovery_->RestoreState(rec, now);
  for (int i = 0; i < rec.syncing_ids_size() && i < rec.syncing_versions_size(); ++i) {
    syncing_[rec.syncing_ids(i)] = rec.syncing_versions(i);
  }
  std::vector<int> workers;
  std::vector<int64_t> clocks;
  members_.LiveWorkers(&workers, &clocks);
  for (int id : rec.seeding()) {
    // The re-seed in flight is started again: the workers send their copies anew.
    seeding_[id] = now;
    reseeder_.Begin(id, map_.version(), workers, now);
  }
  wire::StoredCheckpoints cps;
  RETURN_IF_ERROR(ParseRecord(records, kCheckpoints, &cps));
  checkpoints_.Restore({cps.history().begin(), cps.history().end()}, cps.failed());
  for (const wire::CheckpointRecord& c : cps.history()) {
    next_checkpoint_seq_ = std::max(next_checkpoint_seq_, c.seq() + 1);
  }
  if (records.count(kMoves) > 0) {  // Absent in the state of an older build.
    wire::StoredMoves moves;
    RETURN_IF_ERROR(ParseRecord(records, kMoves, &moves));
    moves_.assign(moves.queue().begin(), moves.queue().end());
    next_move_id_ = std::max(next_move_id_, moves.next_id());
    draining_.insert(moves.draining().begin(), moves.draining().end());
  }
  announced_workers_ = workers;
  announced_version_ = members_.worker_set_version();
  barriers_.Update(announced_workers_, now);
  LOG(INFO) << "resumed from " << store_->Name() << ": " << map_.tables_size() << " table(s), "
            << members_.servers().size() << " server(s) and " << members_.workers().size()
            << " worker(s) known" << (job_error_.empty() ? "" : ", the job had failed: " + job_error_);
  return Status::OK();
}

}  // namespace coordinator_internal
}  // namespace relaxps
