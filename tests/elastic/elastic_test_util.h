// Helpers of the in-process elastic tests (docs/elastic.md): asking the
// coordinator and servers directly, a server started with --join, and the
// operator's DRAIN_SERVER.
#ifndef RELAXPS_TESTS_ELASTIC_ELASTIC_TEST_UTIL_H_
#define RELAXPS_TESTS_ELASTIC_ELASTIC_TEST_UTIL_H_

#include <algorithm>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <glog/logging.h>

#include "client/client.h"
#include "common/member_token.h"
#include "common/rpc_client.h"
#include "common/wire.h"
#include "server/server.h"
#include "tests/operator_session.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {

// The OK reply's header of `m` sent to `endpoint` (CHECK-fails otherwise).
inline wire::Header Ask(const std::string& endpoint, Message m) {
  RpcClient rpc;
  auto reply = rpc.CallSync(rpc.Connect(endpoint), std::move(m), 10000);
  CHECK(reply.ok()) << reply.status();
  return std::move(reply->header);
}

// The reply's header, whatever its status (a "moved" reply carries a map).
inline wire::Header AskForReply(const std::string& endpoint, Message m) {
  RpcClient rpc;
  std::promise<wire::Header> reply;
  rpc.Call(rpc.Connect(endpoint), std::move(m), 10000, [&reply](const Status& s, Message&& r) {
    if (!s.ok() && !r.header.has_status()) StatusToProto(s, r.header.mutable_status());
    reply.set_value(std::move(r.header));
  });
  return reply.get_future().get();
}

// `n` workers of the job at `coordinator`, each having created `tables`, in
// worker-id order (the BSP drivers index them by rank).
inline StatusOr<std::vector<std::unique_ptr<Client>>> ConnectWorkersInOrder(
    const std::string& coordinator, int n, const std::vector<TableOptions>& tables) {
  std::vector<std::unique_ptr<Client>> owned;
  for (int k = 0; k < n; ++k) {
    ClientOptions o;
    o.coordinator = coordinator;
    o.request_timeout_ms = 20000 * TimeScale();
    StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    if (!c.ok()) return c.status();
    for (const TableOptions& t : tables) RETURN_IF_ERROR((*c)->CreateTable(t));
    owned.push_back(std::move(*c));
  }
  std::sort(owned.begin(), owned.end(),
            [](const auto& a, const auto& b) { return a->worker_id() < b->worker_id(); });
  return owned;
}

inline wire::ShardMap MapOf(const std::string& coordinator) {
  Message m;
  m.header.set_type(wire::GET_SHARD_MAP);
  return Ask(coordinator, std::move(m)).shard_map();
}

// The kinds of the coordinator's events, oldest first.
inline std::vector<std::string> EventKinds(const std::string& coordinator) {
  Message m;
  m.header.set_type(wire::GET_EVENTS);
  m.header.mutable_events_request()->set_after_seq(0);
  std::vector<std::string> kinds;
  const wire::Header reply = Ask(coordinator, std::move(m));
  for (const std::string& line : reply.events_reply().lines()) {
    const size_t at = line.find("\"kind\":\"");
    if (at != std::string::npos) {
      kinds.push_back(line.substr(at + 8, line.find('"', at + 8) - at - 8));
    }
  }
  return kinds;
}

// A server started in the test with --join, stopped (before the cluster)
// when it goes.
class JoinedServer {
 public:
  // `max_bytes`: its quota of dense state (0: none).
  explicit JoinedServer(const std::string& coordinator, uint64_t max_bytes = 0) {
    ServerOptions so;
    so.max_bytes = max_bytes;
    so.coordinator = coordinator;
    so.store.kind = "memory";
    so.heartbeat_ms = 100;
    so.join = true;
    auto s = Server::Start(so);
    CHECK(s.ok()) << s.status();
    server_ = std::move(s).value();
    thread_ = std::thread([this] { server_->Run().IgnoreError(); });
  }
  ~JoinedServer() {
    server_->Stop();
    thread_.join();
  }
  Server* server() { return server_.get(); }

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

// DRAIN_SERVER `id` as an operator.
inline Status Drain(const std::string& coordinator, int id) {
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator);
  Message m;
  m.header.set_type(wire::DRAIN_SERVER);
  m.header.mutable_range_move()->set_source(id);
  SetMemberToken(OperatorSession(&rpc, peer), &m.header);
  return rpc.CallSync(peer, std::move(m), 10000).status();
}

// Whether the coordinator shows server `id` alive.
inline bool ServerAlive(const std::string& coordinator, int id) {
  Message m;
  m.header.set_type(wire::GET_STATUS);
  const wire::Header reply = Ask(coordinator, std::move(m));
  for (const wire::ServerState& s : reply.status_reply().servers()) {
    if (s.info().id() == id) return s.info().alive();
  }
  return false;
}

// The parts of `worker`'s incarnation `incarnation` applied on the servers
// at `endpoints` (SERVER_STATS applied_parts).
inline uint64_t AppliedParts(const std::vector<std::string>& endpoints, int worker,
                             uint64_t incarnation) {
  uint64_t applied = 0;
  for (const std::string& ep : endpoints) {
    Message m;
    m.header.set_type(wire::SERVER_STATS);
    const wire::Header reply = Ask(ep, std::move(m));
    for (const wire::AppliedParts& p : reply.server_stats().applied_parts()) {
      if (p.worker() == worker && p.incarnation() == incarnation) applied += p.parts();
    }
  }
  return applied;
}

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_ELASTIC_ELASTIC_TEST_UTIL_H_
