// ServerTokens: which member token each of the job's servers holds now, as
// a server learns them from the coordinator (wire::ServerTokens, with every
// shard map and live set the coordinator sends it), and the check of
// server-to-server messages against them (docs/security.md).
//
// Chain replication's forwarded updates, CHAIN_COMPLETE and CHAIN_SNAPSHOT
// name the server that sends them (Header.from_server) and carry its member
// token; a server applies one only if the token is that server's current
// one. A restarted server registers again and gets a new token: the old
// one is revoked with the next set, and a server the coordinator no longer
// counts as live is in no set at all.
//
// Thread-safety: none; the server's loop thread (and Init()).
#ifndef RELAXPS_SERVER_INTERNAL_SERVER_TOKENS_H_
#define RELAXPS_SERVER_INTERNAL_SERVER_TOKENS_H_

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "proto/relaxps.pb.h"

namespace relaxps {
namespace server_internal {

class ServerTokens {
 public:
  ServerTokens() = default;
  ServerTokens(const ServerTokens&) = delete;
  ServerTokens& operator=(const ServerTokens&) = delete;

  // Adopts `tokens` unless it is older (map_version) than the set held; a
  // set of the same version replaces it. InvalidArgument (nothing changes)
  // for a malformed set: ids and tokens of different lengths, a negative or
  // repeated id, a token of the wrong size.
  Status Update(const wire::ServerTokens& tokens);

  // OK when `h` names the server that sends it (from_server) and carries
  // that server's current token; PermissionDenied saying which otherwise.
  // The error names no token and no other server's state.
  Status Check(const wire::Header& h) const;

  uint64_t version() const { return version_; }
  size_t size() const { return tokens_.size(); }

 private:
  uint64_t version_ = 0;
  std::map<int, std::string> tokens_;  // Server id -> its current token.
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_SERVER_TOKENS_H_
