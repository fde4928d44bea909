// ServerRecovery: the server's side of a recovery policy
// (include/relaxps/recovery_policy.h, docs/recovery.md).
//
// Every server builds its role object once it knows its job
// (NewRecoveryPolicy(job.recovery())->NewServerRecovery()) and asks it at
// the decision points where policies differ; the mechanisms it drives live
// in server/ and never ask which policy runs:
//  - write_rule(): what a write (a push, a CLOCK, a BSP round completion)
//    must do before it is acknowledged: be applied to this server's copy, or
//    be forwarded along its range's chain of replicas and acknowledged by the
//    tail. The second runs the chain mechanism (chain store tables
//    "name@begin", sparse buckets, forwarding, fences, state transfer); which
//    servers are in a range's chain, and its head, come from the shard map.
//  - OnStarted(): how the server came up (empty, restored from a checkpoint,
//    waiting to be seeded by the workers, joining its chains as tail): the
//    mechanisms decide that from its flags and its registration; the policy
//    learns it here (e.g. to hold new pushes until replayed ones are in).
//  - AdmitRequest(): each data request from a worker before the server acts
//    on it (e.g. hold new pushes until the replayed ones are in). The
//    exactly-once check of a push comes after it: a resent or replayed part
//    the state reflects already is acknowledged without being applied.
//  - OnDeclaredDead(): what the server does when the coordinator declared it
//    dead (a heartbeat answered NotFound, e.g. after a SIGSTOP past the
//    heartbeat timeout): rejoin its chains as tail after a fence, restart in
//    place (from its latest checkpoint, or empty to be re-seeded), or exit
//    with advice naming the restart flags (RecoveryNeeds::restart_flags).
//  - RebuildsRoundsFromReplay(): whether a server restored from a checkpoint
//    holds the live workers' clocks so that the pushes they replay re-form
//    its BSP rounds (instead of jumping to the workers' current clocks).
//
// Mechanisms every policy gets (server/): the exactly-once record of each
// range or bucket (per worker incarnation: the push ids applied recently and
// how many push parts the state reflects, ServerStats.applied_parts; a BSP
// push waiting for its round is pending, recognized as a duplicate but
// neither counted nor saved until its round is applied) is part of the
// range's state: saved in the server's store with every flush and
// checkpoint (so a server restored from a checkpoint knows exactly which
// pushes its state reflects, and a replayed one it reflects is acknowledged
// without being applied again) and carried to a joining chain replica by the
// state transfer. Every reply to a PUSH, PUSH_PULL or PUSH_ROWS carries
// Header.snapshot_seq (the seq of the newest checkpoint whose state this
// server had captured when it replied; a restored server starts from its
// checkpoint's) and, for a PUSH or PUSH_ROWS accepted into a BSP round not
// applied yet, Header.pending (a resend of such a push is acknowledged the
// same way: pending, not applied twice).
//
// Writing the server side of a new policy (e.g. replay: checkpoint restarts
// plus the workers' replay of their logged pushes): derive from
// ServerRecovery (or from a policy that does most of it, e.g.
// recovery/checkpoint/checkpoint_server.h), implement the hooks, and return
// it from the policy's definition; nothing in server/ changes.
//
// Thread-safety: OnDeclaredDead() runs on the server's heartbeat thread and
// must only read the role object's constant state and the ServerJobInfo it
// is given; every other hook runs on the server's loop thread. A role object
// belongs to one server.
#ifndef RELAXPS_RECOVERY_SERVER_RECOVERY_H_
#define RELAXPS_RECOVERY_SERVER_RECOVERY_H_

#include <string>
#include <vector>

#include "common/wire.h"
#include "proto/relaxps.pb.h"
#include "relaxps/recovery_policy.h"
#include "relaxps/status.h"

namespace relaxps {
namespace recovery {

// What a write must do before the server acknowledges it.
enum class WriteRule {
  // Applied to this server's copy (and, with store.wal_per_update, synced)
  // before it is acknowledged.
  kApplyLocally,
  // Every range (and sparse bucket) is a chain of replicas (the map's
  // `chain`): the head applies a write, numbers and forwards it; each
  // replica applies it in order and forwards it on; the head acknowledges it
  // once the tail has it. A server declared dead can rejoin its chains as
  // tail after a state transfer.
  kForwardAlongChain,
};

// Facts about a server and its job that a role object decides from. Filled
// by the server (mechanism inputs: its flags, its registration, its disk).
struct ServerJobInfo {
  int server_id = -1;
  // Servers the job gives each range (JobConfig.replicas; 1: no chains).
  int replicas = 1;
  // The store in effect ("memory", "rocksdb"; ParamStoreOptions::ResolvedKind).
  std::string store_kind;
  // Root of this server's checkpoints ("" without a data dir).
  std::string checkpoint_root;
  // Complete checkpoints under checkpoint_root (0 if none).
  int complete_checkpoints = 0;
  // The server opened its store from a checkpoint (--restore_from).
  bool restored = false;
  // The coordinator has the server wait for the workers' SEED before it
  // serves (it replaced a lost server whose ranges the workers hold).
  bool awaits_seed = false;
  // The job policy's options with their values (JobConfig.recovery_options;
  // RecoveryNeeds::options).
  RecoveryOptionValues options;
};

// What a server declared dead does (OnDeclaredDead).
struct DeadServerPlan {
  enum class Action {
    // Fence every replica (drop its state and chain position: no split
    // brain), register again with the same id and rejoin each chain as tail
    // after a state transfer, without leaving Run().
    kRejoinChains,
    // Run() returns Aborted and Server::restart_in_place() tells the caller
    // (relaxps-server re-executes itself) to come back as a fresh process
    // with the same id and `restart_flags`.
    kRestartInPlace,
    // Run() returns Aborted naming `advice`; a person or a launcher restarts
    // it (or the job has failed).
    kExit,
  };
  Action action = Action::kExit;
  // kRestartInPlace: flags the restarted process gets besides --server_id
  // (e.g. {"--restore_from=latest"}; empty: its own data dir, or empty).
  std::vector<std::string> restart_flags;
  // kRestartInPlace: how it comes back, completing "restarting in place "
  // in Run()'s status and the log ("to be re-seeded from the workers").
  // kExit: what to do, completing "exiting: " ("restart it with ...").
  std::string advice;
};

// The advice of a kExit plan: "restart it with --server_id=<id>[ <flags>] to
// rejoin (under --recovery=none the job has failed)".
inline std::string RestartAdvice(int server_id, const std::string& restart_flags) {
  return "restart it with --server_id=" + std::to_string(server_id) +
         (restart_flags.empty() ? "" : " " + restart_flags) +
         " to rejoin (under --recovery=none the job has failed)";
}

class ServerRecovery {
 public:
  ServerRecovery() = default;
  ServerRecovery(const ServerRecovery&) = delete;
  ServerRecovery& operator=(const ServerRecovery&) = delete;
  virtual ~ServerRecovery() = default;

  // The policy's name, for logs.
  virtual const char* Name() const = 0;

  // What a write must do before it is acknowledged, for the whole life of
  // the server (asked once, after registration, before the first map is
  // installed). Must depend only on `job`.
  virtual WriteRule write_rule(const ServerJobInfo& job) const = 0;

  // Under kForwardAlongChain: how many updates of a range (or bucket) its
  // head may acknowledge before the tail acknowledged them: an update with
  // sequence number s is acknowledged to its worker (and a pull answered
  // with state up to s) once update s - lag is on every replica. 0: once s
  // itself is (synchronous replication: a head failure loses nothing
  // acknowledged); > 0: asynchronous replication, a head failure may lose
  // up to `lag` acknowledged updates per range. Asked once with
  // write_rule(); must depend only on `job`.
  virtual int64_t ReplicationLag(const ServerJobInfo& job) const {
    (void)job;
    return 0;
  }

  // Whether a checkpoint holds the workers' writes (PUSH, PUSH_PULL,
  // PUSH_ROWS, CLOCK; neither applied nor acknowledged; pulls are served,
  // but for a worker's pulls after a write of its own that is held) from
  // the moment this server captures its state until the snapshot is durable
  // (or failed) and the coordinator has the server's answer: then no write
  // is acknowledged that a restart from this checkpoint would lose before
  // the snapshot exists (synchronous checkpointing). The time writes waited is reported (event
  // checkpoint_writes_held). Asked once with write_rule(); must depend only
  // on `job`.
  virtual bool HoldsWritesDuringCheckpoint(const ServerJobInfo& job) const {
    (void)job;
    return false;
  }

  // Whether a server restored from a checkpoint re-forms its BSP rounds from
  // the pushes the workers replay (asked once, after registration, before
  // the first map and live worker set are installed; must depend only on
  // `job`, e.g. `job.restored`). True: the workers live when the server
  // first learns the live set are held on every shard it restored
  // (server/internal/dense_shard.h): each one's clock starts at the shard's
  // restored clock and rises only through its own pushes (replayed or not)
  // and CLOCKs, not through the clocks the coordinator reports, until that
  // worker's first data request that is not marked Header.replayed reaches
  // this server (the client sends nothing new before its replay to this
  // server is done); then its reported clock applies again. So the replayed
  // pushes fill the rounds they were made for and each round is applied
  // once, in clock order, and the job ends as it would have without the
  // failure. Workers that join later are not held. Async and SSP are
  // unaffected but for pulls that wait for the held clocks. A policy that
  // returns true must have its workers replay, then send something new
  // (a push, pull or CLOCK) to each restored server: until then rounds that
  // need a held worker stay open.
  virtual bool RebuildsRoundsFromReplay(const ServerJobInfo& job) const {
    (void)job;
    return false;
  }

  // The server registered, installed its first map and is about to serve.
  virtual void OnStarted(const ServerJobInfo& job) { (void)job; }

  // A newer live worker set was installed (ids ascending).
  virtual void OnLiveWorkers(const std::vector<int>& workers) { (void)workers; }

  // A data request from a worker or an observer (PUSH, PULL, PUSH_PULL,
  // PUSH_ROWS, PULL_ROWS, CLOCK; Header.replayed marks a push replayed from
  // a worker's log) before the server acts on it, once it serves (not while
  // it waits for a SEED); not asked for updates forwarded along a chain. A
  // non-OK status is the reply, counted as rejected (Unavailable: the
  // client retries later); OK lets it through to the exactly-once check and
  // the data path. Loop thread; must not block.
  virtual Status AdmitRequest(const wire::Header& request) {
    (void)request;
    return Status::OK();
  }

  // The coordinator declared this server dead. Heartbeat thread; must not
  // block.
  virtual DeadServerPlan OnDeclaredDead(const ServerJobInfo& job) const = 0;
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_SERVER_RECOVERY_H_
