// Who may send what: member tokens and, under --security=curve, the roles of
// keys (docs/security.md). Loop thread.
#include "coordinator/internal/coordinator_impl.h"

#include "common/member_token.h"

namespace relaxps {
namespace coordinator_internal {

namespace {

// The refusal of a message without the right token. Names no identity and
// no member's state: a stranger learns only that it was refused.
Status TokenRefused(wire::MsgType type, const std::string& whom) {
  return PermissionDeniedError(wire::MsgType_Name(type) + " refused: the message does not carry " +
                               whom + "'s member token (only the process that registered, with "
                               "the token its registration returned, may send it)");
}

}  // namespace

Status CoordinatorImpl::CheckRole(const Request& req) const {
  const std::string& u = req.user_id;
  if (u.empty()) return Status::OK();  // Plain TCP.
  const wire::Header& h = req.msg.header;
  const Principal p = PrincipalOf(u);
  if (!p.known || !RoleMaySend(p.role, h.type())) {
    return PermissionDeniedError("key '" + (p.known ? p.name : u) + "' (role " +
                                 (p.known ? RoleName(p.role) : "unknown") + ") may not send " +
                                 wire::MsgType_Name(h.type()));
  }
  bool ok = true;
  switch (h.type()) {
    case wire::REGISTER: {
      const wire::RegisterRequest& r = h.register_request();
      if (r.role() == "observer" || r.role() == "operator") {
        ok = RoleAllows(u, r.role());
      } else {
        ok = r.requested_id() >= 0 && RoleAllows(u, r.role(), r.requested_id());
      }
      break;
    }
    case wire::HEARTBEAT:
      ok = RoleAllows(u, h.heartbeat().role(), h.heartbeat().id());
      break;
    case wire::DEREGISTER:
      ok = h.heartbeat().role() == "server" ? RoleAllows(u, "server", h.heartbeat().id())
                                            : RoleAllows(u, "worker", h.sender());
      break;
    case wire::SEED_COPY:
    case wire::BARRIER:
      ok = RoleAllows(u, "worker", h.sender());
      break;
    case wire::CREATE_TABLE:
    case wire::SET_LEARNING_RATE:
      ok = h.sender() < 0 ? RoleAllows(u, "operator") : RoleAllows(u, "worker", h.sender());
      break;
    default:
      break;
  }
  if (ok) return Status::OK();
  return PermissionDeniedError("key '" + p.name + "' may not send " + wire::MsgType_Name(h.type()) +
                               " as claimed (under --security=curve a server or worker "
                               "registers with the id of its key)");
}

Status CoordinatorImpl::CheckMemberToken(const wire::Header& h, const std::string& role,
                                         int id) const {
  const wire::MsgType type = h.type();
  const auto& members = role == "server" ? members_.servers() : members_.workers();
  auto it = members.find(id);
  const std::string whom = role + " " + std::to_string(id);
  if (it == members.end()) {
    if (type == wire::HEARTBEAT) {
      return NotFoundError(whom + " is not a member of this job; register");
    }
    return PermissionDeniedError(wire::MsgType_Name(type) + " refused: " + whom +
                                 " is not a member of this job");
  }
  if (HeaderCarriesToken(h, it->second.token)) return Status::OK();
  if (type == wire::HEARTBEAT) {
    // A member whose re-registration reply was lost holds a revoked token:
    // it registers again (a stranger's heartbeat changes nothing).
    return NotFoundError(whom + " with this member token is not a member (revoked by a newer "
                         "registration?); register again");
  }
  return TokenRefused(type, whom);
}

Status CoordinatorImpl::CheckSession(const wire::Header& h, bool operator_only) {
  const wire::MsgType type = h.type();
  const std::string token = HeaderToken(h);
  auto it = sessions_.find(token);
  if (token.empty() || it == sessions_.end() || (operator_only && it->second.role != "operator")) {
    return PermissionDeniedError(
        wire::MsgType_Name(type) + " refused: it needs the member token of an operator session " +
        "(relaxps-ctl registers one; under --security=curve with an operator key)");
  }
  it->second.last_used_ms = clock_->NowMs();
  return Status::OK();
}

Status CoordinatorImpl::CheckToken(const Request& req) {
  const wire::Header& h = req.msg.header;
  switch (h.type()) {
    case wire::REGISTER:
    case wire::GET_SHARD_MAP:
    case wire::GET_STATUS:
    case wire::GET_EVENTS:
      // Registration, and the read-only queries (under --security=curve only
      // from keys whose role reads; under plain TCP from anyone who can
      // connect, docs/security.md).
      return Status::OK();
    case wire::HEARTBEAT:
      return CheckMemberToken(h, h.heartbeat().role() == "server" ? "server" : "worker",
                              h.heartbeat().id());
    case wire::DEREGISTER:
      if (h.heartbeat().role() == "server") {
        return CheckMemberToken(h, "server", h.heartbeat().id());
      }
      return CheckMemberToken(h, "worker", h.sender());
    case wire::SEED_COPY:
      if (h.seed_data().worker() != h.sender()) {
        return PermissionDeniedError("SEED_COPY refused: its copy names worker " +
                                     std::to_string(h.seed_data().worker()) + ", not its sender");
      }
      return CheckMemberToken(h, "worker", h.sender());
    case wire::BARRIER:
      return CheckMemberToken(h, "worker", h.sender());
    case wire::CREATE_TABLE:
    case wire::SET_LEARNING_RATE:
      if (h.sender() >= 0) return CheckMemberToken(h, "worker", h.sender());
      return CheckSession(h, /*operator_only=*/true);
    case wire::SHUTDOWN:
    case wire::TRIGGER_CHECKPOINT:
    case wire::ADD_SERVER:
    case wire::DRAIN_SERVER:
      return CheckSession(h, /*operator_only=*/true);
    default:
      return InvalidArgumentError("the coordinator takes no " + wire::MsgType_Name(h.type()) +
                                  " (kind " + std::to_string(h.type()) + ")");
  }
}

std::string CoordinatorImpl::OpenSession(const std::string& role) {
  if (sessions_.size() >= kMaxSessions) {
    // The least recently used session goes (a relaxps-ctl long gone).
    auto oldest = sessions_.begin();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (it->second.last_used_ms < oldest->second.last_used_ms) oldest = it;
    }
    sessions_.erase(oldest);
  }
  std::string token = NewMemberToken();
  sessions_[token] = Session{role, clock_->NowMs()};
  return token;
}

}  // namespace coordinator_internal
}  // namespace relaxps
