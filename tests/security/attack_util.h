// Helpers of the quota and attack tests of issue 13: RawPeer, a DEALER that
// sends hand-built requests to a server or the coordinator and may never
// read the replies, as a stranger (or a stuck client) would; and a server's
// stats counters.
//
// Thread-safety: one thread at a time per RawPeer.
#ifndef RELAXPS_TESTS_SECURITY_ATTACK_UTIL_H_
#define RELAXPS_TESTS_SECURITY_ATTACK_UTIL_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include <glog/logging.h>
#include <zmq.hpp>

#include "common/rpc_client.h"
#include "proto/relaxps.pb.h"
#include "relaxps/table.h"

namespace relaxps {
namespace test {

class RawPeer {
 public:
  // `rcvhwm` 1 with a tiny kernel buffer: replies pile up at the server.
  explicit RawPeer(const std::string& endpoint, int rcvhwm = 1000)
      : socket_(ctx_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::rcvhwm, rcvhwm);
    socket_.set(zmq::sockopt::rcvbuf, 4096);
    socket_.set(zmq::sockopt::sndhwm, 1000000);
    socket_.connect(endpoint);
  }
  // Sends the header frame and, when `payload` is not empty, one payload frame.
  void Send(const wire::Header& h, const std::string& payload = "") {
    std::string hs;
    h.SerializeToString(&hs);
    if (payload.empty()) {
      socket_.send(zmq::buffer(hs), zmq::send_flags::none);
      return;
    }
    socket_.send(zmq::buffer(hs), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(payload), zmq::send_flags::none);
  }
  // Reads and drops every reply that has arrived. A peer that sends a lot
  // must read too: once its tiny kernel buffer is full, loopback TCP may stop
  // taking its requests as well (seen under TSan: 9,659 of 100,000 requests
  // arrived, then none for 300 s).
  void DrainReplies() {
    zmq::message_t m;
    while (socket_.recv(m, zmq::recv_flags::dontwait)) {
    }
  }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t socket_;
};

// The reply header of a `type` request without a body to `endpoint`
// (CHECK-fails if it does not answer within 10 s).
inline wire::Header AskOrDie(const std::string& endpoint, wire::MsgType type) {
  RpcClient rpc;
  Message m;
  m.header.set_type(type);
  auto reply = rpc.CallSync(rpc.Connect(endpoint), std::move(m), 10000);
  CHECK(reply.ok()) << wire::MsgType_Name(type) << " to " << endpoint << ": " << reply.status();
  return std::move(reply->header);
}

// SERVER_STATS of the server at `endpoint` (CHECK-fails if it does not answer).
inline wire::ServerStats ServerStatsOf(const std::string& endpoint) {
  return AskOrDie(endpoint, wire::SERVER_STATS).server_stats();
}

// Asks the server at `endpoint` for its stats every `every` until `done`
// holds for them or `timeout` passed, and returns the last stats.
inline wire::ServerStats WaitForServerStats(const std::string& endpoint,
                                            const std::function<bool(const wire::ServerStats&)>& done,
                                            std::chrono::milliseconds timeout,
                                            std::chrono::milliseconds every =
                                                std::chrono::milliseconds(20)) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  wire::ServerStats stats = ServerStatsOf(endpoint);
  while (!done(stats) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(every);
    stats = ServerStatsOf(endpoint);
  }
  return stats;
}

// Asks the server at `endpoint` for its stats until it has taken `n`
// requests besides those stats requests themselves, or `timeout` passed, and
// returns the last stats. Counting the stats requests matters: the ROUTER
// fair-queues its peers, so it may answer them before the last of the `n`
// (under TSan, waiting for `n` in all read the stats early).
inline wire::ServerStats WaitForServerRequests(const std::string& endpoint, uint64_t n,
                                               std::chrono::milliseconds timeout) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  wire::ServerStats stats;
  for (uint64_t asked = 1;; ++asked) {
    stats = ServerStatsOf(endpoint);
    if (stats.requests() >= n + asked || std::chrono::steady_clock::now() >= give_up) {
      return stats;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// A dense table `name` of `size` keys trained with plain SGD at `lr`: the
// attacked jobs' model.
inline TableOptions SgdDenseTable(const std::string& name, uint64_t size, float lr) {
  TableOptions t;
  t.name = name;
  t.size = size;
  t.optimizer.name = "sgd";
  t.optimizer.lr = lr;
  return t;
}

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_SECURITY_ATTACK_UTIL_H_
