// CoordinatorImpl: range moves to a server that joined the running job
// (docs/elastic.md): the plan (range_plan.h), one move at a time, each
// published once the destination holds the range, and kept in the durable
// state (record "moves") so that a coordinator that takes over finishes it.
// Loop thread.

#include <algorithm>

#include "common/member_token.h"
#include "coordinator/internal/coordinator_impl.h"
#include "coordinator/range_plan.h"

namespace relaxps {
namespace coordinator_internal {

namespace {
// A step refused by a server that has not adopted this coordinator yet goes
// again this much later (the server learns of it from a heartbeat reply).
constexpr int64_t kAdoptionRetryMs = 100;
}  // namespace

EventFields CoordinatorImpl::MoveFields(const wire::RangeMove& m) {
  return {{"table", m.table()},
          {"begin", m.begin()},
          {"end", m.end()},
          {"source", m.source()},
          {"destination", m.destination()}};
}

bool CoordinatorImpl::MarkMoveRunning(wire::RangeMove* m,
                                      const std::string& destination_endpoint) {
  if (m->token().empty()) m->set_token(NewMemberToken());
  m->set_destination_endpoint(destination_endpoint);
  const bool resumed = m->started();
  m->set_started(true);
  move_running_ = true;
  move_started_ms_ = clock_->NowMs();
  return resumed;
}

void CoordinatorImpl::EmitMoveStarted(const wire::RangeMove& m, bool resumed) {
  EventFields fields = MoveFields(m);
  fields.push_back({"resumed", resumed});
  Emit("range_move_started", fields);
}

std::set<int> CoordinatorImpl::ServingServers() const {
  std::set<int> serving;
  for (const auto& [id, m] : members_.servers()) {
    if (m.alive && seeding_.count(id) == 0) serving.insert(id);
  }
  return serving;
}

Status CoordinatorImpl::MovesAdmitted(int server) const {
  if (Status s = recovery_->AdmitRangeMoves(); !s.ok()) {
    return s.WithPrefix(std::string("recovery policy '") + policy_->Name() + "' moves no ranges");
  }
  if (ServingServers().count(server) == 0) {
    return NotFoundError("server " + std::to_string(server) + " is not a live server of the job");
  }
  if (!moves_.empty()) {
    return FailedPreconditionError(std::to_string(moves_.size()) +
                                   " range move(s) are still to run; ask again once they are done");
  }
  return Status::OK();
}

StatusOr<std::vector<wire::RangeMove>> CoordinatorImpl::PlanMoves(int dest) {
  RETURN_IF_ERROR(MovesAdmitted(dest));
  std::vector<wire::RangeMove> plan = PlanMovesTo(map_, dest, ServingServers());
  for (wire::RangeMove& m : plan) {
    m.set_id(next_move_id_++);
    moves_.push_back(m);
  }
  return plan;
}

void CoordinatorImpl::RunNextMove() {
  while (!move_running_ && !moves_.empty() && leadership_.leading() && !outcome_.failed() &&
         !outcome_.done()) {
    wire::RangeMove& m = moves_.front();
    if (MoveApplied(map_, m)) {  // Published before a takeover.
      moves_.pop_front();
      if (!Persist()) return;
      continue;
    }
    if (IsChainMove(map_, m)) {  // One replica of a chain (coordinator_chain_moves.cc).
      StartChainMove();
      return;
    }
    wire::ShardMap check = map_;
    Status s = ApplyMove(&check, m);
    const auto src = members_.servers().find(m.source());
    const auto dst = members_.servers().find(m.destination());
    if (s.ok() && (src == members_.servers().end() || !src->second.alive)) {
      s = UnavailableError("the source server is not live");
    }
    if (s.ok() && (dst == members_.servers().end() || !dst->second.alive)) {
      s = UnavailableError("the destination server is not live");
    }
    if (!s.ok()) {
      FailMoves(m, s);
      return;
    }
    const bool resumed = MarkMoveRunning(&m, dst->second.endpoint);
    if (!Persist()) return;
    LOG(INFO) << "range move " << m.id() << ": keys [" << m.begin() << ", " << m.end()
              << ") of table '" << m.table() << "' from server " << m.source() << " to server "
              << m.destination() << (resumed ? " (resumed)" : "");
    EmitMoveStarted(m, resumed);
    SendMoveStep(m, /*incoming=*/true, kMoveSourceAttempts);
    return;
  }
}

void CoordinatorImpl::SendMoveStep(const wire::RangeMove& m, bool incoming, int attempts_left) {
  Message msg;
  msg.header.set_type(wire::MOVE_RANGE);
  *msg.header.mutable_range_move() = m;
  msg.header.mutable_range_move()->set_incoming(incoming);
  const int server = incoming ? m.destination() : m.source();
  // The source waits for its range to drain, then sends it: room for both.
  const int timeout_ms = incoming ? 5000 : options_.move_timeout_ms;
  const uint64_t id = m.id();
  servers_rpc_->Call(server_peer_[server], std::move(msg), timeout_ms,
                     [this, id, incoming, attempts_left](const Status& st, Message&& reply) {
                       Status s = st.ok() ? StatusFromProto(reply.header.status()) : st;
                       rpc_->Post([this, id, incoming, attempts_left, s] {
                         OnMoveStep(id, incoming, attempts_left, s);
                       });
                     });
}

void CoordinatorImpl::OnMoveStep(uint64_t id, bool incoming, int attempts_left, const Status& s) {
  if (!move_running_ || moves_.empty() || moves_.front().id() != id) return;  // Stale.
  const wire::RangeMove m = moves_.front();
  if (s.code() == StatusCode::kPermissionDenied &&
      clock_->NowMs() - move_started_ms_ < options_.move_timeout_ms) {
    // After a takeover the servers accept control messages only from this
    // coordinator's connection once a heartbeat reply told them of it: the
    // step goes again a little later (each step is idempotent on them).
    LOG(INFO) << "range move " << id << ": the " << (incoming ? "destination" : "source")
              << " does not know this coordinator yet (" << s << "); asking again shortly";
    move_step_retry_ = MoveStepRetry{id, incoming, attempts_left, clock_->NowMs() + kAdoptionRetryMs};
    return;
  }
  if (!incoming && IsChainMove(map_, m)) {
    // The source left its chain, or was lost and spliced out by the policy.
    const std::vector<int> chain = ChainOf(map_, m);
    if (s.ok() || std::find(chain.begin(), chain.end(), m.source()) == chain.end()) {
      FinishChainMove();
      return;
    }
  }
  if (!s.ok()) {
    const bool retry = (s.code() == StatusCode::kDeadlineExceeded ||
                        s.code() == StatusCode::kUnavailable) &&
                       attempts_left > 1;
    const auto server = members_.servers().find(incoming ? m.destination() : m.source());
    if (retry && server != members_.servers().end() && server->second.alive) {
      LOG(WARNING) << "range move " << id << ": " << (incoming ? "destination" : "source")
                   << " step: " << s << "; asking again";
      SendMoveStep(m, incoming, attempts_left - 1);
      return;
    }
    move_running_ = false;
    FailMoves(m, s.WithPrefix(incoming ? "the destination refused" : "the source failed"));
    return;
  }
  if (incoming) {
    SendMoveStep(m, /*incoming=*/false, kMoveSourceAttempts);
    return;
  }
  // The destination holds the range: publish it.
  Status applied = ApplyMove(&map_, m);
  move_running_ = false;
  if (!applied.ok()) {  // The map changed under the move (never expected).
    FailMoves(m, applied);
    return;
  }
  moves_.pop_front();
  RebuildServerList();
  PublishMap("range move " + std::to_string(id));
  EventFields fields = MoveFields(m);
  fields.push_back({"map_version", map_.version()});
  fields.push_back({"ms", clock_->NowMs() - move_started_ms_});
  Emit("range_move_done", fields);
  LOG(INFO) << "range move " << id << " done in " << (clock_->NowMs() - move_started_ms_)
            << " ms: map version " << map_.version();
  RunNextMove();
}

void CoordinatorImpl::RetryMoveStep() {
  if (!move_step_retry_ || clock_->NowMs() < move_step_retry_->due_ms) return;
  const MoveStepRetry r = *move_step_retry_;
  move_step_retry_.reset();
  if (!leadership_.leading() || !move_running_ || moves_.empty() || moves_.front().id() != r.id) {
    return;  // Stale.
  }
  SendMoveStep(moves_.front(), r.incoming, r.attempts_left);
}

void CoordinatorImpl::RevokeMove(const wire::RangeMove& m, const Status& why) {
  const auto peer = server_peer_.find(m.destination());
  if (peer == server_peer_.end() || m.token().empty()) return;
  Message msg;
  msg.header.set_type(wire::MOVE_RANGE);
  *msg.header.mutable_range_move() = m;
  msg.header.mutable_range_move()->set_incoming(true);
  StatusToProto(why.ok() ? AbortedError("the move failed") : why, msg.header.mutable_status());
  servers_rpc_->Call(peer->second, std::move(msg), 5000, [](const Status&, Message&&) {});
}

void CoordinatorImpl::FailMoves(const wire::RangeMove& m, const Status& why) {
  if (IsChainMove(map_, m)) {
    RetractChainMove(m);
  } else if (m.started()) {
    RevokeMove(m, why);
  }
  LOG(WARNING) << "range move " << m.id() << " (keys [" << m.begin() << ", " << m.end()
               << ") of table '" << m.table() << "' from server " << m.source() << " to "
               << m.destination() << ") failed: " << why << "; the map is unchanged and the "
               << (moves_.size() - 1) << " move(s) planned after it are dropped";
  EventFields fields = MoveFields(m);
  fields.push_back({"reason", why.ToString()});
  Emit("range_move_failed", fields);
  moves_.clear();
  // A failed write steps this coordinator down; its successor finds the
  // queue and fails the move again (the servers answer its steps the same).
  (void)Persist();
}

void CoordinatorImpl::HandleAddServer(Request req) {
  const wire::Header& h = req.msg.header;
  const int dest = h.has_range_move() ? h.range_move().destination() : -1;
  StatusOr<std::vector<wire::RangeMove>> plan = PlanMoves(dest);
  if (!plan.ok()) {
    rpc_->ReplyStatus(req, plan.status()).IgnoreError();
    return;
  }
  if (!Persist()) return;
  Message reply = MakeReply(h, Status::OK());
  for (const wire::RangeMove& m : *plan) *reply.header.mutable_range_plan()->add_moves() = m;
  rpc_->Reply(req, std::move(reply)).IgnoreError();
  LOG(INFO) << "relaxps-ctl add-server " << dest << ": " << plan->size() << " range move(s)";
  RunNextMove();
}

void CoordinatorImpl::HandleDrainServer(Request req) {
  const wire::Header& h = req.msg.header;
  const int source = h.has_range_move() ? h.range_move().source() : -1;
  const Status s = MovesAdmitted(source);
  std::set<int> serving = ServingServers();
  // Servers being drained take nothing.
  for (int d : draining_) serving.erase(d);
  serving.insert(source);
  StatusOr<std::vector<wire::RangeMove>> plan =
      s.ok() ? PlanMovesFrom(map_, source, serving) : StatusOr<std::vector<wire::RangeMove>>(s);
  if (!plan.ok()) {
    rpc_->ReplyStatus(req, plan.status()).IgnoreError();
    return;
  }
  for (wire::RangeMove& m : *plan) {
    m.set_id(next_move_id_++);
    moves_.push_back(m);
  }
  draining_.insert(source);
  if (!Persist()) return;
  Message reply = MakeReply(h, Status::OK());
  for (const wire::RangeMove& m : *plan) *reply.header.mutable_range_plan()->add_moves() = m;
  rpc_->Reply(req, std::move(reply)).IgnoreError();
  LOG(INFO) << "relaxps-ctl drain-server " << source << ": " << plan->size()
            << " range move(s); the server leaves once it holds nothing";
  RunNextMove();
}

bool CoordinatorImpl::Drained(int server) const {
  if (draining_.count(server) == 0 || HoldsAnything(map_, server)) return false;
  for (const wire::RangeMove& m : moves_) {
    if (m.source() == server || m.destination() == server) return false;
  }
  return true;
}

std::vector<int> CoordinatorImpl::PlacementServers() const {
  std::vector<int> ids;
  for (const auto& [id, m] : members_.servers()) {
    if (draining_.count(id) > 0) continue;
    if (id < options_.num_servers || m.alive) ids.push_back(id);
  }
  return ids;  // Sorted: servers() is a map.
}

int CoordinatorImpl::ExpectedServers() const {
  int drained = 0;
  for (int id : draining_) drained += Drained(id) ? 1 : 0;
  return std::max(1, options_.num_servers - drained);
}

int CoordinatorImpl::CheckpointServers() const {
  int holders = 0;
  for (const auto& [id, m] : members_.servers()) holders += HoldsAnything(map_, id) ? 1 : 0;
  return std::max(holders, ExpectedServers());
}

void CoordinatorImpl::RebalanceJoined(int dest) {
  StatusOr<std::vector<wire::RangeMove>> plan = PlanMoves(dest);
  if (!plan.ok()) {
    LOG(WARNING) << "no range moves to joined server " << dest << ": " << plan.status();
    return;
  }
  LOG(INFO) << "server " << dest << " joined: " << plan->size() << " range move(s) planned";
  if (!Persist()) return;
  RunNextMove();
}

}  // namespace coordinator_internal
}  // namespace relaxps
