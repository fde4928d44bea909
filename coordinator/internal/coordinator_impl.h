// CoordinatorImpl: the implementation behind relaxps::Coordinator
// (coordinator/coordinator.h), split by responsibility:
//   coordinator.cc          start-up, dispatch, job end and status
//   coordinator_members.cc  registration, heartbeats, the live worker set, barriers
//   coordinator_tables.cc   tables, learning rates, shard map installs
//   coordinator_recovery.cc failure detection, the mechanisms the recovery
//                           policy's hooks drive (recovery/coordinator_recovery.h),
//                           re-seeds, checkpoints
//   coordinator_state.cc    the durable state (coordinator/state_store.h)
// and objects that own their state, each with its contract in its header:
//   Leadership (leadership.h)   the state store, election, term, and
//                               standby/leading/suspended/stepped down
//   JobOutcome (job_outcome.h)  the job's end or failure, when the loop
//                               stops, the verdict and Run()'s result
//   Membership, Barriers, CheckpointScheduler, Reseeder, MapWatchers,
//   ControlLimiter, EventRing, EventFollowers   (their headers)
//
// Thread-safety: everything runs on the RpcServer's loop thread, except
// Stop() and the leadership callbacks, which Post() to it.
#ifndef RELAXPS_COORDINATOR_INTERNAL_COORDINATOR_IMPL_H_
#define RELAXPS_COORDINATOR_INTERNAL_COORDINATOR_IMPL_H_

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/shard_map.h"
#include "coordinator/barriers.h"
#include "coordinator/checkpoint_scheduler.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/coordinator.h"
#include "coordinator/event_followers.h"
#include "coordinator/event_ring.h"
#include "coordinator/job_outcome.h"
#include "common/events.h"
#include "coordinator/map_watchers.h"
#include "coordinator/control_limiter.h"
#include "coordinator/membership.h"
#include "coordinator/leadership.h"
#include "coordinator/reseeder.h"
#include "coordinator/state_store.h"
#include "recovery/coordinator_recovery.h"
#include "recovery/recovery_policy.h"

namespace relaxps {
namespace coordinator_internal {

// The periodic checkpoints a job takes: the flags', as the recovery policy
// adjusts them (CoordinatorRecovery::Checkpoints). REQUIRES: options.Validate().
CheckpointSchedulerOptions CheckpointScheduleFor(const CoordinatorOptions& options);

class CoordinatorImpl;
// Under coordination: a Coordinator that replaces `first`, once deposed, by
// a new standby on the same endpoint (rejoining_coordinator.cc).
std::unique_ptr<Coordinator> RejoinWhenDeposed(const CoordinatorOptions& options,
                                               std::unique_ptr<CoordinatorImpl> first);

// The coordinator is the mechanisms side of its recovery policy's hooks
// (recovery/coordinator_recovery.h): it never asks which policy runs.
class CoordinatorImpl final : public Coordinator, private recovery::CoordinatorMechanisms {
 public:
  // `status_collector`: registers the Prometheus collector of
  // GET_STATUS's figures (off when RejoinWhenDeposed registers one for the
  // whole process).
  explicit CoordinatorImpl(const CoordinatorOptions& options, bool status_collector = true)
      : status_collector_(status_collector),
        options_(options),
        clock_(ClockOrReal(options.clock)),
        members_(options.heartbeat_timeout_ms),
        barriers_(options.consistency == ConsistencyModel::kAsync ? 0 : options.num_workers),
        outcome_(options.failed_exit_ms, options.done_grace_ms),
        checkpoints_(CheckpointScheduleFor(options), clock_->NowMs()),
        reseeder_(ReseedOptions{options.seed_rule, options.merge_rule,
                                options.reseed_timeout_ms}),
        metrics_(options.metrics),
        ring_(static_cast<size_t>(std::max(1, options.events_ring))) {}

  Status Init();

  // The advertised endpoint (CoordinatorOptions::advertise), set by Init().
  const std::string& endpoint() const override { return endpoint_; }
  // The endpoint rpc_ is bound to (a concrete port), which a standby that
  // replaces this one binds again.
  const std::string& bound_endpoint() const { return rpc_->endpoint(); }
  bool leading() const override { return leadership_.leading(); }
  void Run() override {
    rpc_->Run([this](Request r) { Handle(std::move(r)); });
    EndRun();
  }
  void Stop() override {
    stop_requested_.store(true);
    rpc_->Stop();
  }
  Status result() const override { return outcome_.result(); }
  JobEnd job_end() const override { return outcome_.job_end(); }
  // After Run() returned: it was deposed (under coordination) and may lead
  // again as a new standby (RejoinWhenDeposed); no job_end was emitted.
  bool rejoins() const { return leadership_.rejoins(); }
  // Runs `task` on the loop thread (dropped if the loop never runs again).
  void Post(std::function<void()> task) { rpc_->Post(std::move(task)); }
  // GET_STATUS's figures. Loop thread only.
  wire::StatusReply StatusForMetrics() const { return BuildStatus(); }

 private:
  // ---- Leadership and durable state (coordinator_state.cc) ----
  // Opens the state store (and joins the election under coordination).
  Status OpenStore();
  // Every coordinator of the job, the leader first (from the election; none
  // without coordination), into `h` (Header.coordinator_endpoints).
  void ListCoordinators(wire::Header* h) const {
    for (const std::string& e : leadership_.candidates()) h->add_coordinator_endpoints(e);
  }
  // Claims the store and resumes from its records; then serves.
  Status TakeOver();
  // Stops serving: Run() returns Aborted naming `why`. `rejoin`: it lost
  // its leadership (or its session) under coordination, not its job: it
  // stands by again (rejoins()).
  void StepDown(const std::string& why, bool rejoin = false);
  void OnZkEvent(ZkEvent e);
  // Writes every changed record to the store. False (and stepped down) if
  // the write failed: the caller must not let the change take effect.
  [[nodiscard]] bool Persist();
  StateRecords Snapshot() const;
  Status Restore(const StateRecords& records);

  // Ends the job in order (SHUTDOWN or every worker left).
  void EndJob(const std::string& why);
  // After the loop stopped: how the job ended (outcome_'s verdict, the
  // job_end event). At most once.
  void EndRun();
  // EndRun, answers the event followers, then stops the loop.
  void EndRunAndStop();
  // What outcome_'s verdict needs from the members and the leadership.
  JobEndFacts EndFacts() const;
  // ---- Range moves (coordinator_moves.cc, docs/elastic.md) ----
  // Live servers that are not waiting for a seed: those a plan spreads
  // ranges over.
  std::set<int> ServingServers() const;
  // OK if ranges may move to or from `server` now: the policy's refusal
  // (AdmitRangeMoves), NotFound for a server that is not live,
  // FailedPrecondition while earlier moves are queued.
  Status MovesAdmitted(int server) const;
  // Plans the moves that give server `dest` its share and queues them
  // (refused as MovesAdmitted).
  StatusOr<std::vector<wire::RangeMove>> PlanMoves(int dest);
  // Starts the first queued move unless one runs.
  void RunNextMove();
  // MOVE_RANGE to the destination (`incoming`) or to the source.
  void SendMoveStep(const wire::RangeMove& m, bool incoming, int attempts_left);
  void OnMoveStep(uint64_t id, bool incoming, int attempts_left, const Status& s);
  // On the timer: sends a move step refused by a server that had not
  // adopted this coordinator yet (a takeover), once it is due.
  void RetryMoveStep();
  // range_move_failed for `m`; the queue is dropped (the map is unchanged).
  void FailMoves(const wire::RangeMove& m, const Status& why);
  // Tells the destination of unreplicated move `m` that it failed (MOVE_RANGE
  // `incoming` with `why` as its status): it drops what it received of the
  // copy and refuses the move's pieces from then on. Not waited for.
  void RevokeMove(const wire::RangeMove& m, const Status& why);
  // ADD_SERVER (operator): plan and run the moves to a joined server.
  void HandleAddServer(Request req);
  // A server registered with --join: plan and run the moves to it.
  void RebalanceJoined(int dest);
  // DRAIN_SERVER (operator): plan and run the moves of every range off a
  // server; it leaves once it holds nothing (Drained).
  void HandleDrainServer(Request req);
  // Whether `server` was drained: asked to, its moves done, nothing held.
  bool Drained(int server) const;
  // The servers a new unreplicated table is spread over, by id: the job's
  // own (ids below --num_servers) and the live ones that joined, less those
  // draining or drained.
  std::vector<int> PlacementServers() const;
  // How many live servers the job waits for before it creates tables, takes
  // checkpoints or admits a joining server: --num_servers, less the servers
  // drained since (at least 1).
  int ExpectedServers() const;
  // ---- Moves of chained ranges (coordinator_chain_moves.cc) ----
  // The first queued move, of a chained range: the destination joins the
  // chain as tail (map published), then ContinueChainMove.
  void StartChainMove();
  // Source steps of a move that time out are asked again this often (each
  // is idempotent on the server) before the move counts as failed.
  static constexpr int kMoveSourceAttempts = 3;
  // The range_move_* events' fields of move `m`.
  static EventFields MoveFields(const wire::RangeMove& m);
  // Marks move `m` (moves_.front()) running: its token (kept if it has one)
  // and the destination's endpoint set, its clock started. True if it had
  // started before (a move resumed after a takeover).
  bool MarkMoveRunning(wire::RangeMove* m, const std::string& destination_endpoint);
  // range_move_started of move `m`.
  void EmitMoveStarted(const wire::RangeMove& m, bool resumed);
  // The running chain move goes on if it can: once the destination holds
  // the state, the source is asked to leave (MOVE_RANGE); if the source is
  // no replica any more (lost and spliced out by the policy), it is done.
  void ContinueChainMove();
  // The source left (its step answered OK, or it is no replica any more):
  // it is spliced out of the chain, the map published, range_move_done.
  void FinishChainMove();
  // A failed chain move: the destination leaves the chain again if the
  // source still holds a replica (the map as before the move).
  void RetractChainMove(const wire::RangeMove& m);
  // After the policy's OnServerLost: a running chain move whose destination
  // was lost fails; one whose source was lost goes on (ContinueChainMove).
  void OnChainMoveServerLost(int server);
  // Servers a complete checkpoint needs: every server the map gives a range
  // or bucket (a joined one too), and at least --num_servers less those
  // drained (before any table exists), at least 1.
  int CheckpointServers() const;

  // ---- Structured events (docs/events.md) ----
  void Emit(std::string_view kind, const EventFields& fields = {}) { events_->Emit(kind, fields); }
  // GET_EVENTS: answers at once, or holds the request (followers_) until an
  // event comes or its wait ends.
  void HandleGetEvents(Request req);
  // Answers the held GET_EVENTS requests that have news or whose wait ended
  // by `now`.
  void AnswerEventWaiters(int64_t now);
  // chain_failover for every range or bucket whose head moved off `lost`
  // between `before` and the current map.
  void EmitFailovers(int lost, const wire::ShardMap& before);
  // shard_map_installed: map `version` went to every live server (`s`).
  void EmitMapInstalled(uint64_t version, uint64_t epoch, const std::string& why,
                        const Status& s);
  // Loop timer: returns from Run() once an ended job's processes left, or
  // a failed job's clients had time to learn why.
  void MaybeExit(int64_t now);
  void Handle(Request req);
  // --security=curve: PermissionDenied unless the sender's key has a role
  // that may send this kind (RoleMaySend) and may claim the role and id it
  // claims (coordinator_auth.cc).
  Status CheckRole(const Request& req) const;
  // Member tokens, under plain TCP too: PermissionDenied unless a member's
  // message carries its newest registration's token, or an operator's
  // message an operator session's (a HEARTBEAT with a wrong or revoked one:
  // NotFound, so a member that missed its re-registration reply registers
  // again). Updates the session's last use.
  Status CheckToken(const Request& req);
  Status CheckMemberToken(const wire::Header& h, const std::string& role, int id) const;
  Status CheckSession(const wire::Header& h, bool operator_only);
  // A new observer or operator session's token (the least recently used one
  // goes beyond kMaxSessions).
  std::string OpenSession(const std::string& role);
  // Observer and operator sessions (relaxps-ctl, evaluators): token -> role
  // and last use. Not stored: after a coordinator restart they register
  // again.
  struct Session {
    std::string role;
    int64_t last_used_ms = 0;
  };
  static constexpr size_t kMaxSessions = 1024;
  std::map<std::string, Session> sessions_;
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
  // Answers `req` with the error `why`, logging one line per message type and
  // code a second (with the count of those not logged).
  void Refuse(const Request& req, const Status& why);
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
  // `waiters` (manual requests) when it ends. Queues them in checkpoints_
  // if one is running.
  void StartCheckpoint(std::vector<std::shared_ptr<Request>> waiters);
  // Persists, then announces the live worker set to every server; `done`
  // runs once a set at least as new as the one now reached them all. One
  // WORKER_SET is in flight at a time: the changes made meanwhile go out
  // together in the next, which answers everyone waiting for them. (Sent
  // per change, a burst of N registrations queued N sets of up to N workers
  // each, 16-byte tokens included: 2,000 forged ones held 47 MB at once.)
  void BroadcastWorkerSet(std::function<void(const Status&)> done);
  // Sends the current set for the callers in worker_set_waiting_.
  void SendWorkerSet();
  // The live worker set (ids, clocks, version) as sent to servers.
  void FillLiveWorkers(wire::LiveWorkers* lw) const;
  // Sets h->server_tokens: the live servers' member tokens at the current
  // map version. Only on messages to servers (server_internal::ServerTokens).
  void FillServerTokens(wire::Header* h) const;
  // Mechanisms (recovery::CoordinatorMechanisms); see there.
  void RebuildServerList() override;
  void FailJob(const std::string& reason) override;
  int64_t NowMs() const override { return clock_->NowMs(); }
  const wire::ShardMap& map() const override { return map_; }
  wire::ShardMap* mutable_map() override { return &map_; }
  std::vector<int> LiveServers() const override;
  std::set<int> LiveServersAwaitingSeed() const override;
  const wire::CheckpointRecord* LatestCheckpoint() const override {
    return checkpoints_.latest() ? &*checkpoints_.latest() : nullptr;
  }
  void PublishMap(const std::string& why) override {
    PushMap(why);
    watchers_->Notify(map_);
  }
  void MarkSyncing(int server) override { syncing_[server] = map_.version(); }
  void EndSyncing(int server) override { syncing_.erase(server); }
  void CountRecovery(const std::string& kind) override {
    metrics_.OnRecovery(kind);
    if (kind == "fallback") ++fallbacks_counted_;
  }
  // A server was confirmed dead (`why`) while the job runs: it holds no
  // state any more; the policy decides the rest (OnServerLost).
  void ServerLost(int server_id, const std::string& why);
  // Removes table `name` from the map (its creation failed with `why`) and
  // sends the map without it to the servers.
  void DropTable(const std::string& name, const Status& why);
  // Stateless recovery: a SEED_COPY from a worker; finishing rounds whose
  // copies are in (or timed out) by sending SEED to their server.
  void HandleSeedCopy(Request req);
  void FinishReseeds();
  // The connection to a server closed (when the policy probes closed
  // connections): probe it; no answer is a loss.
  void OnDisconnect(int peer);
  // Stores the state, then sends the current map to every live server.
  void PushMap(const std::string& why) override;
  // Chain replication: servers that joined chains and have not yet reported
  // (heartbeat awaiting_state false) that every state transfer arrived.
  std::set<int> Syncing() const override {
    std::set<int> ids;
    for (const auto& [id, version] : syncing_) ids.insert(id);
    return ids;
  }

  // Constant after Init().
  const bool status_collector_;
  const CoordinatorOptions options_;
  const Clock* const clock_;
  std::unique_ptr<RpcServer> rpc_;
  std::unique_ptr<RpcClient> servers_rpc_;
  std::unique_ptr<RecoveryPolicy> policy_;
  std::shared_ptr<EventLog> events_;  // Opened in Init(); never null after.
  // The policy's coordinator side; its hooks run on the loop thread.
  std::unique_ptr<recovery::CoordinatorRecovery> recovery_;
  wire::JobConfig job_;
  int64_t start_ms_ = 0;
  std::string identity_;  // Routing id of servers_rpc_ (see RegisterReply).
  std::string endpoint_;  // Advertised: rpc_'s bound endpoint as others reach it.
  // --security=curve: server id -> the public key its ROUTER must prove it
  // holds (DIR/server-<id>.pub), listed in the map for clients.
  std::map<int, std::string> server_keys_;

  // Loop thread only.
  std::unique_ptr<MapWatchers> watchers_;  // Created in Init().
  // Learning-rate changes a table keeps at most (each is in every map).
  static constexpr int kMaxLrChanges = 1024;
  Membership members_;
  ControlLimiter control_limiter_{options_.max_control_per_min_per_peer,
                                  options_.max_control_per_min};
  // The last CheckLiveness, on clock_ and on the real clock (-1: none yet).
  int64_t last_check_ms_ = -1;
  int64_t last_check_real_ms_ = -1;
  Barriers barriers_;
  // The live workers of the last worker set every server acknowledged (the
  // barriers count these: a worker counts once the servers count it too).
  std::vector<int> announced_workers_;
  uint64_t announced_version_ = 0;
  // BroadcastWorkerSet: whether a WORKER_SET is on its way, and who waits
  // for the next one.
  bool worker_set_in_flight_ = false;
  std::vector<std::function<void(const Status&)>> worker_set_waiting_;
  wire::ShardMap map_;
  std::map<int, int> server_peer_;  // server id -> RpcClient peer.
  // The job's end or failure, Run()'s result (coordinator/job_outcome.h).
  JobOutcome outcome_;
  // fallback events: CountRecovery("fallback") calls during the hook now
  // running (the core emits one event per hook that counted one).
  int fallbacks_counted_ = 0;
  // GET_EVENTS requests held until an event comes or their wait ends.
  EventFollowers followers_;
  uint64_t next_incarnation_ = 1;
  CheckpointScheduler checkpoints_;
  Reseeder reseeder_;
  // Servers being seeded: registered, shown dead in the map until seeded.
  std::map<int, int64_t> seeding_;  // server id -> registration time (ms).
  // Per server id, what its latest registration showed in the map:
  // ServerInfo.incarnation and ServerInfo.restored_from (kept in the stored
  // map; Restore reads them back).
  struct Registration {
    uint64_t incarnation = 0;
    wire::ShardCheckpoint restored_from;
    bool restored = false;
  };
  std::map<int, Registration> registrations_;
  // Chain replication: joined servers still receiving their state, with the
  // map version of their join (see Syncing()).
  std::map<int, uint64_t> syncing_;
  // Range moves planned and not yet published (the first may be running),
  // the next move's number, whether one runs and since when.
  std::deque<wire::RangeMove> moves_;
  uint64_t next_move_id_ = 1;
  bool move_running_ = false;
  int64_t move_started_ms_ = 0;
  // A step of the running move to send again at due_ms (RetryMoveStep).
  struct MoveStepRetry {
    uint64_t id = 0;
    bool incoming = false;
    int attempts_left = 0;
    int64_t due_ms = 0;
  };
  std::optional<MoveStepRetry> move_step_retry_;
  // A running chain move asked its source to leave.
  bool chain_source_asked_ = false;
  // Servers being drained (relaxps-ctl drain-server), until they left.
  std::set<int> draining_;
  CoordinatorMetrics metrics_;  // Recovery events; the rest from BuildStatus().
  // Events kept for GET_EVENTS (filled by events_' observer on any thread).
  EventRing ring_;
  // Stop() was called (a signal): the job did not end by itself.
  std::atomic<bool> stop_requested_{false};
  // The state store, the election and the term (coordinator/leadership.h).
  // Declared last: destroyed first (the election and the ZooKeeper session
  // call back into rpc_ until they are gone).
  Leadership leadership_;
};

}  // namespace coordinator_internal
}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_INTERNAL_COORDINATOR_IMPL_H_
