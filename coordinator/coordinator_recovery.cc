// Failure detection, the recovery policies' reactions, and checkpoints.
#include "coordinator/internal/coordinator_impl.h"

#include <algorithm>

#include "recovery/hybrid_fallback.h"

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
            if (hybrid()) RejoinAfterSeed(server);
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
  if (!leading_.load()) return;  // A standby only answers "not the leader".
  if (stalled_ms > options_.heartbeat_timeout_ms / 2) {
    LOG(WARNING) << "the coordinator did not run for " << stalled_ms
                 << " ms (paused or starved); every member gets a whole heartbeat timeout from "
                    "now before it can be declared dead";
    members_.ForgiveSilence(now);
  }
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
        if (!Persist()) return;
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

}  // namespace coordinator_internal
}  // namespace relaxps
