// LoopClient: requests to ROUTER peers, sent and answered on an RpcServer's
// loop thread.
//
// Like RpcClient (one DEALER socket per peer endpoint, a deadline and a
// callback per request, replies matched by request id), but the sockets
// belong to the server's loop instead of an I/O thread of their own: Call()
// sends at once from the loop thread, the loop polls the sockets beside its
// ROUTER (RpcServer::AddSocket) and runs each reply's callback inline. A
// request and its reply cross no thread on this side, which is what a chain
// replica's forward -> acknowledgement path needs (an RpcClient costs two
// crossings per update: the request into its I/O thread, the reply back
// through RpcServer::Post). Keep RpcClient for control traffic that is
// issued from other threads.
//
// Callbacks run exactly once, on the loop thread: with the reply, with
// DeadlineExceeded (checked every `sweep_ms`), or with the send error (never
// from inside Call(): a failed send completes from a posted task, so a
// caller may hold iterators across Call()). Destroying the client drops the
// callbacks still pending without running them.
//
// Thread-safety: loop thread only (or, before Run(), the thread that will
// run it). REQUIRES: the RpcServer outlives this client, and this client is
// destroyed only after Run() returned (the loop polls its sockets and runs
// its timer until then).
#ifndef RELAXPS_COMMON_LOOP_CLIENT_H_
#define RELAXPS_COMMON_LOOP_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "common/clock.h"
#include "common/log_limiter.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/transport.h"
#include "common/wire.h"

namespace relaxps {

class LoopClient {
 public:
  using ReplyCallback = Transport::ReplyCallback;

  // `options`: default_timeout_ms, clock, routing_id, max_message_bytes and
  // the CURVE keys are used as by RpcClient; on_disconnect is not supported
  // (ignored). `sweep_ms`: how often expired deadlines are checked.
  LoopClient(RpcServer* loop, const RpcClientOptions& options, int sweep_ms = 50);
  LoopClient(const LoopClient&) = delete;
  LoopClient& operator=(const LoopClient&) = delete;
  ~LoopClient() = default;

  // A handle for `endpoint`, connecting on first use (idempotent per
  // endpoint and key). Under --security=curve the peer must prove it holds
  // `curve_server_key` (empty: options.curve_server_key), as
  // Transport::Connect.
  int Connect(const std::string& endpoint, const std::string& curve_server_key = "");
  // Sends `request` to `peer` now, setting its request id and deadline
  // (`timeout_ms` <= 0: options.default_timeout_ms). `done` runs once, later,
  // on the loop thread (see the file comment).
  void Call(int peer, Message request, int timeout_ms, ReplyCallback done);

  uint64_t requests() const { return requests_; }
  uint64_t timeouts() const { return timeouts_; }

 private:
  struct Pending {
    ReplyCallback done;
    std::multimap<int64_t, uint64_t>::iterator deadline;
  };
  struct Peer {
    std::string endpoint;
    std::string curve_server_key;
    std::unique_ptr<zmq::socket_t> socket;  // Stable address for the loop's poll.
  };

  void Drain(int peer);
  void ExpireDeadlines();
  // Completes `done` with `status` from a posted task (not inline).
  void FailLater(ReplyCallback done, Status status);

  // Constant after construction.
  RpcServer* const loop_;
  const RpcClientOptions options_;
  const Clock* const clock_;

  // Loop thread only.
  std::vector<Peer> peers_;
  std::unordered_map<uint64_t, Pending> pending_;
  std::multimap<int64_t, uint64_t> deadlines_;  // Deadline -> request id.
  std::vector<zmq::message_t> parts_;           // Receive scratch.
  // Every reply is parsed into this one, as RpcServer::Run and RpcClient do;
  // a callback may move from it, and ParseMessage leaves nothing of the last.
  Message reply_;
  LogLimiter log_limiter_;
  uint64_t next_request_id_ = 1;
  uint64_t requests_ = 0;
  uint64_t timeouts_ = 0;
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_LOOP_CLIENT_H_
