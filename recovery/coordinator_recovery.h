// CoordinatorRecovery: the coordinator's side of a recovery policy
// (include/relaxps/recovery_policy.h, docs/recovery.md).
//
// The coordinator (coordinator/) owns the mechanisms: membership and failure
// detection, the shard map and its installs, re-seeding a server from the
// workers' copies (coordinator/reseeder.h), chain state-transfer tracking,
// coordinated checkpoints and the durable state. It never asks which policy
// runs; at each decision point of a failure it calls a hook of the job's
// CoordinatorRecovery, made once by RecoveryPolicy::NewCoordinatorRecovery():
//
//   Configure          once, with the job's shape: validates it (replicas)
//   ReplicasPerRange   how many servers hold each range in the map (1: no chains)
//   ProbesClosedConnections  probe a server whose connection closed, and
//                      treat no answer as a loss at once (not at its timeout)
//   CheckpointSchedule which periodic checkpoints the coordinator takes
//   OnServerLost       a server was confirmed dead (missed heartbeats, or a
//                      closed connection and no answer to a probe): fail the
//                      job, wait for a restart, splice it out of its chains...
//   OnServerRegistered a server registered with an id (first time, a restart,
//                      a replacement): seed it, join it to chains...
//   OnSeedWithoutWorkerCopy / OnServerSeeded  a re-seed round finished
//   AdmitRangeMoves    whether key ranges may move between servers while the
//                      job runs (docs/elastic.md): OK, or the reason not
//   DescribeServer     the policy's fields of a server's entry in the map
//   SaveState / RestoreState  the policy's decisions in progress, kept in the
//                      coordinator's durable state (record "recovery")
//
// A hook that must act drives the coordinator through CoordinatorMechanisms
// (below), which CoordinatorImpl implements: it may read and edit the shard
// map (common/shard_map.h and the policies' own map helpers edit chains),
// rebuild the server list, publish the map, fail the job, mark a server as
// receiving a chain state transfer, count a recovery event. The core does the
// rest of a step itself: e.g. after OnServerRegistered it marks a seeded
// server dead in the map until its seed arrived, begins the re-seed round,
// tracks a chain joiner's state transfer and pushes the map if asked.
//
// What the core does for every policy (no hook): a server whose instance is
// lost is removed from the live set, its calls in flight fail, and it is no
// longer counted as receiving a state transfer; complete checkpoints are
// announced to workers (HeartbeatReply.latest_checkpoint, with a seq that
// grows); a server's registration is shown in the map with a new
// ServerInfo.incarnation and the checkpoint it says it restored
// (ServerInfo.restored_from). A policy that restarts servers from checkpoints
// and replays the clients' logged updates (replay) needs nothing more from
// the coordinator than the checkpoint-restart hooks: its clients learn "a
// newer complete checkpoint exists" and "server X restarted from checkpoint
// Y" from those fields.
//
// Thread-safety: a CoordinatorRecovery is owned by the coordinator and called
// on its loop thread only (hooks are never called concurrently); the
// mechanisms it is given are valid only during the call.
#ifndef RELAXPS_RECOVERY_COORDINATOR_RECOVERY_H_
#define RELAXPS_RECOVERY_COORDINATOR_RECOVERY_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "relaxps/recovery_policy.h"
#include "relaxps/status.h"

namespace relaxps {

namespace wire {
class CheckpointRecord;
class ServerInfo;
class ShardMap;
class StoredRecovery;
}  // namespace wire

namespace recovery {

// The job's shape as the coordinator was started (CoordinatorOptions).
struct CoordinatorJob {
  int num_servers = 1;
  // --replicas as given (whether it is used is the policy's: ReplicasPerRange).
  int replicas = 2;
  // --spare_takeover_ms: how long a lost server's place is kept for its own
  // restart before a server with another id may take it (0: at once).
  int64_t spare_takeover_ms = 0;
  // The policy's options with their values (RecoveryNeeds::options).
  RecoveryOptionValues options;
};

// Periodic coordinated checkpoints (coordinator/checkpoint_scheduler.h).
struct CheckpointSchedule {
  int64_t every_clocks = 0;  // Of the slowest live worker (0: off).
  double every_s = 0;        // Seconds (0: off).
};

// A server registering with an id. Only called once the registration is
// accepted (protocol, id range, a live id's old instance confirmed dead) and
// the server is in the membership as live.
struct ServerRegistration {
  int id = -1;
  // The id was known before: a restart, or a new process in a lost one's
  // place.
  bool replaces = false;
  // The id's previous instance counted as live until now (it registers again
  // before it was declared dead; its state is gone all the same).
  bool was_live = false;
  // The map holds at least one table: there are ranges to place.
  bool has_tables = false;
};

// What the core does after OnServerRegistered.
struct RegistrationOutcome {
  // The server starts empty and is seeded from the workers' copies of its
  // ranges (coordinator/reseeder.h): the map shows it dead and the server
  // refuses data requests (RegisterReply.awaits_seed) until its SEED arrived;
  // then OnServerSeeded runs.
  bool seed = false;
  // Chains the server joined as tail (in map()): it counts as no copy of
  // them until it reports its state transfers done (Syncing()).
  int joined_chains = 0;
  // Install the changed map on every live server once the reply is sent.
  bool push_map = false;
};

// A re-seed round that no live worker sent a real copy to (every range is
// seeded from the initializer, or a sparse bucket from the server's own
// base plus the workers' row changes).
struct SeedReport {
  int server = -1;
  int64_t changes_only = 0;  // Dense ranges seeded with merged changes only.
  int64_t buckets = 0;       // Sparse buckets seeded.
  // In: the merge's source ("initializer"). A hook may replace it with what
  // the server really keeps (e.g. "checkpoint@<clock>"); logged and counted.
  std::string source;
};

// What a policy's hooks may make the coordinator do. Implemented by the
// coordinator (CoordinatorImpl); valid only during the hook's call.
class CoordinatorMechanisms {
 public:
  CoordinatorMechanisms() = default;
  CoordinatorMechanisms(const CoordinatorMechanisms&) = delete;
  CoordinatorMechanisms& operator=(const CoordinatorMechanisms&) = delete;

  // ---- Facts ----
  // The coordinator's clock (monotonic ms).
  virtual int64_t NowMs() const = 0;
  virtual const wire::ShardMap& map() const = 0;
  // Ids of the servers in the membership that are live now, ascending.
  virtual std::vector<int> LiveServers() const = 0;
  // Live servers waiting for their seed (shown dead in the map).
  virtual std::set<int> LiveServersAwaitingSeed() const = 0;
  // Servers that joined chains and have not yet reported every state
  // transfer done: they hold nothing of those chains yet.
  virtual std::set<int> Syncing() const = 0;
  // The newest checkpoint every server completed; nullptr if none.
  virtual const wire::CheckpointRecord* LatestCheckpoint() const = 0;

  // ---- Mechanisms ----
  // The map, to edit its chains (RemoveFromChains, JoinChains, ...). The
  // hook bumps the epoch itself when chains change; the server list and the
  // version are the core's (RebuildServerList). An edit is shown to nobody
  // until the map is pushed or published.
  virtual wire::ShardMap* mutable_map() = 0;
  // Rebuilds the map's server list from the membership (and DescribeServer),
  // bumping its version.
  virtual void RebuildServerList() = 0;
  // Stores the state, then installs the map on every live server (not
  // waiting for them).
  virtual void PushMap(const std::string& why) = 0;
  // PushMap, then answers the map watches the change made stale.
  virtual void PublishMap(const std::string& why) = 0;
  // `server` joined chains at the map's current version: it is Syncing()
  // until it reports every state transfer done.
  virtual void MarkSyncing(int server) = 0;
  // `server` holds no state of any chain it joined (lost, or starting over).
  virtual void EndSyncing(int server) = 0;
  // Fails the job: every client learns `reason` from its next heartbeat.
  virtual void FailJob(const std::string& reason) = 0;
  // Counts a recovery event of `kind` ("failover", "fallback") in the
  // coordinator's metrics.
  virtual void CountRecovery(const std::string& kind) = 0;

 protected:
  ~CoordinatorMechanisms() = default;
};

class CoordinatorRecovery {
 public:
  CoordinatorRecovery() = default;
  CoordinatorRecovery(const CoordinatorRecovery&) = delete;
  CoordinatorRecovery& operator=(const CoordinatorRecovery&) = delete;
  virtual ~CoordinatorRecovery() = default;

  // Called once, before any other hook (also by CoordinatorOptions::Validate
  // on an object of its own): InvalidArgument if the policy cannot run a job
  // of this shape (e.g. replicas out of range), naming the flag.
  virtual Status Configure(const CoordinatorJob& job) = 0;
  // Servers holding each range and bucket in the map (JobConfig.replicas):
  // > 1 places every range on a chain of that many servers.
  virtual int ReplicasPerRange() const { return 1; }
  // Whether a table created after servers joined or were drained is spread
  // over the servers there are now (true) or keeps the home placement over
  // the job's own servers 0..num_servers-1 (false: chains, whose members the
  // policy tracks by those ids). Default: spread unless ranges are chained.
  virtual bool PlacesNewTablesOnCurrentServers() const { return ReplicasPerRange() <= 1; }
  // True: the coordinator probes a server whose connection closed and calls
  // OnServerLost as soon as the probe goes unanswered (probe_timeout_ms);
  // false: a server is lost only when it misses its heartbeats.
  virtual bool ProbesClosedConnections() const { return false; }
  // The periodic checkpoints to take, given the ones the flags ask for
  // (`requested`). Default: as asked.
  virtual CheckpointSchedule Checkpoints(const CheckpointSchedule& requested) const {
    return requested;
  }

  // Server `server` was confirmed dead (`why` says how) while the job runs:
  // the membership shows it dead and its calls in flight failed; the map
  // still lists it. The hook decides what follows, e.g. FailJob; or
  // RebuildServerList and wait for its restart (logging how to restart it);
  // or splice it out of its chains and PublishMap.
  virtual void OnServerLost(int server, const std::string& why, CoordinatorMechanisms& m) = 0;
  // Server `r.id` registered (see ServerRegistration); the map's server list
  // is rebuilt after the hook. Default: nothing to do (it serves what the
  // map gives it; under checkpoint restarts it restored its own state).
  virtual RegistrationOutcome OnServerRegistered(const ServerRegistration& r,
                                                 CoordinatorMechanisms& m) {
    return {};
  }
  // A re-seed round of `report->server` had no worker copy; called before
  // its SEED is sent.
  virtual void OnSeedWithoutWorkerCopy(SeedReport* report, CoordinatorMechanisms& m) {}
  // `server` acknowledged its SEED: it serves again (the map was rebuilt and
  // stored).
  virtual void OnServerSeeded(int server, CoordinatorMechanisms& m) {}

  // Whether the coordinator may move key ranges between servers while the
  // job runs (a joined server's rebalance, docs/elastic.md): OK, or
  // FailedPrecondition with the reason, shown to the operator and in the
  // range_move_failed event. A move hands a range's whole live state (slots,
  // clocks, exactly-once record) to another server and publishes a new map;
  // a policy admits it once what it keeps about servers (chains, the
  // workers' copies, logs, checkpoints) stays true across one. Default:
  // refused, so that a new policy opts in knowingly.
  virtual Status AdmitRangeMoves() const {
    return FailedPreconditionError(
        "the recovery policy does not say how its state follows a range move "
        "(CoordinatorRecovery::AdmitRangeMoves)");
  }

  // The policy's fields of server `id`'s entry in the map (e.g.
  // ServerInfo.took_over), filled at every RebuildServerList.
  virtual void DescribeServer(int id, wire::ServerInfo* info) const {}
  // The policy's decisions in progress, written with the coordinator's
  // durable state whenever it changes (a policy of its own may use
  // StoredRecovery.policy_state); RestoreState reads them back in a
  // restarted or newly elected coordinator, after Configure.
  virtual void SaveState(wire::StoredRecovery* state) const {}
  virtual void RestoreState(const wire::StoredRecovery& state, int64_t now_ms) {}
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_COORDINATOR_RECOVERY_H_
