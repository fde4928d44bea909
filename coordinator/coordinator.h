// relaxps::Coordinator: the one-per-job control process.
//
// Holds the job configuration (consistency model, staleness bound, recovery
// policy), the membership of servers and workers (registration, heartbeats,
// failure detection), and the shard map of every table, with a version bumped
// at each change. Table creation installs the new map on every server before
// it is acknowledged, and a worker's registration is acknowledged only once
// every server knows it is live, so a BSP round can never close without it.
//
// Recovery (recovery/coordinator_recovery.h): the job's recovery policy
// (CoordinatorOptions::recovery, a registered name) decides through its
// coordinator-side hooks what a lost server means and what a registering one
// does; the coordinator provides the mechanisms and never asks which policy
// runs. A server is lost when it misses its heartbeats or, under a policy that
// probes closed connections, when its connection closed and it does not
// answer a probe. Today's policies (relaxps-ctl policies lists them):
// "none" fails the job (every client learns the reason from its next
// heartbeat); "checkpoint" waits for the server to restart with its id
// (--server_id) from its latest complete checkpoint, with the same shards;
// "chain" holds every dense range and sparse bucket on a chain of `replicas`
// servers, removes a lost server from every chain at once (epoch and map
// version bumped, the new map installed on every live server) and lets it
// rejoin its chains as tail after a state transfer; "stateless" goes on while
// the server is lost (workers train on their own copies) and seeds a server
// that registers with the lost id from the workers' copies
// (coordinator/reseeder.h, a "RESEED ..." line) before the map routes to it;
// "hybrid" chains as "chain", and a range whose every replica is lost
// ("FALLBACK cause=all-replicas-lost") is seeded as under "stateless" into
// the server that registers with its holder's id, or another one after
// spare_takeover_ms ("TAKEOVER"), or keeps its latest checkpoint when no
// worker sent a copy ("FALLBACK cause=no-worker-copy"); then the other
// servers rejoin its chains as tail.
//
// Every registration of a server is shown in the map (ServerInfo.incarnation,
// and restored_from: the checkpoint it restored), and workers learn each new
// complete checkpoint from their heartbeat replies
// (HeartbeatReply.latest_checkpoint).
//
// Coordinated checkpoints (CheckpointScheduler): every
// checkpoint_every_clocks clocks of the slowest live worker, every
// checkpoint_every_s seconds (as the recovery policy adjusts them), or on
// TRIGGER_CHECKPOINT (relaxps-ctl checkpoint), the coordinator sends CHECKPOINT to every server and records
// the checkpoint once all of them wrote it (shown by relaxps-ctl status).
//
// Durable state and high availability (coordinator/state_store.h): every
// change of the job's state (job config, membership, shard map and chains,
// recovery decisions, checkpoint registry) is written to the state store
// before it takes effect (before any reply or map install that shows it).
// With data_dir, a coordinator restarted with the same directory resumes the
// job: servers and workers keep their ids and registration. With
// coordination (zk://...), several coordinators may run; one wins the
// election (coordinator/leader_election.h), loads the state and serves; the
// others answer every request with Unavailable and the leader's endpoint
// (Header.leader_endpoint: clients follow it, common/coordinator_peers.h),
// and take over when its ZooKeeper session ends. A leader whose ZooKeeper
// connection drops stops serving until it reconnects within its session
// (same term). One whose session expires or whose state write fails
// (another coordinator claimed the store) steps down and, instead of
// returning from Run(), is replaced by a fresh standby on the same endpoint
// that may lead again later (docs/coordinator_ha.md).
//
// Thread-safety: Start() and Run() from one thread; Stop() from any thread.
#ifndef RELAXPS_COORDINATOR_COORDINATOR_H_
#define RELAXPS_COORDINATOR_COORDINATOR_H_

#include <memory>
#include <string>

#include "common/clock.h"
#include "relaxps/curve_options.h"
#include "common/status.h"
#include "consistency/consistency_policy.h"
#include "recovery/recovery_policy.h"
#include "recovery/seed_merge.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace relaxps {

namespace metrics {
class Registry;
}  // namespace metrics

struct CoordinatorOptions {
  // Endpoint to bind; the default lets the OS choose a port.
  std::string bind = "tcp://127.0.0.1:*";
  // How others reach it, as relaxps-coordinator's --advertise
  // (common/advertise.h): "" (the bound endpoint), "HOST", "HOST:PORT" or
  // "tcp://HOST:PORT". It is what endpoint(), the coordinator_started and
  // leader_elected events and a ZooKeeper election publish, and what standbys
  // redirect to.
  std::string advertise;
  // Source address of the coordinator's connections to the servers (a numeric
  // IPv4/IPv6 address of this host, usually the one it binds and advertises
  // on a multi-homed host); empty: the kernel's choice.
  std::string source_address;
  // Servers the job waits for before tables can be created.
  int num_servers = 1;
  // Workers expected. Under BSP and SSP a value > 0 is a start barrier:
  // each worker's Client::Connect() returns only once this many workers are
  // live (coordinator/barriers.h), so no worker runs rounds alone. 0: no
  // start barrier (workers start as they come).
  int num_workers = 0;
  // How long a worker waits at the start barrier before its Connect() fails
  // with DeadlineExceeded naming how many registered.
  int start_barrier_timeout_ms = 300000;
  ConsistencyModel consistency = ConsistencyModel::kAsync;
  // SSP staleness bound in clocks.
  int staleness = 2;
  // The recovery policy: a registered name (include/relaxps/recovery_policy.h;
  // relaxps-coordinator --recovery=help lists them). Validate() refuses an
  // unknown name, and a job shape the policy cannot run.
  std::string recovery = "none";
  // Options of the recovery policy that were given (RecoveryNeeds::options:
  // "replication" -> "async"); the rest take the policy's defaults.
  // Validate() refuses an option the policy does not have or a value it does
  // not take; every member learns all of them (JobConfig.recovery_options).
  RecoveryOptionValues recovery_options;
  // Under a policy that replicates ranges on chains (chain, hybrid): servers
  // holding each dense range and sparse bucket (R). More survives more
  // simultaneous failures; each push crosses R servers before it is
  // acknowledged. 2 <= replicas <= num_servers. Unused by other policies.
  int replicas = 2;
  // Hash buckets of every sparse table, fixed when the table is created and
  // placed like dense ranges (0: one per server). More buckets spread a
  // table's load and re-replication over more chains; each bucket of a
  // request is one message.
  int sparse_buckets = 0;
  // Under a policy that probes closed connections (chain, hybrid): a server
  // whose connection closed is probed; no answer within this long confirms
  // the crash. Shorter fails over sooner.
  int probe_timeout_ms = 100;
  // A server registering with the id of a live server (a restart before the
  // old one was declared dead, or a forged REGISTER) is accepted only if the
  // old instance does not answer a probe within this long; otherwise it is
  // refused with PermissionDenied. Longer is safer on a loaded machine;
  // shorter lets a restarted server in sooner.
  int takeover_probe_ms = 500;
  // A range move's source step (drain the range, send it to the
  // destination: docs/elastic.md) fails after this long without an answer
  // (asked again twice). Longer tolerates bigger ranges and slower rounds.
  int move_timeout_ms = 120000;
  // Most live workers at once; registrations beyond are refused
  // (FailedPrecondition). 0: 2 * num_workers (at least num_workers + 4) when
  // num_workers is set, else 4096. Bounds what a flood of fake
  // registrations can add to a BSP barrier.
  int max_workers = 0;
  // Most members listed at once, live or dead (servers and workers); a
  // REGISTER beyond is refused (FailedPrecondition). Workers that never sent
  // a heartbeat are dropped once declared dead, so a flood of registrations
  // does not stay listed.
  size_t max_members = 10000;
  // Most tables in the job; a CREATE_TABLE of a new one beyond is refused.
  int max_tables = 1024;
  // Control changes (a new table, SET_LEARNING_RATE, TRIGGER_CHECKPOINT)
  // accepted per minute from one connection and from all together
  // (coordinator/control_limiter.h); beyond, refused (FailedPrecondition).
  // <= 0: unlimited. Each rewrites the map every member holds or makes every
  // server write a checkpoint.
  int64_t max_control_per_min_per_peer = 120;
  int64_t max_control_per_min = 600;
  // Largest dense table admitted, in bytes of parameters; a bigger
  // CREATE_TABLE is refused before anything is allocated. 0: unlimited
  // (servers still enforce their own --max_server_mb).
  uint64_t max_table_bytes = uint64_t{4} << 30;
  // --security=curve (curve.name is "coordinator"); empty keys_dir: plain.
  CurveOptions curve;
  // Largest message accepted on any socket (ZMQ_MAXMSGSIZE), in bytes.
  int64_t max_message_bytes = int64_t{1} << 30;
  // A member silent for longer is declared dead. Shorter detects failures
  // sooner; too short declares slow-but-alive processes dead.
  int heartbeat_timeout_ms = 3000;
  // Coordinated checkpoint when the min live worker clock reaches a multiple
  // of this (0: off). Smaller loses fewer clocks on a failure; each costs
  // every server a flush plus a hard-linked snapshot.
  int64_t checkpoint_every_clocks = 0;
  // Coordinated checkpoint every this many seconds (0: off).
  double checkpoint_every_s = 0;
  // How long a coordinated checkpoint may take before it counts as failed.
  int checkpoint_timeout_ms = 120000;
  // Re-seeding (stateless, hybrid's fallback): how a re-registered server's
  // ranges are rebuilt from the workers' copies (recovery/seed_merge.h), and
  // how long the coordinator waits for the copies.
  SeedRule seed_rule = SeedRule::kFreshest;
  MergeRule merge_rule = MergeRule::kStaleness;
  int reseed_timeout_ms = 3000;
  // Under a policy with spare takeover (hybrid): a server registering with
  // another id than a lost server's takes over what that server held alone
  // once it has been lost this long (recovery::CoordinatorJob). 0: at once
  // (training resumes on a server soonest); longer waits for the lost
  // server's own restart (which may restore its own checkpoint).
  int spare_takeover_ms = 0;
  // Lifecycle. A job is over on `relaxps-ctl shutdown` (SHUTDOWN) or, with
  // exit_when_done and num_workers set, once num_workers workers have
  // registered and none is live (result() is then Aborted if some went
  // silent instead of leaving): workers are told to finish their step and
  // leave, servers to flush and exit, and Run() returns (result() OK) once
  // they have, or done_grace_ms after the job ended. Launchers that manage
  // the processes themselves (run_local.sh) turn exit_when_done off.
  bool exit_when_done = true;
  int done_grace_ms = 30000;
  // After the job failed, Run() returns (result() Aborted with the reason)
  // this long later: time for every client to learn why from a heartbeat.
  // 0: keep serving.
  int failed_exit_ms = 10000;
  // Durable state. Neither: kept in memory only (a killed coordinator ends
  // the job). data_dir: a local RocksDB in this directory. coordination:
  // zk://HOST:PORT[,HOST:PORT...]/PATH, ZooKeeper, with a leader election
  // among the coordinators given the same PATH (takes precedence).
  std::string data_dir;
  std::string coordination;
  // The file system the data_dir state store reads and writes through
  // (nullptr: the real one). Tests pass a FaultInjectingFileSystem
  // (storage/fault_injecting_fs.h) to fail its writes (ENOSPC, EIO).
  std::shared_ptr<rocksdb::FileSystem> file_system;
  // ZooKeeper session timeout: a crashed leader is replaced about this long
  // after it died (at most twice that). Servers' and workers'
  // --coordinator_timeout_ms must exceed 2x this plus heartbeat_timeout_ms.
  int zk_session_timeout_ms = 4000;
  // Time source of heartbeat timeouts, checkpoint schedules and deadlines
  // (nullptr: real time). Tests pass a FakeClock. Must outlive the
  // coordinator.
  const Clock* clock = nullptr;
  // Prometheus metrics (coordinator/coordinator_metrics.h) are kept in this
  // registry; nullptr: none. Borrowed; must outlive the coordinator.
  metrics::Registry* metrics = nullptr;
  // Structured events (docs/events.md; process "coordinator"): appended to
  // this JSON Lines file (O_APPEND, so other processes of the job may share
  // it); empty: no file. Either way the last events_ring of them are kept
  // in memory for `relaxps-ctl events [--follow]` (GET_EVENTS). A larger
  // ring lets a follower that fell behind catch up; each line is ~200 bytes.
  std::string events_file;
  int events_ring = 4096;

  Status Validate() const;
};

// The exit status of relaxps-coordinator for each way a job ends (docs/events.md,
// "Exit codes"; 1 and 2 are start-up errors and bad flags, as before).
constexpr int kExitDone = 0;          // Ended as configured, or stopped when told to.
constexpr int kExitStartupError = 1;  // Could not start (bind, state store, metrics port).
constexpr int kExitUsage = 2;         // Bad flags.
constexpr int kExitJobFailed = 3;     // The recovery policy failed the job (a lost server...).
constexpr int kExitWorkersLost = 4;   // Over, but worker(s) failed or went silent.
constexpr int kExitSteppedDown = 5;   // Lost its leadership or its state store.
constexpr int kExitInterrupted = 6;   // Stopped (SIGTERM/SIGINT) before its job ended.

// How a job ended, once Coordinator::Run() returned: the job_end event, the
// one-line reason relaxps-coordinator prints, and its exit status.
struct JobEnd {
  // done | stopped | failed | workers_lost | workers_failed | stepped_down |
  // interrupted
  std::string verdict;
  std::string reason;  // One line for people.
  int exit_code = kExitDone;
};

class Coordinator {
 public:
  static StatusOr<std::unique_ptr<Coordinator>> Start(const CoordinatorOptions& options);

  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;
  virtual ~Coordinator() = default;

  virtual const std::string& endpoint() const = 0;
  // True while this coordinator leads (always, without coordination).
  // Safe from any thread.
  virtual bool leading() const = 0;
  // Serves until Stop(), the end of the job or its failure (see
  // CoordinatorOptions::exit_when_done and failed_exit_ms).
  virtual void Run() = 0;
  virtual void Stop() = 0;
  // After Run() returned: OK (stopped, or the job ended in order) or
  // Aborted naming why the job failed.
  virtual Status result() const = 0;
  // After Run() returned: how the job ended (verdict, reason, exit status).
  // Also emitted as the job_end event. "done" only when the job ended as
  // configured: relaxps-ctl shutdown, or (exit_when_done) every expected
  // worker finished or left; a worker that reported finishing
  // (Client::ReportFinished) counts even if its goodbye was lost, and one
  // that reported an error makes it "workers_failed".
  // Stopped by Stop() before that: "stopped" (exit 0) for a standby or a
  // coordinator that does not end the job itself (exit_when_done off or no
  // num_workers: its launcher does), else "interrupted".
  virtual JobEnd job_end() const = 0;

 protected:
  Coordinator() = default;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_COORDINATOR_H_
