#include "server/internal/server_tokens.h"

#include <utility>

#include "common/member_token.h"

namespace relaxps {
namespace server_internal {

Status ServerTokens::Update(const wire::ServerTokens& tokens) {
  if (tokens.map_version() < version_) return Status::OK();  // Stale (reordered).
  if (tokens.ids_size() != tokens.tokens_size()) {
    return InvalidArgumentError("server tokens: " + std::to_string(tokens.ids_size()) +
                                " ids and " + std::to_string(tokens.tokens_size()) + " tokens");
  }
  std::map<int, std::string> next;
  for (int i = 0; i < tokens.ids_size(); ++i) {
    const int id = tokens.ids(i);
    if (id < 0 || tokens.tokens(i).size() != kMemberTokenBytes ||
        !next.emplace(id, tokens.tokens(i)).second) {
      return InvalidArgumentError("server tokens: entry " + std::to_string(i) + " (server " +
                                  std::to_string(id) + ") is negative, repeated or not a " +
                                  std::to_string(kMemberTokenBytes) + "-byte token");
    }
  }
  version_ = tokens.map_version();
  tokens_ = std::move(next);
  return Status::OK();
}

Status ServerTokens::Check(const wire::Header& h) const {
  const std::string kind = wire::MsgType_Name(h.type()) + (h.forwarded() ? " (forwarded)" : "");
  if (!h.has_from_server()) {
    return PermissionDeniedError(kind + " refused: a server-to-server message must name the "
                                 "server that sends it (from_server)");
  }
  auto it = tokens_.find(h.from_server());
  if (it == tokens_.end() || !HeaderCarriesToken(h, it->second)) {
    return PermissionDeniedError(kind + " refused: it does not carry the current member token "
                                 "of server " + std::to_string(h.from_server()) +
                                 " (only that server's live process may send it; a restart "
                                 "revokes the old token)");
  }
  return Status::OK();
}

}  // namespace server_internal
}  // namespace relaxps
