// ServerGate: holds the requests to a restarted server until the client's
// recovery role released it (recovery::ClientFeatures::hold_restarted_servers).
//
// The gate remembers, per server, the endpoint it is open at. A request to
// a server at any other endpoint (the map names a new one: the server
// restarted) is held, in order, until Release() opens the gate at the
// server's current endpoint; the caller then sends what was held (routing
// it again with the current map). A disabled gate admits everything.
//
// Thread-safety: all methods are safe from any thread; callbacks of held
// parts are run by the caller, never under the gate's lock.
#ifndef RELAXPS_CLIENT_INTERNAL_SERVER_GATE_H_
#define RELAXPS_CLIENT_INTERNAL_SERVER_GATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "common/transport.h"

namespace relaxps {
namespace client_internal {

class ServerGate {
 public:
  // A request part held at the gate.
  struct Held {
    int server;
    std::function<Message()> make;
    Transport::ReplyCallback done;
    int64_t give_up_ms;
  };

  explicit ServerGate(bool enabled) : enabled_(enabled) {}
  ServerGate(const ServerGate&) = delete;
  ServerGate& operator=(const ServerGate&) = delete;

  bool enabled() const { return enabled_; }

  // True if a request to `server` at `endpoint` may be sent now. Otherwise
  // holds it (moving *part's callbacks) and returns false.
  bool Admit(int server, const std::string& endpoint, Held* part);
  // Opens the gate of a server seen for the first time (no endpoint known
  // before) at `endpoint` and returns what was held for it meanwhile; a
  // no-op for a server it knows.
  std::vector<Held> OpenIfNew(int server, const std::string& endpoint);
  // Opens the gate of `server` at `endpoint` and returns what was held for
  // it, oldest first.
  std::vector<Held> Release(int server, const std::string& endpoint);
  // Takes every held part (the client is shutting down).
  std::vector<Held> TakeAll();

 private:
  // Takes what is held for `server`, oldest first.
  std::vector<Held> TakeLocked(int server) REQUIRES(mu_);

  const bool enabled_;

  Mutex mu_;
  std::map<int, std::string> open_at_ GUARDED_BY(mu_);  // Server -> endpoint.
  std::vector<Held> held_ GUARDED_BY(mu_);
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_SERVER_GATE_H_
