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
  RETURN_IF_ERROR(leadership_.Open(
      options_, endpoint_,
      [this] {
        rpc_->Post([this] {
          Status s = TakeOver();
          // A stored job this coordinator's flags do not match, or a
          // corrupt record: no use trying again.
          const bool config = s.code() == StatusCode::kFailedPrecondition ||
                              s.code() == StatusCode::kCorruption ||
                              s.code() == StatusCode::kInvalidArgument;
          if (!s.ok()) StepDown("taking over: " + s.ToString(), !config);
        });
      },
      [this](ZkEvent e) { rpc_->Post([this, e] { OnZkEvent(e); }); }));
  // Without coordination there is no election: it leads at once.
  return leadership_.coordinated() ? Status::OK() : TakeOver();
}

Status CoordinatorImpl::TakeOver() {
  if (leadership_.stepped_down()) return Status::OK();
  const int64_t since = clock_->NowMs();
  ASSIGN_OR_RETURN(StateRecords records, leadership_.Claim());
  RETURN_IF_ERROR(Restore(records));
  leadership_.Lead(std::move(records));
  if (!Persist()) {
    // The result names why (the store's error, e.g. a full disk).
    return AbortedError("the first write of the coordinator state failed: " +
                        outcome_.result().ToString());
  }
  const uint64_t term = leadership_.term();
  LOG(INFO) << "LEADER coordinator " << endpoint() << " serves the job from "
            << leadership_.store_name() << " (term " << term << ", map version "
            << map_.version() << ", epoch " << map_.epoch() << ", " << members_.live_servers()
            << " live server(s), " << announced_workers_.size() << " live worker(s)) after loading for "
            << (clock_->NowMs() - since) << " ms";
  // HA takeover: a term > 1 resumed a job another coordinator (or an
  // earlier run of this one) served.
  // A move the previous leader ran is run again (each step is idempotent
  // on the servers); one it had published is dropped.
  rpc_->Post([this] { RunNextMove(); });
  Emit("leader_elected", {{"endpoint", endpoint()},
                          {"term", term},
                          {"store", leadership_.store_name()},
                          {"resumed", term > 1},
                          {"map_version", map_.version()},
                          {"epoch", map_.epoch()},
                          {"live_servers", members_.live_servers()},
                          {"load_ms", clock_->NowMs() - since}});
  return Status::OK();
}

void CoordinatorImpl::StepDown(const std::string& why, bool rejoin) {
  if (!leadership_.StepDown(rejoin && !stop_requested_.load())) return;
  LOG(ERROR) << "STEPDOWN coordinator " << endpoint() << " stops serving: " << why
             << (leadership_.rejoins() ? " (it stands by again)" : "");
  Emit("leader_stepped_down",
       {{"endpoint", endpoint()}, {"term", leadership_.term()}, {"reason", why}});
  outcome_.Abort("coordinator stepped down: " + why);
  EndRunAndStop();
}

void CoordinatorImpl::OnZkEvent(ZkEvent e) {
  switch (leadership_.OnZkEvent(e)) {
    case Leadership::ZkChange::kExpired:
      StepDown("its ZooKeeper session expired", /*rejoin=*/true);
      return;
    case Leadership::ZkChange::kSuspended:
      LOG(WARNING) << "coordinator " << endpoint() << " lost its ZooKeeper connection: it stops "
                   << "serving until it reconnects within its session (term "
                   << leadership_.term() << ")";
      return;
    case Leadership::ZkChange::kResumed:
      // Members could not reach it meanwhile: none is dead for that.
      members_.ForgiveSilence(clock_->NowMs());
      LOG(WARNING) << "coordinator " << endpoint() << " reconnected to ZooKeeper within its "
                   << "session: it serves again (term " << leadership_.term() << ", no takeover)";
      return;
    case Leadership::ZkChange::kNone:
      return;
  }
}

bool CoordinatorImpl::Persist() {
  if (!leadership_.leading()) return false;
  if (Status s = leadership_.Write(Snapshot()); !s.ok()) {
    // Under ZooKeeper a failed write means another coordinator claimed the
    // store, or ZooKeeper is away: this one stands by again.
    StepDown("writing the coordinator state: " + s.ToString(), /*rejoin=*/true);
    return false;
  }
  return true;
}

StateRecords CoordinatorImpl::Snapshot() const {
  StateRecords r;
  wire::StoredJob job;
  *job.mutable_job() = job_;
  job.set_next_incarnation(next_incarnation_);
  job.set_job_error(outcome_.error());
  job.set_job_done(outcome_.done());
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
  m.set_workers_left(outcome_.workers_left());
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
        "the stored job (" + leadership_.store_name() + ") has consistency " + j.consistency() +
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
  outcome_.Resume(job.job_done(), job.job_error(), m.workers_left(), now);
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
  LOG(INFO) << "resumed from " << leadership_.store_name() << ": " << map_.tables_size() << " table(s), "
            << members_.servers().size() << " server(s) and " << members_.workers().size()
            << " worker(s) known" << (outcome_.failed() ? ", the job had failed: " + outcome_.error() : "");
  return Status::OK();
}

}  // namespace coordinator_internal
}  // namespace relaxps
