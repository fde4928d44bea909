// relaxps::Coordinator: the one-per-job control process.
//
// Holds the job configuration (consistency model, staleness bound, recovery
// policy), the membership of servers and workers (registration, heartbeats,
// failure detection), and the shard map of every table, with a version bumped
// at each change. Table creation installs the new map on every server before
// it is acknowledged, and a worker's registration is acknowledged only once
// every server knows it is live, so a BSP round can never close without it.
//
// With recovery policy "none", a server that misses its heartbeats fails the
// job: every client learns the reason from its next heartbeat. With
// "checkpoint", the job waits for the server to come back: a server that
// registers again with its old id (--server_id) gets the same shards. With
// "chain", every dense range and every sparse bucket is held by a chain of
// `replicas` servers; a
// server that dies (its connection closes and a probe confirms, or it misses
// its heartbeats) is removed from every chain at once: the job epoch and map
// version are bumped and the new map is installed on every live server; a
// server that registers again with its id joins its chains as tail after a
// state transfer from its predecessor.
// With "stateless", the job goes on while the server is lost (workers train
// on their own copies); a server that registers with the lost id is seeded
// from the workers' copies (coordinator/reseeder.h) before the shard map
// routes to it again. Each re-seed is logged as a "RESEED ..." line.
// With "hybrid", chains as under "chain"; a server lost while it held a range
// or sparse bucket alone leaves it stranded with it ("FALLBACK
// cause=all-replicas-lost" line): workers train on their copies, and the
// server that registers with that id, or a server with another id once the
// holder has been lost for spare_takeover_ms ("TAKEOVER" line), is seeded
// from them as under "stateless" (sparse rows: its checkpoint or the
// initializer plus the workers' merged row changes), or, if no worker sent a
// real copy, keeps what it loaded from its latest checkpoint plus the changes
// of workers that trained on the initializer ("FALLBACK
// cause=no-worker-copy"); then the other servers rejoin its chains as tail.
//
// Coordinated checkpoints (CheckpointScheduler): every
// checkpoint_every_clocks clocks of the slowest live worker, every
// checkpoint_every_s seconds, or on TRIGGER_CHECKPOINT (relaxps-ctl
// checkpoint), the coordinator sends CHECKPOINT to every server and records
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
// others answer every request with Unavailable naming the leader, and take
// over when its ZooKeeper session ends. A leader steps down (Run() returns
// Aborted) as soon as it loses its ZooKeeper connection or a state write
// fails (another coordinator claimed the store).
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

namespace relaxps {

namespace metrics {
class Registry;
}  // namespace metrics

struct CoordinatorOptions {
  // Endpoint to bind; the default lets the OS choose a port.
  std::string bind = "tcp://127.0.0.1:*";
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
  // See recovery/recovery_policy.h; Validate() refuses modes not built yet.
  RecoveryMode recovery = RecoveryMode::kNone;
  // --recovery=chain: servers holding each dense range (R). More survives
  // more simultaneous failures; each push crosses R servers before it is
  // acknowledged. 2 <= replicas <= num_servers.
  int replicas = 2;
  // Hash buckets of every sparse table, fixed when the table is created and
  // placed like dense ranges (0: one per server). More buckets spread a
  // table's load and re-replication over more chains; each bucket of a
  // request is one message.
  int sparse_buckets = 0;
  // --recovery=chain: a server whose connection closed is probed; no answer
  // within this long confirms the crash. Shorter fails over sooner.
  int probe_timeout_ms = 100;
  // A server registering with the id of a live server (a restart before the
  // old one was declared dead, or a forged REGISTER) is accepted only if the
  // old instance does not answer a probe within this long; otherwise it is
  // refused with PermissionDenied. Longer is safer on a loaded machine;
  // shorter lets a restarted server in sooner.
  int takeover_probe_ms = 500;
  // Most live workers at once; registrations beyond are refused
  // (FailedPrecondition). 0: 2 * num_workers (at least num_workers + 4) when
  // num_workers is set, else 4096. Bounds what a flood of fake
  // registrations can add to a BSP barrier.
  int max_workers = 0;
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
  // --recovery=stateless: how a re-registered server's ranges are rebuilt
  // from the workers' copies (recovery/seed_merge.h), and how long the
  // coordinator waits for the copies.
  SeedRule seed_rule = SeedRule::kFreshest;
  MergeRule merge_rule = MergeRule::kStaleness;
  int reseed_timeout_ms = 3000;
  // --recovery=hybrid: a server registering with another id than a stranded
  // holder's takes over what that holder held alone once it has been lost
  // this long (recovery/hybrid_fallback.h, PickStrandedForSpare). 0: at once
  // (training resumes on a server soonest); longer waits for the holder's own
  // restart (which may restore its own checkpoint).
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

  Status Validate() const;
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

 protected:
  Coordinator() = default;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_COORDINATOR_H_
