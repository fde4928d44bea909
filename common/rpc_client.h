// RpcClient: asynchronous requests to ROUTER peers (servers, coordinator).
//
// One DEALER socket per peer endpoint, all driven by one I/O thread. Callers
// on any thread enqueue a request with a deadline and a callback; the I/O
// thread sends it (payload frames zero-copy), matches the reply by request id
// and runs the callback. A request without a reply by its deadline completes
// with DeadlineExceeded; destroying the client completes every pending
// request with Aborted. Callbacks therefore run exactly once.
//
// Fault injection: FaultOptions drops, duplicates or delays outgoing requests
// with a seeded generator, so failure tests are reproducible.
//
// Thread-safety: all public methods are safe from any thread. Callbacks run on
// the I/O thread and must not block on other requests of the same client.
#ifndef RELAXPS_COMMON_RPC_CLIENT_H_
#define RELAXPS_COMMON_RPC_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/status.h"
#include "common/wire.h"

namespace relaxps {

struct FaultOptions {
  // Probability of silently dropping an outgoing request.
  double drop_prob = 0.0;
  // Probability of sending an outgoing request twice.
  double duplicate_prob = 0.0;
  // Extra delay added to every outgoing request.
  int delay_ms = 0;
  // Seed of the fault generator (never time-based).
  uint64_t seed = 1;
};

struct RpcClientOptions {
  // Default deadline of a request when Call() gets timeout_ms <= 0.
  int default_timeout_ms = 10000;
  FaultOptions faults;
};

// Counters of one RpcClient.
struct RpcClientStats {
  uint64_t requests = 0;
  uint64_t bytes_sent = 0;      // Header + payload bytes.
  uint64_t bytes_received = 0;  // Header + payload bytes.
  uint64_t timeouts = 0;
  uint64_t dropped_by_faults = 0;
};

class RpcClient {
 public:
  // The reply's status is folded into `status` (transport failures and the
  // server's own error); `reply` is empty unless a reply arrived.
  using ReplyCallback = std::function<void(const Status& status, Message reply)>;

  explicit RpcClient(const RpcClientOptions& options = RpcClientOptions());
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;
  ~RpcClient();

  // Returns a handle for `endpoint`, connecting on first use (idempotent).
  int Connect(const std::string& endpoint);

  // Sends `request` to peer `peer`. Sets the request id and deadline.
  void Call(int peer, Message request, int timeout_ms, ReplyCallback done);
  // Blocking convenience for control traffic. REQUIRES: not on the I/O thread.
  StatusOr<Message> CallSync(int peer, Message request, int timeout_ms);

  // Completes every request in flight (and queued) with `status` now, e.g.
  // when the job has failed and waiting for deadlines would only delay the
  // caller. Later calls are unaffected.
  void CancelAll(const Status& status);

  RpcClientStats stats() const;

 private:
  struct Outgoing {
    int peer;
    Message msg;
    int64_t deadline_ms;  // Monotonic.
    int64_t send_at_ms;   // Monotonic; > now when delayed by faults.
    ReplyCallback done;
  };
  struct Pending {
    ReplyCallback done;
    int64_t deadline_ms;
  };

  void IoLoop();
  void Wake();
  void SendNow(Outgoing out);
  void OnReply(std::vector<zmq::message_t>& parts);
  void ExpireDeadlines();
  void FailAll(const Status& status);

  // Constant after construction.
  const RpcClientOptions options_;
  int wake_fd_ = -1;

  std::mutex mu_;
  // Guarded by mu_.
  std::vector<std::string> endpoints_;  // Handle -> endpoint.
  std::vector<Outgoing> outbox_;
  bool stopping_ = false;
  Status cancel_;  // Non-OK: fail everything pending with it, then reset.

  // I/O thread only.
  zmq::context_t context_{1};
  std::vector<zmq::socket_t> sockets_;  // Parallel to endpoints_ once connected.
  std::unordered_map<uint64_t, Pending> pending_;
  std::multimap<int64_t, uint64_t> deadlines_;  // deadline -> request id
  std::multimap<int64_t, Outgoing> delayed_;    // send_at -> request
  std::mt19937_64 fault_rng_;

  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<uint64_t> requests_{0}, bytes_sent_{0}, bytes_received_{0}, timeouts_{0},
      dropped_{0};

  std::thread io_thread_;
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_RPC_CLIENT_H_
