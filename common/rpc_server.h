// RpcServer: the request loop of servers and the coordinator.
//
// Binds a ZeroMQ ROUTER socket and runs a single-threaded event loop on the
// caller's thread: it receives requests, hands each to a Handler, runs timers
// and tasks posted from other threads. Replies may be sent at once or later
// (a deferred pull under SSP/BSP answers when its gate opens); all replies are
// sent from the loop thread, so shard state needs no locks.
//
// Malformed multipart messages (no header, unparsable header) are answered
// with InvalidArgument where a peer identity is known, logged and counted;
// the loop keeps serving.
//
// Thread-safety: Post(), Stop() and endpoint() are safe from any thread;
// everything else must be called on the loop thread (from handlers, timers or
// posted tasks).
#ifndef RELAXPS_COMMON_RPC_SERVER_H_
#define RELAXPS_COMMON_RPC_SERVER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "common/clock.h"
#include "common/curve_auth.h"
#include "common/log_limiter.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/unread_replies.h"
#include "common/wire.h"

namespace relaxps {

struct RpcServerOptions {
  // ZeroMQ endpoint to bind; "tcp://127.0.0.1:*" lets the OS choose a port.
  std::string bind = "tcp://127.0.0.1:*";
  // Largest accepted message in bytes (ZMQ_MAXMSGSIZE); bigger messages drop
  // the connection instead of exhausting memory. -1: unlimited.
  int64_t max_message_bytes = int64_t{1} << 30;
  // Most messages queued for one peer (ZMQ_SNDHWM): once a peer stops
  // reading, Send() to it fails with Unavailable instead of queueing without
  // bound. Incoming requests are bounded alike (ZMQ_RCVHWM: back-pressure).
  int max_queued_messages = 1000;
  // Most bytes of payload queued for one peer that does not read them, and
  // for all peers together (UnreadReplies, common/unread_replies.h). A data
  // reply reserves its bytes when its request is admitted (ReserveReply):
  // past either limit the request is refused with ResourceExhausted (the
  // client retries it); another message past them is dropped when sent
  // (Send() fails with ResourceExhausted). A peer with nothing queued always
  // gets one reply while the total is under its limit, however large. <= 0:
  // unlimited. Larger: more memory held for stuck or hostile peers; smaller:
  // fewer large pulls in flight per connection (the rest wait and retry).
  int64_t max_unread_bytes_per_peer = int64_t{64} << 20;
  int64_t max_unread_bytes = int64_t{256} << 20;
  // Time source of the timers (AddTimer) and of the loop's waits (nullptr:
  // real time). With a FakeClock, timers fire when the test advances it.
  const Clock* clock = nullptr;
  // --security=curve: the socket is a CURVE server with curve.name's own key
  // and admits only the keys in curve.keys_dir (curve_auth.h).
  CurveOptions curve;
};

// A received request and the identity of the peer that sent it.
struct Request {
  std::string identity;
  Message msg;
  // The sender's authenticated principal (curve: its key's name, e.g.
  // "worker-1"); empty under plain TCP. See RoleAllows().
  std::string user_id;
  // When the loop received it (steady clock, ns): request latency metrics.
  int64_t received_ns = 0;
  // The bytes ReserveReply() reserved for its reply (null: none). Travels
  // with the request (a pull parked at a consistency gate keeps it); the
  // first Reply() or ReplyStatus() to the request takes it (mutable: replies
  // are given a const Request&) and attaches it to the reply's frames, so it
  // is given back once ZeroMQ has written them; dropped with the request
  // otherwise.
  mutable std::shared_ptr<void> reply_reservation;
};

class RpcServer {
 public:
  // Runs on the loop thread for each request. It may move from `request`
  // (to keep it); the loop reuses the object for the next one.
  using Handler = std::function<void(Request&& request)>;

  // Binds the socket. Unavailable/InvalidArgument if the endpoint cannot be bound.
  static StatusOr<std::unique_ptr<RpcServer>> Bind(const RpcServerOptions& options);

  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;
  ~RpcServer();

  // The resolved endpoint (with the OS-chosen port), e.g. tcp://127.0.0.1:40123.
  const std::string& endpoint() const { return endpoint_; }

  // Runs the loop until Stop(). REQUIRES: called once. `after_batch`, when
  // set, runs on the loop thread after each batch of received requests,
  // posted tasks and due timers, before the loop waits again: the place to
  // finish work that many requests share (a server syncs its WAL once there
  // and then releases the acknowledgements of every update in the batch).
  void Run(Handler handler, std::function<void()> after_batch = nullptr);
  // Makes Run() return after the current iteration. Safe from any thread and
  // from signal-safe contexts that call it through a flag poller.
  void Stop();
  // Runs `task` on the loop thread soon.
  void Post(std::function<void()> task);
  // Runs `fn` every `period_ms` on the loop thread. Loop thread or before Run().
  void AddTimer(int period_ms, std::function<void()> fn);
  // Polls `socket` in the loop's own wait, beside the ROUTER socket, and
  // runs `on_readable` on the loop thread whenever it has input (it should
  // read what is there without blocking). For sockets the loop owns, such as
  // a LoopClient's DEALERs: their replies are handled without a thread
  // crossing. Loop thread or before Run(). REQUIRES: `socket` stays valid
  // while Run() runs, and was created in context().
  void AddSocket(zmq::socket_t* socket, std::function<void()> on_readable);
  // The ZeroMQ context of the loop's sockets (for sockets given to AddSocket).
  zmq::context_t* context() { return &context_; }

  // Reserves `reply_bytes` (an upper bound of the payload of the reply
  // `request` will get) against the limits on unread replies, before the
  // request is applied; the reservation goes in request->reply_reservation.
  // Nothing is reserved for a payload ZeroMQ would copy (at most
  // Frame::kCopyFramesUpToBytes). ResourceExhausted naming the limit and its
  // flag if the reply does not fit (counted in unread_refused_count()): the
  // caller refuses the request with it and applies nothing. Loop thread.
  Status ReserveReply(Request* request, int64_t reply_bytes);
  // Sends a reply (or any message) to a peer. Loop thread only. With a
  // `reservation` (ReserveReply's) the message is sent whatever the limits
  // and holds the reservation until ZeroMQ has written it; without one, a
  // payload ZeroMQ does not copy is admitted now: ResourceExhausted if it
  // would pass the limits on unread replies (counted in
  // unread_dropped_count()). Unavailable if the peer is gone or its queue is
  // full. The message is dropped on any error.
  Status Send(const std::string& identity, Message&& msg,
              std::shared_ptr<void> reservation = nullptr);
  // Convenience: replies to `request` with `reply` (its header's request id,
  // type and is_reply are filled in from the request), with the request's
  // reservation (taken from it).
  Status Reply(const Request& request, Message&& reply);
  Status ReplyStatus(const Request& request, const Status& status);
  // Fills in `reply`'s request id, type and is_reply from `request`, as
  // Reply() does; for replies sent later by Send(). A reply whose status is
  // unset is OK.
  static void FillReplyHeader(const Request& request, Message* reply);

  // Counters (loop thread).
  uint64_t malformed_count() const { return malformed_; }
  // Requests ReserveReply() refused because of the limits on unread replies.
  uint64_t unread_refused_count() const { return unread_refused_; }
  // Messages without a reservation that Send() dropped because of those
  // limits.
  uint64_t unread_dropped_count() const { return unread_dropped_; }
  // Payload bytes handed to ZeroMQ and not yet written (any thread).
  int64_t unread_bytes() const { return unread_->total_bytes(); }

  // Loop thread: a log limiter for handlers' rejection lines (one a second
  // per reason), on this server's clock.
  LogLimiter* log_limiter() { return &log_limiter_; }

 private:
  RpcServer() = default;
  void RunPosted();
  int NextTimerDelayMs() const;
  void RunDueTimers();

  struct Timer {
    int period_ms;
    int64_t next_ms;
    std::function<void()> fn;
  };

  // Constant after Bind().
  const Clock* clock_ = RealClock();
  zmq::context_t context_{1};
  std::unique_ptr<ZapHandler> zap_;  // Curve only; before socket_ binds.
  zmq::socket_t socket_;
  std::string endpoint_;
  int wake_fd_ = -1;  // eventfd signalled by Post()/Stop().
  std::unique_ptr<UnreadReplies> unread_;  // Admit() on the loop thread.

  // Loop thread only.
  std::vector<Timer> timers_;
  // AddSocket; a deque, so that a callback adding a socket leaves the
  // running one in place.
  std::deque<std::pair<zmq::socket_t*, std::function<void()>>> extra_sockets_;
  uint64_t malformed_ = 0;
  uint64_t unread_refused_ = 0;
  uint64_t unread_dropped_ = 0;
  // Send() ran since the loop last waited: the ROUTER is touched (see
  // SocketPoller).
  bool sent_ = false;
  LogLimiter log_limiter_;  // Malformed-input lines: one a second per reason.

  std::atomic<bool> stop_{false};
  Mutex mu_;
  std::deque<std::function<void()>> posted_ GUARDED_BY(mu_);
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_RPC_SERVER_H_
