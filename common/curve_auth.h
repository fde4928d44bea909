// CurveZMQ authentication of a relaxps job (--security=curve).
//
// Keys: `relaxps-ctl keygen DIR` writes one key pair per principal:
// "coordinator", "server-<id>", "worker-<id>", "ctl" (relaxps-ctl, role
// operator) and "observer" (read-only tools, the evaluator), plus any
// NAME:operator or NAME:observer asked for. DIR/<name>.key holds the public
// and secret key (Z85, one per line, mode 0600); DIR/<name>.pub the public
// key and its role ("role=<role>", common/member_token.h: worker, server,
// operator, observer, coordinator; a .pub without that line has the role its
// name implies). A process needs its own .key and the .pub files; it never
// needs another principal's secret. A worker or server key is named by its
// id, which it is bound to.
//
// Every ROUTER is a CURVE server with its process's own key (the
// coordinator's, or server <id>'s) and admits, through a ZAP handler, only
// the public keys found in DIR/*.pub; the handler gives each connection the
// key's role and name as ZeroMQ's "User-Id" ("<role>:<name>",
// Request::user_id), which handlers check against the kind of a message
// (RoleMaySend) and the role and id it claims (RoleAllows). Every DEALER is a CURVE
// client with its own key, and authenticates its peer in turn: the
// coordinator by DIR/coordinator.pub, a server by the public key the shard
// map lists for it (ServerInfo.curve_public_key, which the coordinator fills
// from the key the server registered with). So no server can pose as the
// coordinator or as another server, even with its own valid key.
//
// Thread-safety: CurveKeys and CurveOptions are values; ZapHandler runs its
// own thread and is safe to destroy from any thread.
#ifndef RELAXPS_COMMON_CURVE_AUTH_H_
#define RELAXPS_COMMON_CURVE_AUTH_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "relaxps/curve_options.h"
#include "common/log_limiter.h"
#include "common/member_token.h"
#include "common/status.h"

namespace relaxps {

struct CurveKeys {
  std::string public_key;  // Z85, 40 characters.
  std::string secret_key;  // Z85, 40 characters.
};

// Writes key pairs for `names` into `dir` (created if needed): each "NAME"
// with the role DefaultRoleOf(NAME), or "NAME:ROLE".
Status GenerateCurveKeys(const std::string& dir, const std::vector<std::string>& names);
// The principals `relaxps-ctl keygen` writes for a job of this size.
std::vector<std::string> JobPrincipals(int num_servers, int num_workers);
// Reads DIR/<name>.key. NotFound naming the file if it is missing.
StatusOr<CurveKeys> LoadCurveKeys(const std::string& dir, const std::string& name);
// Reads DIR/<name>.pub. NotFound naming the file if it is missing.
StatusOr<std::string> LoadPublicKey(const std::string& dir, const std::string& name);
// The role a principal's name implies: coordinator, server-<id>,
// worker-<id>, ctl (operator), observer; InvalidArgument for another name.
StatusOr<Role> DefaultRoleOf(const std::string& name);
// InvalidArgument unless `name` may hold `role` (a worker or server key is
// named by its id; the coordinator's is "coordinator").
Status CheckPrincipal(const std::string& name, const std::string& role);

// A connection's principal, from its ZAP User-Id "<role>:<name>".
struct Principal {
  bool known = false;  // False: empty (plain TCP) or malformed.
  Role role = Role::kObserver;
  std::string name;
  int id = -1;  // Workers and servers: the id their key is bound to.
};
Principal PrincipalOf(const std::string& user_id);

// Public key -> "<role>:<name>" of every DIR/*.pub (CorruptionError for a
// malformed one, naming it).
StatusOr<std::map<std::string, std::string>> LoadAdmittedKeys(const std::string& dir);

// The ZAP handler of one ZeroMQ context: admits the CURVE keys in
// `admitted` (public key -> name, given as User-Id) and refuses everything
// else. Must be created before the context's sockets bind.
class ZapHandler {
 public:
  static StatusOr<std::unique_ptr<ZapHandler>> Start(zmq::context_t* context,
                                                     std::map<std::string, std::string> admitted);
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;
  ~ZapHandler();

  uint64_t refused() const { return refused_.load(); }

 private:
  ZapHandler() = default;
  void Loop();

  // Constant after Start().
  std::map<std::string, std::string> admitted_;
  zmq::socket_t socket_;  // REP on inproc://zeromq.zap.01; handler thread only.
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  LogLimiter log_limiter_;  // Handler thread only.
  std::thread thread_;
};

// Role binding: may the principal `user_id` ("" under plain TCP: anyone)
// act as `role` ("server", "worker", "observer", "operator" (or "ctl"),
// "coordinator") with `id` (-1: any)? "worker-3" may act only as worker 3,
// "server-1" only as server 1; an operator may also act as an observer.
bool RoleAllows(const std::string& user_id, const std::string& role, int id = -1);

// Refuses a --bind on a non-loopback address without curve, unless
// `insecure_bind_public`.
Status CheckBindIsSafe(const std::string& bind, bool curve, bool insecure_bind_public);

}  // namespace relaxps

#endif  // RELAXPS_COMMON_CURVE_AUTH_H_
