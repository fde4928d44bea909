// --recovery=chain: every range is a chain of replicas; the head applies and forwards, the tail acknowledges; a lost server is spliced out and rejoins as tail.
//
// The policy's definition (registry.h) and its role objects, one file each:
// chain_coordinator.cc, chain_server.cc, chain_client.cc. Only recovery/
// includes this header.
#ifndef RELAXPS_RECOVERY_CHAIN_CHAIN_H_
#define RELAXPS_RECOVERY_CHAIN_CHAIN_H_

#include <memory>

#include "recovery/registry.h"

namespace relaxps {
namespace recovery {

const PolicyDefinition& ChainPolicy();

// --replication and --replication_max_lag (RecoveryNeeds::options): whether
// the head acknowledges a write once the tail has it, or after applying it
// with at most max_lag updates per range not yet on the tail.
inline constexpr const char* kReplicationFlag = "replication";
inline constexpr const char* kReplicationSync = "sync";
inline constexpr const char* kReplicationAsync = "async";
inline constexpr const char* kReplicationMaxLagFlag = "replication_max_lag";
// The lag of --replication=async under the policy's options `options` (0
// under sync).
int64_t ReplicationLag(const RecoveryOptionValues& options);

std::unique_ptr<CoordinatorRecovery> NewChainCoordinatorRecovery();
std::unique_ptr<ServerRecovery> NewChainServerRecovery();
std::unique_ptr<ClientRecovery> NewChainClientRecovery(const ClientRecoveryOptions& options);

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_CHAIN_CHAIN_H_
