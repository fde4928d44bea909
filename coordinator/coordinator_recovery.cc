// Failure detection, the mechanisms the recovery policy's hooks drive
// (recovery/coordinator_recovery.h), re-seeds and checkpoints.
#include "coordinator/internal/coordinator_impl.h"

#include <algorithm>

#include "common/buffer_pool.h"

namespace relaxps {
namespace coordinator_internal {

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
    if (summary.seed_worker < 0) {
      recovery::SeedReport report;
      report.server = server;
      report.changes_only = summary.changes_only;
      report.buckets = summary.buckets;
      report.source = summary.source;
      const int counted = fallbacks_counted_;
      recovery_->OnSeedWithoutWorkerCopy(&report, *this);
      summary.source = report.source;
      if (fallbacks_counted_ > counted) {
        Emit("fallback", {{"server", server},
                          {"cause", "no-worker-copy"},
                          {"source", report.source},
                          {"epoch", map_.epoch()}});
      }
    }
    auto peer = server_peer_.find(server);
    if (peer == server_peer_.end()) continue;
    const int64_t registered = seeding_.count(server) ? seeding_[server] : clock_->NowMs();
    auto shared_summary = std::make_shared<ReseedSummary>(summary);
    servers_rpc_->Call(
        peer->second, std::move(seed).value(), 10000,
        [this, server, registered, shared_summary](const Status& s, Message&&) {
          rpc_->Post([this, server, registered, shared_summary, s] {
            if (!s.ok()) {
              // The new server died too: the next one to register is seeded.
              LOG(WARNING) << "seeding server " << server << " failed: " << s;
              return;
            }
            seeding_.erase(server);
            RebuildServerList();
            if (!Persist()) return;
            metrics_.OnRecoveryDone("reseed", (clock_->NowMs() - registered) / 1000.0);
            LOG(INFO) << "RESEED " << shared_summary->ToString() << " seconds="
                      << (clock_->NowMs() - registered) / 1000.0 << " map_version="
                      << map_.version();
            Emit("reseed_done", {{"server", server},
                                 {"source", shared_summary->source},
                                 {"summary", shared_summary->ToString()},
                                 {"seconds", (clock_->NowMs() - registered) / 1000.0},
                                 {"map_version", map_.version()}});
            recovery_->OnServerSeeded(server, *this);
          });
        });
  }
}

void CoordinatorImpl::CheckLiveness() {
  const int64_t now = clock_->NowMs();
  // A loop that did not run (this process paused, swapped out or starved)
  // heard no heartbeats either, and those sent meanwhile may still wait in
  // its socket: members silent over that gap are not dead. Both clocks must
  // show the gap: a FakeClock jumps while the loop runs.
  const int64_t real_now = RealClock()->NowMs();
  const int64_t stalled_ms =
      last_check_ms_ < 0 ? 0 : std::min(now - last_check_ms_, real_now - last_check_real_ms_);
  last_check_ms_ = now;
  last_check_real_ms_ = real_now;
  if (!leadership_.leading()) return;  // A standby only answers "not the leader".
  if (stalled_ms > options_.heartbeat_timeout_ms / 2) {
    LOG(WARNING) << "the coordinator did not run for " << stalled_ms
                 << " ms (paused or starved); every member gets a whole heartbeat timeout from "
                    "now before it can be declared dead";
    members_.ForgiveSilence(now);
  }
  watchers_->Expire(map_, now);
  AnswerEventWaiters(now);  // Those whose wait ended.
  FinishReseeds();
  if (options_.exit_when_done && options_.num_workers > 0 && !outcome_.done() &&
      static_cast<int>(members_.workers().size()) >= options_.num_workers) {
    std::vector<int> ids;
    std::vector<int64_t> clocks;
    members_.LiveWorkers(&ids, &clocks);
    if (ids.empty()) {
      // Every worker is gone: nothing will use the servers again. Workers
      // that went silent without finishing or saying goodbye make the exit
      // non-zero (ComputeJobEnd); one that reported finishing does not.
      const int lost = members_.LostWorkers();
      EndJob(std::to_string(static_cast<int>(members_.workers().size()) - lost) +
             " worker(s) finished or left, " + std::to_string(lost) + " lost");
    }
  }
  MaybeExit(now);
  for (int id : members_.ExpireServers(now)) {
    if (outcome_.done()) continue;  // Leaving at the end is not a failure.
    const MemberInfo& m = members_.servers().at(id);
    const std::string what = "server " + std::to_string(id) + " (" + m.endpoint + ", pid " +
                             std::to_string(m.pid) + ") missed heartbeats for " +
                             std::to_string(options_.heartbeat_timeout_ms) + " ms";
    LOG(WARNING) << what;
    metrics_.OnDeclaredDead("server");
    Emit("member_dead", {{"role", "server"}, {"id", id}, {"reason", what}});
    // Whatever waits on the dead server (a checkpoint in flight) fails now,
    // not at its deadline: a checkpoint that waited out its 120 s blocked
    // every later one, so a second kill rolled back to before the first.
    servers_rpc_->CancelPeer(server_peer_[id], UnavailableError(what));
    ServerLost(id, what);
  }
  if (checkpoints_.enabled() && !outcome_.failed() &&
      members_.live_servers() >= ExpectedServers() && map_.tables_size() > 0 &&
      checkpoints_.Due(members_.MinWorkerClock(), now)) {
    StartCheckpoint({});
  }
  barriers_.Update(announced_workers_, now);  // Expires held barrier requests.
  std::vector<int> dead_workers = members_.ExpireWorkers(now);
  for (int id : dead_workers) {
    const bool finished = members_.workers().at(id).finished;
    const std::string what = "worker " + std::to_string(id) + " missed heartbeats for " +
                             std::to_string(options_.heartbeat_timeout_ms) + " ms";
    if (finished) {
      LOG(INFO) << what << " after it finished (its goodbye was lost); dropped from the live set";
    } else {
      metrics_.OnDeclaredDead("worker");
      // Limited: a burst of forged registrations expires all at once.
      LOG_LIMITED(WARNING, rpc_->log_limiter(), "worker_dead")
          << what << "; dropped from the live set";
    }
    Emit("member_dead", {{"role", "worker"}, {"id", id}, {"reason", what}, {"finished", finished}});
  }
  // Registered and never heard from: not kept listed (nor counted as lost),
  // and their memory goes back.
  if (!dead_workers.empty() && members_.DropNeverHeardWorkers() > 0) TrimFreeMemory();
  if (!dead_workers.empty()) {
    BroadcastWorkerSet([](const Status& s) {
      if (!s.ok()) LOG(WARNING) << "announcing live workers: " << s;
    });
  }
  if (!Persist()) return;
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
  Emit("member_suspected", {{"role", "server"},
                            {"id", id},
                            {"reason", "its connection closed; probing it for " +
                                           std::to_string(options_.probe_timeout_ms) + " ms"}});
  Message ping;
  ping.header.set_type(wire::PING);
  servers_rpc_->Call(peer, std::move(ping), options_.probe_timeout_ms,
                     [this, id, endpoint, since](const Status& s, Message&&) {
                       if (s.ok()) return;
                       rpc_->Post([this, id, endpoint, since, s] {
                         auto it = members_.servers().find(id);
                         // Still the same incarnation of the server, still live?
                         if (it == members_.servers().end() || !it->second.alive ||
                             it->second.endpoint != endpoint) {
                           return;
                         }
                         members_.MarkServerDead(id);
                         Emit("member_dead",
                              {{"role", "server"},
                               {"id", id},
                               {"reason", "closed its connection and did not answer a probe"}});
                         servers_rpc_->CancelPeer(
                             server_peer_[id],
                             UnavailableError("server " + std::to_string(id) + " is dead"));
                         ServerLost(id, "server " + std::to_string(id) + " (" + endpoint +
                                            ") closed its connection and did not answer a "
                                            "probe within " +
                                            std::to_string(clock_->NowMs() - since) + " ms");
                       });
                     });
}

void CoordinatorImpl::ServerLost(int server_id, const std::string& why) {
  if (Drained(server_id)) {
    // It held nothing (its DEREGISTER was lost): no recovery to run.
    LOG(INFO) << "drained server " << server_id << " is gone (" << why << ")";
    RebuildServerList();
    return;
  }
  EndSyncing(server_id);
  const wire::ShardMap before = map_;
  const int counted = fallbacks_counted_;
  recovery_->OnServerLost(server_id, why, *this);
  EmitFailovers(server_id, before);
  OnChainMoveServerLost(server_id);
  if (fallbacks_counted_ > counted) {
    Emit("fallback", {{"server", server_id},
                      {"cause", "all-replicas-lost"},
                      {"source", "workers"},
                      {"epoch", map_.epoch()}});
  }
}

void CoordinatorImpl::EmitFailovers(int lost, const wire::ShardMap& before) {
  for (const wire::TableShards& now : map_.tables()) {
    const wire::TableShards* was = nullptr;
    for (const wire::TableShards& t : before.tables()) {
      if (t.table().name() == now.table().name()) was = &t;
    }
    if (was == nullptr) continue;
    for (int i = 0; i < now.ranges_size() && i < was->ranges_size(); ++i) {
      const wire::DenseRange& r = now.ranges(i);
      if (was->ranges(i).server() != lost || r.server() == lost) continue;
      Emit("chain_failover", {{"lost_server", lost},
                              {"table", now.table().name()},
                              {"range_begin", r.begin()},
                              {"range_end", r.end()},
                              {"new_head", r.server()},
                              {"epoch", map_.epoch()},
                              {"map_version", map_.version()}});
    }
    for (int b = 0; b < now.buckets_size() && b < was->buckets_size(); ++b) {
      if (was->buckets(b).server() != lost || now.buckets(b).server() == lost) continue;
      Emit("chain_failover", {{"lost_server", lost},
                              {"table", now.table().name()},
                              {"bucket", b},
                              {"new_head", now.buckets(b).server()},
                              {"epoch", map_.epoch()},
                              {"map_version", map_.version()}});
    }
  }
}

std::vector<int> CoordinatorImpl::LiveServers() const {
  std::vector<int> ids;
  for (const auto& [id, m] : members_.servers()) {
    if (m.alive) ids.push_back(id);
  }
  return ids;
}

std::set<int> CoordinatorImpl::LiveServersAwaitingSeed() const {
  std::set<int> ids;
  for (const auto& [id, since] : seeding_) {
    auto m = members_.servers().find(id);
    if (m != members_.servers().end() && m->second.alive) ids.insert(id);
  }
  return ids;
}

void CoordinatorImpl::StartCheckpoint(std::vector<std::shared_ptr<Request>> waiters) {
  if (checkpoints_.in_flight()) {
    checkpoints_.Queue(std::move(waiters));
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
  if (outcome_.failed()) {
    answer(waiters, AbortedError(outcome_.error()), nullptr);
    return;
  }
  const int needed = CheckpointServers();
  if (members_.live_servers() < needed) {
    answer(waiters, UnavailableError("cannot checkpoint: " +
                                     std::to_string(members_.live_servers()) + " of " +
                                     std::to_string(needed) + " servers live"),
           nullptr);
    return;
  }
  const int64_t now = clock_->NowMs();
  const int64_t clock = members_.MinWorkerClock();
  const uint64_t seq = checkpoints_.Start(clock, now);
  LOG(INFO) << "checkpoint at clock " << clock << " started";
  Emit("checkpoint_started", {{"seq", seq}, {"clock", clock}});
  Message msg;
  msg.header.set_type(wire::CHECKPOINT);
  msg.header.mutable_checkpoint_request()->set_clock(clock);
  msg.header.mutable_checkpoint_request()->set_seq(seq);
  auto record = std::make_shared<wire::CheckpointRecord>();
  record->set_clock(clock);
  record->set_seq(seq);
  auto shared_waiters = std::make_shared<std::vector<std::shared_ptr<Request>>>(std::move(waiters));
  Broadcast(
      msg,
      [this, record, shared_waiters, answer, now, clock](const Status& s) {
        std::sort(record->mutable_shards()->begin(), record->mutable_shards()->end(),
                  [](const wire::ShardCheckpoint& a, const wire::ShardCheckpoint& b) {
                    return a.server() < b.server();
                  });
        Status result = s;
        if (result.ok() && record->shards_size() < CheckpointServers()) {
          result = UnavailableError("only " + std::to_string(record->shards_size()) + " of " +
                                    std::to_string(CheckpointServers()) +
                                    " servers wrote the checkpoint");
        }
        record->set_seconds((clock_->NowMs() - now) / 1000.0);
        record->set_unix_s(clock_->NowUnixMs() / 1000.0);
        if (result.ok()) {
          LOG(INFO) << "checkpoint at clock " << clock << " complete on "
                    << record->shards_size() << " server(s) in " << record->seconds() << " s";
          Emit("checkpoint_complete", {{"seq", record->seq()},
                                       {"clock", clock},
                                       {"servers", record->shards_size()},
                                       {"seconds", record->seconds()}});
        } else {
          LOG(ERROR) << "checkpoint at clock " << clock << " failed: " << result;
          Emit("checkpoint_failed",
               {{"seq", record->seq()}, {"clock", clock}, {"reason", result.ToString()}});
        }
        checkpoints_.Finish(result, *record, clock_->NowMs());
        if (!Persist()) return;
        metrics_.OnCheckpoint(result.ok(), record->seconds());
        answer(*shared_waiters, result.WithPrefix("checkpoint at clock " + std::to_string(clock)),
               result.ok() ? record.get() : nullptr);
        if (checkpoints_.queued() > 0) StartCheckpoint(checkpoints_.TakeQueued());
      },
      options_.checkpoint_timeout_ms,
      [record](int, const Message& reply) {
        if (reply.header.has_shard_checkpoint()) {
          *record->add_shards() = reply.header.shard_checkpoint();
        }
      });
}

}  // namespace coordinator_internal
}  // namespace relaxps
