#include "common/member_token.h"

#include <sys/random.h>

#include <cerrno>
#include <random>

namespace relaxps {

std::string NewMemberToken() {
  std::string token(kMemberTokenBytes, '\0');
  size_t got = 0;
  while (got < token.size()) {
    const ssize_t n = getrandom(token.data() + got, token.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < token.size()) {  // No getrandom(): the C++ library's device.
    std::random_device rd;
    for (char& c : token) c = static_cast<char>(rd());
  }
  if (token == std::string(kMemberTokenBytes, '\0')) token.back() = 1;  // 2^-128.
  return token;
}

namespace {

uint64_t BigEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void PutBigEndian64(uint64_t v, char* p) {
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<char>(v & 0xff);
}

}  // namespace

WireToken ToWireToken(const std::string& token) {
  static_assert(kMemberTokenBytes == 16, "a token is two 64-bit words on the wire");
  WireToken t;
  if (token.size() != kMemberTokenBytes) return t;
  t.hi = BigEndian64(token.data());
  t.lo = BigEndian64(token.data() + 8);
  return t;
}

void SetMemberToken(const WireToken& token, wire::Header* header) {
  header->set_member_token_hi(token.hi);
  header->set_member_token_lo(token.lo);
}

std::string HeaderToken(const wire::Header& header) {
  if (header.member_token_hi() == 0 && header.member_token_lo() == 0) return "";
  std::string token(kMemberTokenBytes, '\0');
  PutBigEndian64(header.member_token_hi(), token.data());
  PutBigEndian64(header.member_token_lo(), token.data() + 8);
  return token;
}

bool HeaderCarriesToken(const wire::Header& header, const std::string& expected) {
  if (expected.size() != kMemberTokenBytes) return false;
  const WireToken want = ToWireToken(expected);
  // Branch-free: the time does not depend on where the tokens differ.
  return ((header.member_token_hi() ^ want.hi) | (header.member_token_lo() ^ want.lo)) == 0;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kWorker:
      return "worker";
    case Role::kServer:
      return "server";
    case Role::kOperator:
      return "operator";
    case Role::kObserver:
      return "observer";
    case Role::kCoordinator:
      return "coordinator";
  }
  return "?";
}

StatusOr<Role> ParseRole(const std::string& name) {
  for (Role r : kAllRoles) {
    if (name == RoleName(r)) return r;
  }
  return InvalidArgumentError("unknown role '" + name +
                              "' (one of worker, server, operator, observer, coordinator)");
}

bool RoleMaySend(Role role, wire::MsgType type, bool forwarded) {
  const bool worker = role == Role::kWorker, server = role == Role::kServer,
             op = role == Role::kOperator, observer = role == Role::kObserver,
             coordinator = role == Role::kCoordinator;
  if (forwarded) {
    // A chain head's update to its successor.
    return server && (type == wire::PUSH || type == wire::PUSH_PULL || type == wire::PUSH_ROWS ||
                      type == wire::CLOCK);
  }
  switch (type) {
    case wire::REGISTER:
      return worker || server || op || observer;
    case wire::HEARTBEAT:
    case wire::DEREGISTER:
      return worker || server;
    case wire::CREATE_TABLE:
      return worker || op;
    case wire::GET_SHARD_MAP:
    case wire::GET_STATUS:
      return worker || server || op || observer;
    case wire::SHUTDOWN:
    case wire::TRIGGER_CHECKPOINT:
    case wire::ADD_SERVER:
    case wire::DRAIN_SERVER:
      return op;
    case wire::SEED_COPY:
    case wire::BARRIER:
      return worker;
    case wire::SET_LEARNING_RATE:
      return worker || op;
    case wire::GET_EVENTS:
      return op || observer;
    case wire::PUSH:
    case wire::PUSH_PULL:
    case wire::PUSH_ROWS:
    case wire::CLOCK:
      return worker;
    case wire::PULL:
    case wire::PULL_ROWS:
      return worker || op || observer;
    case wire::INSTALL_MAP:
    case wire::WORKER_SET:
    case wire::CHECKPOINT:
    case wire::SEED:
    case wire::MOVE_RANGE:
      return coordinator;
    case wire::PING:
      return coordinator || worker;
    case wire::SERVER_STATS:
      return worker || op || observer || coordinator;
    case wire::LIST_CHECKPOINTS:
      return op || observer || coordinator;
    case wire::CHAIN_SNAPSHOT:
    case wire::CHAIN_COMPLETE:
    case wire::MOVE_STATE:
      return server;
    default:
      return false;  // MSG_UNKNOWN and kinds of a newer build.
  }
}

}  // namespace relaxps
