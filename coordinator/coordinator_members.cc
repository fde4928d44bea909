// Registration, heartbeats, the live worker set and barriers.
#include "coordinator/internal/coordinator_impl.h"

#include <algorithm>

#include "common/member_token.h"

namespace relaxps {
namespace coordinator_internal {

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
    auto reg = registrations_.find(id);
    if (reg != registrations_.end()) {
      s->set_incarnation(reg->second.incarnation);
      if (reg->second.restored) *s->mutable_restored_from() = reg->second.restored_from;
    }
    recovery_->DescribeServer(id, s);
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
                     [this, shared, who](const Status& s, Message&&) {
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
  ListCoordinators(&reply.header);
  wire::RegisterReply* rr = reply.header.mutable_register_reply();
  *rr->mutable_job() = job_;
  if (r.role() == "server") {
    if (r.endpoint().empty()) {
      rpc_->ReplyStatus(req, InvalidArgumentError("server registration without endpoint"))
          .IgnoreError();
      return;
    }
    if (r.join()) {
      // A server the job was not started with (relaxps-server --join).
      Status refused;
      if (r.requested_id() >= 0) {
        refused = InvalidArgumentError("a joining server takes the next free id: no --server_id");
      } else if (members_.live_servers() < ExpectedServers()) {
        refused = FailedPreconditionError(
            "the job is still waiting for its " + std::to_string(options_.num_servers) +
            " server(s): start this one without --join");
      } else if (Status s = recovery_->AdmitRangeMoves(); !s.ok()) {
        refused = s.WithPrefix(std::string("recovery policy '") + policy_->Name() +
                               "' moves no ranges, so a joining server would hold nothing");
      }
      if (!refused.ok()) {
        rpc_->ReplyStatus(req, refused).IgnoreError();
        return;
      }
    }
    if (r.requested_id() >= options_.num_servers &&
        members_.servers().count(r.requested_id()) == 0) {
      rpc_->ReplyStatus(req, InvalidArgumentError(
                                 "server id " + std::to_string(r.requested_id()) +
                                 " is out of range: the job has " +
                                 std::to_string(options_.num_servers) + " server(s), ids 0.." +
                                 std::to_string(options_.num_servers - 1) +
                                 "; a server beyond them joins with --join and no --server_id"))
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
        rr->set_member_token(m.token);  // The same process: the same token.
        rr->set_coordinator_identity(identity_);
        rr->set_coordinator_term(leadership_.term());
        FillLiveWorkers(rr->mutable_live_workers());
        FillServerTokens(&reply.header);
        rr->set_awaits_seed(seeding_.count(id) > 0);  // Still waiting for its seed.
        *rr->mutable_shard_map() = map_;
        rpc_->Reply(req, std::move(reply)).IgnoreError();
        return;
      }
    }
    if (r.requested_id() < 0 && !r.join() && members_.live_servers() >= options_.num_servers) {
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
    // A joining server's id comes after every known one, and after the ids
    // of the job's first servers.
    const int requested =
        r.join() ? std::max(options_.num_servers,
                            members_.servers().empty() ? 0 : members_.servers().rbegin()->first + 1)
                 : r.requested_id();
    const int id = members_.AddServer(requested, r.endpoint(), r.pid(), now);
    // A new token: the previous instance's is revoked.
    const std::string token = NewMemberToken();
    members_.SetServerToken(id, token);
    if (options_.curve.enabled() && !server_keys_.count(id)) {
      // CheckRole bound the id to the sender's key, so this file exists.
      StatusOr<std::string> key =
          LoadPublicKey(options_.curve.keys_dir, "server-" + std::to_string(id));
      if (key.ok()) server_keys_[id] = *key;
    }
    server_peer_[id] = servers_rpc_->Connect(r.endpoint(), server_keys_[id]);
    // The map shows each registration (a restart) and what it restored.
    Registration& registration = registrations_[id];
    registration.incarnation = next_incarnation_++;
    registration.restored = r.has_restored_from();
    registration.restored_from = r.restored_from();
    recovery::ServerRegistration joining;
    joining.id = id;
    joining.replaces = replaces;
    joining.was_live = was_live;
    joining.has_tables = map_.tables_size() > 0;
    const recovery::RegistrationOutcome outcome = recovery_->OnServerRegistered(joining, *this);
    const bool seed = outcome.seed;
    if (seed) seeding_[id] = now;
    RebuildServerList();
    // Until it reports its state transfers done, it is no copy of those
    // chains (RemoveFromChains).
    if (outcome.joined_chains > 0) MarkSyncing(id);
    if (seed) {
      std::vector<int> workers;
      std::vector<int64_t> clocks;
      members_.LiveWorkers(&workers, &clocks);
      reseeder_.Begin(id, map_.version(), workers, now);
      rr->set_awaits_seed(true);
      LOG(INFO) << "server " << id << " replaces a lost one: asking " << workers.size()
                << " worker(s) for their copies of its ranges (map version " << map_.version()
                << ")";
      Emit("reseed_begun", {{"server", id},
                            {"workers", static_cast<int>(workers.size())},
                            {"map_version", map_.version()}});
    }
    LOG(INFO) << "server " << id << " registered at " << r.endpoint() << " (pid " << r.pid()
              << "); " << members_.live_servers() << "/" << options_.num_servers << " live";
    Emit("member_joined", {{"role", "server"},
                           {"id", id},
                           {"endpoint", r.endpoint()},
                           {"pid", r.pid()},
                           {"incarnation", registration.incarnation},
                           {"replaces", replaces},
                           {"restored_seq", registration.restored ? r.restored_from().seq() : 0},
                           {"restored_clock", registration.restored ? r.restored_from().clock() : -1},
                           {"live_servers", members_.live_servers()}});
    if (seed && id < map_.servers_size() && map_.servers(id).took_over_size() > 0) {
      // A spare seeded in place of stranded holders (the policy's takeover).
      const auto& holders = map_.servers(id).took_over();
      Emit("spare_takeover", {{"server", id},
                              {"holders", std::vector<int>(holders.begin(), holders.end())}});
    }
    rr->set_id(id);
    rr->set_member_token(token);
    rr->set_coordinator_identity(identity_);
    rr->set_coordinator_term(leadership_.term());
    FillLiveWorkers(rr->mutable_live_workers());
    FillServerTokens(&reply.header);
    *rr->mutable_shard_map() = map_;
    if (!Persist()) return;
    rpc_->Reply(req, std::move(reply)).IgnoreError();
    if (outcome.push_map) PushMap("server " + std::to_string(id) + " rejoined");
    if (r.join()) RebalanceJoined(id);
    return;
  }
  if (r.role() == "worker" && outcome_.done()) {
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
    // A new token, which servers learn with the live set below: a worker's
    // earlier registration's is revoked.
    const std::string token = NewMemberToken();
    members_.SetWorkerToken(id, token);
    LOG(INFO) << "worker " << id << " registered (pid " << r.pid() << ") at clock "
              << start_clock;
    Emit("member_joined", {{"role", "worker"},
                           {"id", id},
                           {"pid", r.pid()},
                           {"incarnation", next_incarnation_},
                           {"replaces", replaces},
                           {"clock", start_clock}});
    rr->set_id(id);
    rr->set_member_token(token);
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
  if (r.role() == "observer" || r.role() == "operator") {
    rr->set_id(-1);
    rr->set_member_token(OpenSession(r.role()));
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
  ListCoordinators(&reply.header);
  wire::HeartbeatReply* hr = reply.header.mutable_heartbeat_reply();
  bool known = true;
  if (hb.role() == "server") {
    known = members_.ServerHeartbeat(hb.id(), now);
    FillLiveWorkers(hr->mutable_live_workers());
    FillServerTokens(&reply.header);
    // A server adopts the identity of a newer term (a restarted or newly
    // elected coordinator) from here.
    hr->set_coordinator_identity(identity_);
    hr->set_coordinator_term(leadership_.term());
    // A drained server holds nothing any more: it leaves (DEREGISTER).
    if (known && Drained(hb.id())) hr->set_drained(true);
    auto syncing = syncing_.find(hb.id());
    if (known && syncing != syncing_.end() && hb.shard_map_version() >= syncing->second &&
        !hb.awaiting_state()) {
      LOG(INFO) << "server " << hb.id() << " holds the state of every chain it joined";
      syncing_.erase(syncing);
      ContinueChainMove();  // A chain move waits for its destination's state.
    }
  } else if (hb.role() == "worker") {
    known = members_.WorkerHeartbeat(hb.id(), hb.clock(), now, hb.incarnation(),
                                     hb.acked_updates());
    if (known && hb.finished() && members_.MarkWorkerFinished(hb.id(), hb.failure())) {
      if (hb.failure().empty()) {
        LOG(INFO) << "worker " << hb.id() << " finished at clock " << hb.clock();
      } else {
        LOG(WARNING) << "worker " << hb.id() << " failed at clock " << hb.clock() << ": "
                     << hb.failure();
      }
      EventFields fields = {{"role", "worker"},
                            {"id", hb.id()},
                            {"clock", hb.clock()},
                            {"incarnation", hb.incarnation()},
                            {"acked_updates", hb.acked_updates()}};
      if (!hb.failure().empty()) fields.push_back({"reason", hb.failure()});
      Emit(hb.failure().empty() ? "member_finished" : "member_failed", fields);
    }
    for (const wire::ReseedRequest& q : reseeder_.RequestsFor(hb.id())) *hr->add_reseed() = q;
    // A complete checkpoint newer than the worker knows (its clients may drop
    // what they keep for replaying into servers restarted from an older one).
    if (checkpoints_.latest() && checkpoints_.latest()->seq() > hb.checkpoint_seq()) {
      *hr->mutable_latest_checkpoint() = *checkpoints_.latest();
    }
  }
  if (!known && !outcome_.failed()) {
    StatusToProto(NotFoundError(hb.role() + " " + std::to_string(hb.id()) +
                                " is not a live member (declared dead?); re-register"),
                  reply.header.mutable_status());
  }
  hr->set_shard_map_version(map_.version());
  hr->set_job_error(outcome_.error());
  hr->set_job_done(outcome_.done());
  if (hb.shard_map_version() < map_.version()) *hr->mutable_shard_map() = map_;
  rpc_->Reply(req, std::move(reply)).IgnoreError();
}

void CoordinatorImpl::FillLiveWorkers(wire::LiveWorkers* lw) const {
  std::vector<int> ids;
  std::vector<int64_t> clocks;
  members_.LiveWorkers(&ids, &clocks);
  lw->set_version(members_.worker_set_version());
  for (size_t i = 0; i < ids.size(); ++i) {
    lw->add_ids(ids[i]);
    lw->add_clocks(clocks[i]);
    // Servers accept a worker's requests only with its token (never sent to
    // anyone but servers).
    lw->add_tokens(members_.workers().at(ids[i]).token);
  }
}

void CoordinatorImpl::FillServerTokens(wire::Header* h) const {
  wire::ServerTokens* st = h->mutable_server_tokens();
  st->set_map_version(map_.version());
  for (const auto& [id, m] : members_.servers()) {
    // A server declared dead (or that left) is no sender any more; its
    // restart registers with a new token.
    if (!m.alive || m.token.empty()) continue;
    st->add_ids(id);
    st->add_tokens(m.token);
  }
}

void CoordinatorImpl::BroadcastWorkerSet(std::function<void(const Status&)> done) {
  if (!Persist()) return;
  worker_set_waiting_.push_back(std::move(done));
  if (!worker_set_in_flight_) SendWorkerSet();
}

void CoordinatorImpl::SendWorkerSet() {
  auto waiting = std::make_shared<std::vector<std::function<void(const Status&)>>>();
  waiting->swap(worker_set_waiting_);
  Message msg;
  msg.header.set_type(wire::WORKER_SET);
  FillLiveWorkers(msg.header.mutable_live_workers());
  const uint64_t version = msg.header.live_workers().version();
  std::vector<int> ids(msg.header.live_workers().ids().begin(),
                       msg.header.live_workers().ids().end());
  worker_set_in_flight_ = true;
  Broadcast(msg, [this, waiting, version, ids = std::move(ids)](const Status& s) {
    worker_set_in_flight_ = false;
    if (version >= announced_version_) {
      announced_version_ = version;
      announced_workers_ = ids;
      barriers_.Update(announced_workers_, clock_->NowMs());
    }
    for (auto& done : *waiting) done(s);
    // What changed meanwhile was persisted by its BroadcastWorkerSet; a
    // coordinator deposed since announces nothing more.
    if (!worker_set_waiting_.empty() && leadership_.leading()) SendWorkerSet();
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

}  // namespace coordinator_internal
}  // namespace relaxps
