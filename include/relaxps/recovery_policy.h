// RecoveryPolicy: what a job does when one of its servers is lost.
//
// Chosen per job with the coordinator's --recovery flag and announced to
// every member at registration. A policy is a rule that the coordinator,
// servers, clients and workers consult at the decision points of a failure;
// the mechanisms (checkpoints, membership, shard maps, request resends) live
// elsewhere. Nothing outside this module compares policy names: callers build
// a policy with NewRecoveryPolicy() and ask it.
//
// Thread-safety: policies are immutable and safe to share.
#ifndef RELAXPS_RECOVERY_POLICY_H_
#define RELAXPS_RECOVERY_POLICY_H_

#include <memory>
#include <string>

#include "relaxps/status.h"

namespace relaxps {

// The recovery policies of DESIGN.md.
enum class RecoveryMode { kNone, kCheckpoint, kChain, kStateless, kHybrid };

// "none", "checkpoint", "chain", "stateless" or "hybrid" -> the mode;
// InvalidArgument naming the bad value otherwise.
StatusOr<RecoveryMode> ParseRecoveryMode(const std::string& name);
// The name ParseRecoveryMode accepts for `mode`.
const char* RecoveryModeName(RecoveryMode mode);

class RecoveryPolicy {
 public:
  enum class OnServerLoss {
    kFailJob,         // End the job with an error naming the server (never hang).
    kAwaitRestart,    // Keep the job; the server restarts (from a checkpoint) with its id.
    kReconfigure,     // Remove it from its chains at once; a restart rejoins as tail.
  };

  RecoveryPolicy() = default;
  RecoveryPolicy(const RecoveryPolicy&) = delete;
  RecoveryPolicy& operator=(const RecoveryPolicy&) = delete;
  virtual ~RecoveryPolicy() = default;

  virtual RecoveryMode mode() const = 0;
  const char* Name() const { return RecoveryModeName(mode()); }
  // What the coordinator does when a server misses its heartbeats.
  virtual OnServerLoss on_server_loss() const = 0;
  // Advice logged next to the loss, for the person or script supervising
  // the job ("" for none).
  virtual std::string RestartAdvice(int server_id) const = 0;
  // Client side: true if a request whose server was lost (Unavailable,
  // DeadlineExceeded) is parked until the shard map names the server's new
  // endpoint and then sent again, instead of failing at once.
  virtual bool ResendsAcrossRestarts() const = 0;
  // True if dense ranges are held by chains of replicas (chain and
  // hybrid): clients send a range's requests to the head of its chain in the
  // current map, tag pushes with an exactly-once key, and re-route lost
  // requests to the new head after a reconfiguration.
  virtual bool ReplicatesServers() const { return false; }
  // Stateless servers: a server holds its ranges in memory only. While one
  // is lost, every worker trains on its own copy of the lost ranges (client:
  // Push / PushPull served locally); a server that registers for the lost
  // ranges is seeded by the coordinator from the workers' copies
  // (recovery/seed_merge.h) before anyone routes to it. Under hybrid (both
  // this and ReplicatesServers) a range goes local only once every replica
  // of its chain is lost.
  virtual bool TrainsThroughServerLoss() const { return false; }
};

// InvalidArgument for a value outside RecoveryMode.
StatusOr<std::unique_ptr<RecoveryPolicy>> NewRecoveryPolicy(RecoveryMode mode);

}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_POLICY_H_
