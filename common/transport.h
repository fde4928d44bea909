// Transport: the client side of the wire, as an interface.
//
// A Transport sends request Messages to peers (servers, the coordinator) and
// delivers each reply, or a failure, to a callback exactly once. RpcClient is
// the ZeroMQ implementation; FaultInjectingTransport wraps any Transport to
// drop, delay, duplicate or partition traffic with a seeded generator, so
// failure tests are reproducible (the leveldb EnvWrapper idea).
//
// Thread-safety: all methods are safe from any thread. Callbacks run on an
// implementation thread and must not block on other requests of the same
// transport.
#ifndef RELAXPS_COMMON_TRANSPORT_H_
#define RELAXPS_COMMON_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "common/fault_options.h"
#include "common/status.h"
#include "common/wire.h"

namespace relaxps {

struct TransportStats {
  uint64_t requests = 0;
  uint64_t bytes_sent = 0;      // Header + payload bytes.
  uint64_t bytes_received = 0;  // Header + payload bytes.
  uint64_t timeouts = 0;
  uint64_t dropped_by_faults = 0;
  // Requests the calling thread sent on the socket itself, with no hand-over
  // to the I/O thread (RpcClient::Call while that thread sleeps).
  uint64_t sent_by_caller = 0;
  // Replies read, and their callbacks run, by a thread in Drive().
  uint64_t replies_read_by_caller = 0;
};

class Transport {
 public:
  // The reply's status is folded into `status` (transport failures and the
  // peer's own error); `reply` is empty unless a reply arrived.
  // The callback may move from `reply`.
  using ReplyCallback = std::function<void(const Status& status, Message&& reply)>;

  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  virtual ~Transport() = default;

  // Returns a handle for `endpoint`, connecting on first use (idempotent
  // per endpoint and key). Under --security=curve the peer's ROUTER must
  // prove it holds the secret of `curve_server_key` (Z85): a server's own
  // key, which clients learn from the shard map the coordinator sends them.
  // Empty: the transport's default peer key (the coordinator's). Ignored
  // under plain TCP.
  virtual int Connect(const std::string& endpoint, const std::string& curve_server_key) = 0;
  int Connect(const std::string& endpoint) { return Connect(endpoint, std::string()); }
  // Sends `request` to `peer`, setting its request id and deadline
  // (`timeout_ms` <= 0: the implementation's default). `done` runs exactly
  // once: with the reply, DeadlineExceeded, or Aborted at shutdown.
  virtual void Call(int peer, Message request, int timeout_ms, ReplyCallback done) = 0;
  // Completes every request in flight now with `status` (e.g. the job failed).
  virtual void CancelAll(const Status& status) = 0;
  // Completes every request in flight to `peer` now with `status` (e.g. the
  // peer is known to be dead: no need to wait for the deadlines).
  virtual void CancelPeer(int peer, const Status& status) = 0;
  virtual TransportStats stats() const = 0;

  // Lends the calling thread to the transport until done() returns true or
  // timeout_ms passes: replies are read and their callbacks run on this
  // thread, not on the implementation's, which saves a thread hand-off per
  // reply. done() is called here after each batch of callbacks and must not
  // block. Returns whether done() returned true. Returns false at once when
  // the calling thread cannot drive (another thread does, the transport is
  // shutting down, or it cannot be driven at all, as here): then wait as
  // without it. REQUIRES: not on a callback.
  virtual bool Drive(const std::function<bool()>& done, int timeout_ms) { return done(); }

  // Blocking convenience for control traffic. REQUIRES: not on a callback.
  StatusOr<Message> CallSync(int peer, Message request, int timeout_ms);
};


}  // namespace relaxps

#endif  // RELAXPS_COMMON_TRANSPORT_H_
