// RecoveryPolicy: what a job does when one of its servers is lost.
//
// A policy is a plug-in (docs/recovery.md, "Writing a recovery policy"): it
// lives in its own folder recovery/<name>/, registers itself by name in one
// registry (recovery/registry.cc), declares what it needs from the tools that
// run it (RecoveryNeeds), and gives each role of the job an object of its own:
// the coordinator, every server and every client ask theirs at the decision
// points of a failure (recovery/coordinator_recovery.h, server_recovery.h,
// client_recovery.h). The mechanisms those objects drive (chain forwarding,
// state transfer, checkpoint writing, re-seeding, parking and resending
// requests) live in coordinator/, server/ and client/, which never ask which
// policy runs. Policy names are parsed here and nowhere else.
//
// Chosen per job with the coordinator's --recovery flag and announced to
// every member at registration.
//
// Thread-safety: policies are immutable and safe to share; the role objects
// they make say their own rules.
#ifndef RELAXPS_RECOVERY_POLICY_H_
#define RELAXPS_RECOVERY_POLICY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "relaxps/status.h"

namespace relaxps {

namespace recovery {
class ClientRecovery;
class CoordinatorRecovery;
class ServerRecovery;
struct ClientRecoveryOptions;
}  // namespace recovery

// How a lost server comes back under a policy: what a launcher (or a person)
// does after a server died.
enum class RestartRule {
  kNever,                 // It does not: the job fails (none).
  kSameIdFromCheckpoint,  // Restart it with its id; it restores the latest complete checkpoint.
  kSameIdReseeded,        // Restart it with its id; it starts empty and the workers seed it.
  kSameIdRejoinsAsTail,   // Restart it with its id; it copies its ranges from a live replica.
};
// "never", "same-id-from-checkpoint", "same-id-reseeded", "same-id-rejoins-as-tail".
const char* RestartRuleName(RestartRule rule);

// An option of a policy: a variant of it chosen per job with the
// coordinator flag of the same name (--replication=async), validated there
// and announced to every member at registration (JobConfig.recovery_options)
// with the defaults filled in. Role objects read the values from their job
// info (recovery/*_recovery.h).
struct RecoveryOption {
  // The coordinator flag without dashes ("replication").
  std::string flag;
  // The values it takes, the default first ("sync", "async"); empty: an
  // integer >= min_value.
  std::vector<std::string> choices;
  int64_t min_value = 0;
  // The value when the flag is not given (choices: the first one).
  std::string default_value;
  // One line for --recovery=help: what each value promises and costs.
  std::string description;
};

// Option values of a job's policy, by flag ("replication" -> "async").
using RecoveryOptionValues = std::map<std::string, std::string>;

// The value of option `flag` in `values`, or `fallback` if absent.
std::string RecoveryOptionValue(const RecoveryOptionValues& values, const std::string& flag,
                                const std::string& fallback);
// The same, as an integer (`fallback` if absent or not a number: values
// announced by a coordinator were validated by ResolveRecoveryOptions).
int64_t RecoveryOptionInt(const RecoveryOptionValues& values, const std::string& flag,
                          int64_t fallback);

// What a policy needs from the job and the tools that run it. Launchers,
// chaos schedules and the experiment harness read this (relaxps-coordinator
// --recovery=help, relaxps-ctl policies) instead of knowing policies.
struct RecoveryNeeds {
  // Fewest servers a job under the policy may have.
  int min_servers = 1;
  // Servers the experiment harness (scripts/experiment.sh) runs it with.
  int experiment_servers = 1;
  // Servers holding each range (> 1: ranges are chains of replicas; the
  // coordinator's --replicas chooses between this and --num_servers).
  int min_replicas = 1;
  // "any", or the store a server must use for the policy to keep its
  // promise ("rocksdb": a restarted server restores its own checkpoints).
  std::string store_kind = "any";
  RestartRule restart = RestartRule::kNever;
  // Flags a restarted server is given besides --server_id (e.g.
  // "--restore_from=latest", which a launcher gives only to a server that
  // has written a checkpoint).
  std::string restart_flags;
  // The faults a job under the policy trains through (a launcher draws only
  // these in a chaos schedule).
  bool tolerates_server_loss = false;  // One server at a time.
  bool tolerates_chain_loss = false;   // Every replica of a range at once.
  bool tolerates_pause = false;        // A server paused (SIGSTOP) past its heartbeat timeout.
  // A restarted server's state rolls back to its checkpoint: the updates
  // acknowledged after it are lost (workers keep their clocks).
  bool rolls_back = false;
  // Its options (variants chosen with coordinator flags), in the order
  // --recovery=help lists them; empty: none.
  std::vector<RecoveryOption> options;
};

class RecoveryPolicy {
 public:
  RecoveryPolicy() = default;
  RecoveryPolicy(const RecoveryPolicy&) = delete;
  RecoveryPolicy& operator=(const RecoveryPolicy&) = delete;
  virtual ~RecoveryPolicy() = default;

  // The name --recovery takes ("chain").
  virtual const char* Name() const = 0;
  // One line for --recovery=help.
  virtual const char* Description() const = 0;
  virtual const RecoveryNeeds& needs() const = 0;

  // The role objects. Each call makes a new one, owned by the caller.
  virtual std::unique_ptr<recovery::CoordinatorRecovery> NewCoordinatorRecovery() const = 0;
  virtual std::unique_ptr<recovery::ServerRecovery> NewServerRecovery() const = 0;
  virtual std::unique_ptr<recovery::ClientRecovery> NewClientRecovery(
      const recovery::ClientRecoveryOptions& options) const = 0;
};

// The registered policy named `name`; InvalidArgument naming the known ones
// otherwise.
StatusOr<std::unique_ptr<RecoveryPolicy>> NewRecoveryPolicy(const std::string& name);
// Every registered policy's name, in registration order.
std::vector<std::string> RecoveryPolicyNames();
// OK if `name` is a registered policy; InvalidArgument naming the known ones.
Status CheckRecoveryPolicyName(const std::string& name);
// Every option of policy `policy` with its value: `given` (the coordinator
// flags that were set) with the defaults filled in. InvalidArgument, naming
// the flag, for an option the policy does not have (and which policies
// have it) or a value it does not take.
StatusOr<RecoveryOptionValues> ResolveRecoveryOptions(const std::string& policy,
                                                      const RecoveryOptionValues& given);
// The flags of every registered policy's options, each once (a coordinator
// collects the ones set from these).
std::vector<std::string> RecoveryOptionFlags();
// The registered policies: a table for people, or with `json` one JSON array
// of {name, description, needs} for scripts (docs/recovery.md); needs lists
// the options: [{flag, choices, min_value, default, description}].
std::string DescribeRecoveryPolicies(bool json);

}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_POLICY_H_
