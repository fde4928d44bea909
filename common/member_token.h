// Member tokens and message roles (docs/security.md).
//
// Registration hands each member (worker, server) and each session
// (observer, operator: relaxps-ctl, the evaluator) a random token; every
// later message carries it (Header.member_token), and the coordinator and
// the servers accept a member's message only with the token of its newest
// registration. Under --security=curve each key also has a role (its .pub
// file, common/curve_auth.h), and each message kind is allowed only for the
// roles that need it (RoleMaySend).
//
// Thread-safety: free functions without shared state.
#ifndef RELAXPS_COMMON_MEMBER_TOKEN_H_
#define RELAXPS_COMMON_MEMBER_TOKEN_H_

#include <cstdint>
#include <string>

#include "common/status.h"
#include "proto/relaxps.pb.h"

namespace relaxps {

// Bytes of a member token.
constexpr size_t kMemberTokenBytes = 16;

// A fresh random token (kMemberTokenBytes from the OS's random source;
// never all zero, which on the wire means none).
std::string NewMemberToken();

// A token as a header carries it (Header.member_token_hi/lo): bytes 0-7
// and 8-15, big-endian. All zero: none.
struct WireToken {
  uint64_t hi = 0;
  uint64_t lo = 0;
};
// The wire form of a kMemberTokenBytes token (all zero for another size).
WireToken ToWireToken(const std::string& token);
// Sets `header`'s token fields (no allocation).
void SetMemberToken(const WireToken& token, wire::Header* header);
inline void SetMemberToken(const std::string& token, wire::Header* header) {
  SetMemberToken(ToWireToken(token), header);
}
// The token `header` carries, as kMemberTokenBytes bytes ("" if none).
std::string HeaderToken(const wire::Header& header);
// Whether `header` carries the token `expected`, in time independent of
// where they differ. False when `expected` is empty (nobody matches).
bool HeaderCarriesToken(const wire::Header& header, const std::string& expected);

// The roles of a job's principals.
enum class Role { kWorker, kServer, kOperator, kObserver, kCoordinator };
constexpr Role kAllRoles[] = {Role::kWorker, Role::kServer, Role::kOperator, Role::kObserver,
                              Role::kCoordinator};

// "worker", "server", "operator", "observer", "coordinator".
const char* RoleName(Role role);
// The inverse of RoleName; InvalidArgument naming the valid ones otherwise.
StatusOr<Role> ParseRole(const std::string& name);

// Whether a principal of `role` may send a message of kind `type` (to the
// coordinator or a server). `forwarded`: a chain replica's forwarded update
// (Header.forwarded), which only servers send. Replies are not requests and
// are allowed for nobody.
//   worker:      REGISTER, HEARTBEAT, DEREGISTER, CREATE_TABLE, GET_SHARD_MAP,
//                GET_STATUS, SEED_COPY, BARRIER, SET_LEARNING_RATE, PUSH,
//                PULL, PUSH_PULL, PUSH_ROWS, PULL_ROWS, CLOCK, SERVER_STATS, PING
//   server:      REGISTER, HEARTBEAT, DEREGISTER, GET_SHARD_MAP, GET_STATUS,
//                CHAIN_SNAPSHOT, CHAIN_COMPLETE, forwarded updates
//   operator:    REGISTER, CREATE_TABLE, GET_SHARD_MAP, GET_STATUS, GET_EVENTS,
//                SHUTDOWN, TRIGGER_CHECKPOINT, SET_LEARNING_RATE, PULL,
//                PULL_ROWS, SERVER_STATS, LIST_CHECKPOINTS
//   observer:    REGISTER, GET_SHARD_MAP, GET_STATUS, GET_EVENTS, PULL,
//                PULL_ROWS, SERVER_STATS, LIST_CHECKPOINTS
//   coordinator: INSTALL_MAP, WORKER_SET, CHECKPOINT, SEED, PING,
//                SERVER_STATS, LIST_CHECKPOINTS
bool RoleMaySend(Role role, wire::MsgType type, bool forwarded = false);

}  // namespace relaxps

#endif  // RELAXPS_COMMON_MEMBER_TOKEN_H_
