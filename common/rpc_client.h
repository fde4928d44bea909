// RpcClient: asynchronous requests to ROUTER peers (servers, coordinator).
//
// One DEALER socket per peer endpoint, all driven by one I/O thread. A caller
// on any thread sends its request (payload frames zero-copy) on the socket
// itself when the I/O thread is asleep, and otherwise enqueues it for the I/O
// thread to send; the I/O thread matches the reply by request id and runs the
// callback. A request without a reply by its deadline completes
// with DeadlineExceeded; destroying the client completes every pending
// request with Aborted. Callbacks therefore run exactly once.
//
// The ZeroMQ implementation of Transport (common/transport.h); wrap it in a
// FaultInjectingTransport for failure tests.
//
// A caller may instead lend its thread (Drive()): while it waits, it reads
// the replies and runs the callbacks itself, and the I/O thread leaves the
// sockets alone. The reply then reaches the waiting thread straight from
// ZeroMQ, as in a single-threaded client, instead of through a second
// thread and a futex wake-up. The I/O thread takes the sockets back
// within kDriverGraceMs + kDriverCheckMs after the driver leaves, and keeps
// deadlines, cancellations and new connections throughout.
//
// Thread-safety: all public methods are safe from any thread. Callbacks run on
// the I/O thread, or on a thread in Drive(), and must not block on other
// requests of the same client.
#ifndef RELAXPS_COMMON_RPC_CLIENT_H_
#define RELAXPS_COMMON_RPC_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/clock.h"
#include "common/curve_auth.h"
#include "common/log_limiter.h"
#include "common/recent_frames.h"
#include "common/socket_poller.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport.h"
#include "common/wire.h"

namespace relaxps {

struct RpcClientOptions {
  // Default deadline of a request when Call() gets timeout_ms <= 0.
  int default_timeout_ms = 10000;
  // When set, called on the I/O thread with the peer handle whenever the TCP
  // connection of that peer's DEALER socket closes (ZeroMQ socket monitor,
  // ZMQ_EVENT_DISCONNECTED): a process killed by any signal closes its
  // connections at once, so this detects crashes within milliseconds. A
  // disconnect is a hint (the socket reconnects by itself); confirm it, e.g.
  // with a probe, before acting. Must not block.
  std::function<void(int peer)> on_disconnect;
  // Time source of deadlines and of the I/O loop's waits (nullptr: real
  // time). Tests pass a FakeClock to expire deadlines without sleeping.
  const Clock* clock = nullptr;
  // ZeroMQ routing id of every DEALER socket (ZMQ_ROUTING_ID); empty:
  // ZeroMQ's own. The coordinator sets a random one that only the servers
  // learn, so they can tell its connection from anyone else's.
  std::string routing_id;
  // Largest reply accepted, in bytes (ZMQ_MAXMSGSIZE); a peer sending a
  // bigger one is disconnected instead of exhausting memory. -1: unlimited.
  int64_t max_message_bytes = int64_t{1} << 30;
  // --security=curve: every DEALER is a CURVE client with this key pair. A
  // peer connected without a key of its own must prove it holds
  // curve_server_key (the coordinator's). Empty: plain TCP. Set both with
  // UseCurve().
  CurveKeys curve_keys;
  std::string curve_server_key;
  // Source address of every outgoing TCP connection, a numeric IPv4 or IPv6
  // address of this host (e.g. the one the process binds and advertises on
  // a multi-homed host); empty: the kernel's choice. See ConnectAddress().
  std::string source_address;

  // Loads curve.name's keys and the coordinator's public key from
  // curve.keys_dir (no-op when curve is not enabled).
  Status UseCurve(const CurveOptions& curve);
};

// A DEALER socket in `context` set up as RpcClient's are (linger 0, queue
// limits, reconnect interval, max message size, routing id, CURVE keys from
// `options`; the peer must prove `curve_server_key`, empty: the options'),
// not connected yet. Shared with LoopClient.
zmq::socket_t NewDealerSocket(zmq::context_t* context, const RpcClientOptions& options,
                              const std::string& curve_server_key);

// What a DEALER built from `options` passes to connect() for `endpoint`:
// the endpoint itself, or, for a tcp:// endpoint with options.source_address
// set, ZeroMQ's "tcp://SOURCE:0;HOST:PORT" (connect from SOURCE, any port).
std::string ConnectAddress(const RpcClientOptions& options, const std::string& endpoint);

// Kept for readability at call sites that only use the ZeroMQ client.
using RpcClientStats = TransportStats;

class RpcClient final : public Transport {
 public:
  explicit RpcClient(const RpcClientOptions& options = RpcClientOptions());
  ~RpcClient() override;

  using Transport::Connect;
  int Connect(const std::string& endpoint, const std::string& curve_server_key) override;
  void Call(int peer, Message request, int timeout_ms, ReplyCallback done) override;
  // Also fails requests queued but not yet sent. Later calls are unaffected.
  void CancelAll(const Status& status) override;
  void CancelPeer(int peer, const Status& status) override;
  TransportStats stats() const override;
  bool Drive(const std::function<bool()>& done, int timeout_ms) override;

 private:
  // How long the I/O thread leaves the sockets to the last driver after it
  // returns (a driver that waits again at once, as a training loop does,
  // keeps them), and how often it looks whether the driver has left: a
  // reply that nobody drives for waits up to about the sum. Looking every
  // millisecond cost 1 MiB PushPulls 5-15% (the I/O thread's wake-ups
  // preempted the transfer on 2 cores).
  static constexpr int kDriverGraceMs = 1;
  static constexpr int kDriverCheckMs = 10;
  // The longest sleep of a driver between looks at stopping_. Everything it
  // waits for wakes it (its eventfd, see TellDriver and WakeDriverIfAny), so
  // a longer sleep is a lost wake-up: long enough to show in tests.
  static constexpr int kDriverMaxSleepMs = 1000;

  struct Outgoing {
    int peer;
    Message msg;
    int64_t deadline_ms;  // Monotonic.
    ReplyCallback done;
  };
  // Deadline -> request id, of the requests in pending_.
  using Deadlines = std::multimap<int64_t, uint64_t>;
  struct Pending {
    ReplyCallback done;
    Deadlines::iterator deadline;  // This request's entry in deadlines_.
    int peer;
  };
  // A callback to run with its outcome once io_mu_ is released: callbacks
  // may call Call(), which takes io_mu_.
  struct Completion {
    ReplyCallback done;
    Status status;
    Message reply;
  };

  void IoLoop();
  void Wake();
  // Sends on the socket of out.peer, which exists. Failures are added to
  // `completions`.
  void SendNow(Outgoing&& out, std::vector<Completion>* completions) REQUIRES(io_mu_);
  // Call() on the caller's thread: sends `out` unless the I/O thread has
  // something to do first (a cancellation, a socket to make); returns whether
  // it took `out` (then its callback runs once, on the I/O thread).
  bool SendFromCaller(Outgoing* out) REQUIRES(io_mu_);
  void OnReply(std::vector<zmq::message_t>& parts, std::vector<Completion>* completions)
      REQUIRES(io_mu_);
  void ExpireDeadlines(std::vector<Completion>* completions) REQUIRES(io_mu_);
  void FailPending(const Status& status, std::vector<Completion>* completions) REQUIRES(io_mu_);
  // Runs and clears them; returns whether there were any.
  static bool RunCompletions(std::vector<Completion>* completions);
  // Reads every socket item of `poller` (item 1 + peer) that has input until
  // it runs dry, or touches it after a batch.
  void ReadReplies(SocketPoller* poller, bool by_caller, std::vector<Completion>* completions)
      REQUIRES(io_mu_);
  // Rebuilds driver_poller_ when sockets were added (or the I/O thread used
  // them since the last Drive); returns whether it did.
  bool SyncDriverPoller(bool force) REQUIRES(io_mu_);
  // Touches in driver_poller_ the sockets that TellDriver named.
  void TouchToldSockets() REQUIRES(io_mu_);
  void WakeDriver();
  // A ZeroMQ call on `peer`'s socket by a thread other than the driver found
  // input there: the current or next driver asks that socket.
  void TellDriver(int peer) REQUIRES(io_mu_);
  // The driver's sleep must end: completions ran that it may wait for, or
  // another thread's ZeroMQ call took in input its descriptor will not
  // announce again.
  void WakeDriverIfAny();

  // Constant after construction.
  const RpcClientOptions options_;
  const Clock* const clock_;
  int wake_fd_ = -1;
  // Thread-safe; declared before the sockets, which must close before it.
  zmq::context_t context_{1};

  // The sockets and the requests awaiting replies. Held by the I/O thread
  // except while it sleeps in poll() or runs callbacks, and by a caller that
  // sends its request itself. Taken before mu_.
  Mutex io_mu_;
  // Parallel to endpoints_ once connected.
  std::vector<zmq::socket_t> sockets_ GUARDED_BY(io_mu_);
  // Parallel to sockets_: each socket's ZeroMQ monitor (connection and
  // handshake events).
  std::vector<zmq::socket_t> monitors_ GUARDED_BY(io_mu_);
  // Parallel to sockets_: what the monitor last said about the connection.
  struct Link {
    std::string endpoint;
    // Non-OK while the peer refuses this client's key or fails to prove its
    // own (a failed CURVE handshake): requests to it fail with it at once.
    Status refused;
    // Connection attempts refused or timed out since the last connection
    // (ZMQ_EVENT_CONNECT_RETRIED): named when a request's deadline passes.
    int retries = 0;
    // Connections that ended during the handshake since the last
    // successful one (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL); at
    // kHandshakeEndsRefused the peer counts as refusing this client.
    int handshake_failures = 0;
    bool connected = false;
  };
  std::vector<Link> links_ GUARDED_BY(io_mu_);
  // Handshakes ended in a row (no success between) that make a refusal: a
  // restarting or dying server ends at most one; ZeroMQ reconnects every
  // 100 ms, so a refusing peer is named within about 0.3 s.
  static constexpr int kHandshakeEndsRefused = 3;
  // Applies one monitor event of `peer`'s socket; requests failed by it go
  // to `completions`. Returns whether it was a disconnection.
  bool OnMonitorEvent(int peer, uint16_t event, uint32_t value,
                      std::vector<Completion>* completions) REQUIRES(io_mu_);
  // Why a request to `peer` got no reply, beyond "no reply before the
  // deadline": the endpoint and whether it could be reached.
  std::string NoReplyReason(int peer) const REQUIRES(io_mu_);
  std::unordered_map<uint64_t, Pending> pending_ GUARDED_BY(io_mu_);
  // The highest-addressed large reply frame of each malloc heap, held so
  // that the replies freed below it are reused by the next ones instead of
  // trimmed and faulted in again (common/recent_frames.h).
  RecentFrames recent_frames_ GUARDED_BY(io_mu_);
  // Leaves with its request: the entries of answered requests stayed until
  // their deadlines passed, up to request rate x timeout of them (half a
  // million at 50,000 requests/s and 10 s), and the I/O thread woke for each
  // of those deadlines once the first timeout had gone by.
  Deadlines deadlines_ GUARDED_BY(io_mu_);
  // Peers sent to (by the I/O thread or by callers) since the I/O thread last
  // asked their sockets for input: it touches them (SocketPoller::Touch).
  std::vector<int> sent_to_ GUARDED_BY(io_mu_);
  // Requests a caller failed to send, for the I/O thread to complete.
  std::vector<Completion> failed_sends_ GUARDED_BY(io_mu_);
  // When the I/O thread's current sleep ends at the latest (monotonic ms): a
  // caller whose deadline comes sooner wakes it.
  int64_t sleep_until_ms_ GUARDED_BY(io_mu_) = 0;

  // Drive(). Set under io_mu_ by the driving thread; read without it only to
  // decide whether to wake the driver.
  std::atomic<bool> driving_{false};
  // The sockets (item 1 + peer) and driver_wake_fd_ (item 0); used by the
  // driving thread only.
  SocketPoller driver_poller_;
  int driver_wake_fd_ = -1;
  // The callbacks a driver read, run once io_mu_ is released; kept from one
  // Drive() to the next (a training loop drives once per step), so that
  // collecting them allocates nothing.
  std::vector<Completion> driver_completions_;
  // Until when (MonotonicMs) the I/O thread leaves the sockets to drivers.
  int64_t drivers_hold_until_ms_ GUARDED_BY(io_mu_) = 0;
  // The I/O thread made ZeroMQ calls on the sockets since the last Drive():
  // the driver's poller must ask them all again.
  bool io_used_sockets_ GUARDED_BY(io_mu_) = true;
  // Peers whose sockets the driver asks before it next sleeps (TellDriver).
  std::vector<int> driver_touch_ GUARDED_BY(io_mu_);
  // ReadReplies' scratch, reused so that reading allocates nothing.
  std::vector<zmq::message_t> recv_parts_ GUARDED_BY(io_mu_);

  Mutex mu_;
  struct Peer {
    std::string endpoint;
    std::string curve_server_key;  // Empty: options_.curve_server_key.
  };
  std::vector<Peer> endpoints_ GUARDED_BY(mu_);  // Handle -> peer.
  std::vector<Outgoing> outbox_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  // Non-OK: fail everything pending with it, then reset.
  Status cancel_ GUARDED_BY(mu_);
  std::vector<std::pair<int, Status>> cancel_peers_ GUARDED_BY(mu_);  // CancelPeer requests.

  // Malformed replies: one a second. Used under io_mu_ (by the I/O thread
  // or a driver).
  LogLimiter log_limiter_;

  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<uint64_t> requests_{0}, bytes_sent_{0}, bytes_received_{0}, timeouts_{0};
  std::atomic<uint64_t> sent_by_caller_{0}, replies_read_by_caller_{0};

  std::thread io_thread_;
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_RPC_CLIENT_H_
