// Well-formed but forged control messages (issue 13), without --security=curve:
// every one is refused and the job goes on.
//  * WORKER_SET / INSTALL_MAP / CHECKPOINT sent straight to a server by
//    someone other than the coordinator: PermissionDenied, nothing changes.
//  * A server REGISTER for the id of a live server: refused while the old
//    instance answers a probe; accepted once it does not.
//  * A REGISTER of another protocol version: refused naming both versions.
//  * A flood of worker registrations: bounded by max_workers.
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/rpc_client.h"
#include "coordinator/coordinator.h"
#include "tests/coordinator/running_coordinator.h"
#include "tests/server/in_process_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using test::RunningCoordinator;

wire::ShardMap GetMap(RpcClient* rpc, int coordinator) {
  Message m;
  m.header.set_type(wire::GET_SHARD_MAP);
  auto reply = rpc->CallSync(coordinator, std::move(m), 5000);
  CHECK(reply.ok()) << reply.status();
  return reply->header.shard_map();
}

Message Register(const std::string& role, int requested_id, const std::string& endpoint, int pid,
                 int version = kProtocolVersion) {
  Message reg;
  reg.header.set_type(wire::REGISTER);
  wire::RegisterRequest* r = reg.header.mutable_register_request();
  r->set_role(role);
  r->set_requested_id(requested_id);
  r->set_endpoint(endpoint);
  r->set_pid(pid);
  r->set_protocol_version(version);
  return reg;
}

std::unique_ptr<Client> ConnectWorker(const std::string& coordinator) {
  ClientOptions o;
  o.coordinator = coordinator;
  o.request_timeout_ms = static_cast<int>(test::Scaled(test::Millis(10000)).count());
  auto c = Client::Connect(o);
  CHECK(c.ok()) << c.status();
  return std::move(c).value();
}

TEST(ForgedMessagesTest, ControlMessagesFromAnyoneButTheCoordinatorAreRefused) {
  InProcessCluster cluster(1, ConsistencyModel::kBsp, 0);
  auto worker = ConnectWorker(cluster.coordinator());
  TableOptions t;
  t.name = "w";
  t.size = 64;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;
  ASSERT_OK(worker->CreateTable(t));

  RpcClient rpc;
  const wire::ShardMap map = GetMap(&rpc, rpc.Connect(cluster.coordinator()));
  const int server = rpc.Connect(map.servers(0).endpoint());

  // The attack of the issue: a live set with only worker 424242 at version
  // 2^62 (it made both BSP workers exit).
  Message worker_set;
  worker_set.header.set_type(wire::WORKER_SET);
  worker_set.header.mutable_live_workers()->add_ids(424242);
  worker_set.header.mutable_live_workers()->add_clocks(0);
  worker_set.header.mutable_live_workers()->set_version(uint64_t{1} << 62);
  StatusOr<Message> r = rpc.CallSync(server, std::move(worker_set), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();

  Message install;
  install.header.set_type(wire::INSTALL_MAP);
  wire::ShardMap forged = map;
  forged.set_version(map.version() + 1);
  forged.mutable_tables()->Clear();
  *install.header.mutable_shard_map() = forged;
  r = rpc.CallSync(server, std::move(install), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();

  Message checkpoint;
  checkpoint.header.set_type(wire::CHECKPOINT);
  checkpoint.header.mutable_checkpoint_request()->set_clock(1);
  r = rpc.CallSync(server, std::move(checkpoint), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();

  // The BSP job goes on: the real worker's round closes (it would wait for
  // worker 424242 if the forged set had been applied).
  FloatBuffer grads(64), out(64);
  for (auto& g : grads) g = 1.0f;
  for (int clock = 0; clock < 3; ++clock) {
    ASSERT_OK(worker->PushPull("w", 0, grads, out).get());
    ASSERT_OK(worker->Clock());
  }
  for (float v : out) EXPECT_NE(v, 0.0f);
}

TEST(ForgedMessagesTest, ServerRegisterForALiveIdIsRefusedUntilTheOldOneIsSilent) {
  InProcessCluster cluster(1);
  RpcClient rpc;
  const int coordinator = rpc.Connect(cluster.coordinator());
  const std::string endpoint = GetMap(&rpc, coordinator).servers(0).endpoint();

  // The attack of the issue: role server, id 0, a dead endpoint.
  StatusOr<Message> r =
      rpc.CallSync(coordinator, Register("server", 0, "tcp://127.0.0.1:9", 4242), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  EXPECT_NE(r.status().message().find("answered a probe"), std::string::npos) << r.status();
  wire::ShardMap after = GetMap(&rpc, coordinator);
  EXPECT_EQ(after.servers(0).endpoint(), endpoint);
  EXPECT_TRUE(after.servers(0).alive());
}

TEST(ForgedMessagesTest, ServerWhoseOldInstanceIsSilentTakesItsIdBack) {
  CoordinatorOptions co;
  co.num_servers = 1;
  co.heartbeat_timeout_ms = 60000;  // Never declared dead by heartbeats here.
  RunningCoordinator coordinator(co);
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  // A "server" nobody listens for: it can never answer the probe.
  ASSERT_OK(rpc.CallSync(peer, Register("server", -1, "tcp://127.0.0.1:9", 1111), 5000));
  const auto start = std::chrono::steady_clock::now();
  StatusOr<Message> r =
      rpc.CallSync(peer, Register("server", 0, "tcp://127.0.0.1:11", 2222), 5000);
  ASSERT_OK(r);
  EXPECT_EQ(r->header.register_reply().id(), 0);
  EXPECT_FALSE(r->header.register_reply().coordinator_identity().empty());
  // It waited for the probe (takeover_probe_ms, 500 ms).
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(450));
  EXPECT_EQ(GetMap(&rpc, peer).servers(0).endpoint(), "tcp://127.0.0.1:11");
}

TEST(ForgedMessagesTest, ProtocolVersionMismatchIsRefusedNamingBothVersions) {
  CoordinatorOptions co;
  RunningCoordinator coordinator(co);
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  StatusOr<Message> r = rpc.CallSync(peer, Register("worker", -1, "", 1, 1), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("protocol " + std::to_string(kProtocolVersion)),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("sent version 1"), std::string::npos) << r.status();
  r = rpc.CallSync(peer, Register("server", -1, "tcp://127.0.0.1:9", 1, 0), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("from before protocol versions"), std::string::npos)
      << r.status();
}

TEST(ForgedMessagesTest, WorkerRegistrationsBeyondMaxWorkersAreRefused) {
  CoordinatorOptions co;
  co.num_workers = 2;
  co.max_workers = 3;
  RunningCoordinator coordinator(co);
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  for (int i = 0; i < 3; ++i) ASSERT_OK(rpc.CallSync(peer, Register("worker", -1, "", 10 + i), 5000));
  StatusOr<Message> r = rpc.CallSync(peer, Register("worker", -1, "", 99), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("--max_workers=3"), std::string::npos) << r.status();
  // A worker taking back its own id is not a new one.
  EXPECT_OK(rpc.CallSync(peer, Register("worker", 1, "", 11), 5000));
}

}  // namespace
}  // namespace relaxps
