// RecoveryPolicy: what a job does when one of its servers is lost.
//
// Chosen per job with the coordinator's --recovery flag and announced to
// every member at registration. A policy is a rule the coordinator (and, as
// policies grow, servers and clients) consult at the decision points of a
// failure; the mechanisms (checkpoints, membership, shard maps) live
// elsewhere.
//
// Thread-safety: policies are immutable and safe to share.
#ifndef RELAXPS_COORDINATOR_RECOVERY_POLICY_H_
#define RELAXPS_COORDINATOR_RECOVERY_POLICY_H_

#include <memory>
#include <string>

#include "common/status.h"

namespace relaxps {

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

  virtual const char* Name() const = 0;
  // What the coordinator does when a server misses its heartbeats.
  virtual OnServerLoss on_server_loss() const = 0;
  // Advice logged next to the loss, for the person or script supervising
  // the job ("" for none).
  virtual std::string RestartAdvice(int server_id) const = 0;
};

// "none", "checkpoint" or "chain". InvalidArgument for an unknown name;
// "stateless" and "hybrid" (designed in DESIGN.md, not built yet) are refused
// with a message saying so rather than silently behaving like another policy.
StatusOr<std::unique_ptr<RecoveryPolicy>> NewRecoveryPolicy(const std::string& name);

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_RECOVERY_POLICY_H_
