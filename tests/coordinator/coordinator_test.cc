// The coordinator's clock-driven rules under a FakeClock: a server that stops
// heartbeating is declared dead once heartbeat_timeout_ms of clock time has
// passed (at the next liveness check) and not before, and coordinated checkpoints follow checkpoint_every_s of
// clock time. No test sleeps for those durations: the clock is advanced, and
// the loop (whose waits the fake clock bounds to a few ms) reacts at once.
#include "coordinator/coordinator.h"

#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/clock.h"
#include "common/member_token.h"
#include "common/rpc_client.h"
#include "server/server.h"
#include "tests/storage/storage_test_util.h"
#include "tests/test_util.h"
#include "tests/coordinator/running_coordinator.h"

namespace relaxps {
namespace {

using test::Eventually;
using test::RunningCoordinator;

wire::StatusReply GetStatus(RpcClient* rpc, int peer) {
  Message m;
  m.header.set_type(wire::GET_STATUS);
  StatusOr<Message> reply = rpc->CallSync(peer, std::move(m), 5000);
  EXPECT_TRUE(reply.ok()) << reply.status();
  return reply.ok() ? reply->header.status_reply() : wire::StatusReply();
}

// Registers a "server" at an endpoint nobody listens on (so nothing sent to
// it is ever answered) for process `pid`. A refusal comes back as the
// call's status.
StatusOr<Message> Register(RpcClient* rpc, int peer, const std::string& role, int pid) {
  Message reg;
  reg.header.set_type(wire::REGISTER);
  reg.header.mutable_register_request()->set_role(role);
  reg.header.mutable_register_request()->set_requested_id(-1);
  if (role == "server") reg.header.mutable_register_request()->set_endpoint("tcp://127.0.0.1:9");
  reg.header.mutable_register_request()->set_pid(pid);
  reg.header.mutable_register_request()->set_protocol_version(kProtocolVersion);
  return rpc->CallSync(peer, std::move(reg), 5000);
}

Status RegisterSilentServer(RpcClient* rpc, int peer, int pid) {
  return Register(rpc, peer, "server", pid).status();
}

TEST(CoordinatorClockTest, SilentServerIsDeclaredDeadAfterTheHeartbeatTimeoutOfClockTime) {
  FakeClock clock;
  CoordinatorOptions co;
  co.num_servers = 1;
  co.heartbeat_timeout_ms = 3000;
  co.clock = &clock;
  RunningCoordinator coordinator(co);

  // A "server" that registers and then never heartbeats.
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  const Status registered = RegisterSilentServer(&rpc, peer, getpid());
  ASSERT_TRUE(registered.ok()) << registered;

  // 2.9 s of clock time: still alive, however long the loop runs meanwhile.
  clock.AdvanceMs(2900);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // Let several liveness checks run.
  wire::StatusReply before = GetStatus(&rpc, peer);
  ASSERT_EQ(before.servers_size(), 1);
  EXPECT_TRUE(before.servers(0).info().alive());
  EXPECT_EQ(before.servers(0).last_heartbeat_ms_ago(), 2900);
  EXPECT_EQ(before.job_error(), "");

  // Past the timeout and the next liveness check (every timeout / 5 = 600 ms
  // of clock time, the last one at 2900): declared dead, and recovery "none"
  // ends the job.
  clock.AdvanceMs(700);
  wire::StatusReply after;
  ASSERT_TRUE(Eventually([&] {
    after = GetStatus(&rpc, peer);
    return !after.job_error().empty();
  }));
  EXPECT_FALSE(after.servers(0).info().alive());
  EXPECT_NE(after.job_error().find("missed heartbeats for 3000 ms"), std::string::npos)
      << after.job_error();
}

TEST(CoordinatorClockTest, CheckpointsFollowCheckpointEverySecondsOfClockTime) {
  testing_storage::ScopedTempDir dir("coordinator_clock");
  FakeClock clock;
  CoordinatorOptions co;
  co.num_servers = 1;
  // Long enough that the real-clock server's heartbeats never lapse in
  // clock time; liveness checks run every heartbeat_timeout_ms / 5 = 20 s.
  co.heartbeat_timeout_ms = 100000;
  co.checkpoint_every_s = 60;
  co.clock = &clock;
  RunningCoordinator coordinator(co);

  ServerOptions so;
  so.coordinator = coordinator.endpoint();
  so.store.data_dir = dir.path() + "/server-0";
  so.heartbeat_ms = 50;
  auto server = Server::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  std::thread serving([&] { (*server)->Run().IgnoreError(); });

  ClientOptions cli;
  cli.coordinator = coordinator.endpoint();
  cli.role = "operator";  // Creates a table: an operator session.
  auto client = Client::Connect(cli);
  ASSERT_TRUE(client.ok()) << client.status();
  TableOptions t;
  t.name = "w";
  t.size = 100;
  ASSERT_TRUE((*client)->CreateTable(t).ok());

  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  // 50 s of clock time: the schedule is not due yet.
  clock.AdvanceMs(50000);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(GetStatus(&rpc, peer).has_latest_checkpoint());

  // Past 60 s: the next liveness check starts a coordinated checkpoint.
  clock.AdvanceMs(30000);
  wire::StatusReply st;
  EXPECT_TRUE(Eventually([&] {
    st = GetStatus(&rpc, peer);
    return st.has_latest_checkpoint();
  }));
  EXPECT_EQ(st.checkpoints_failed(), 0u);
  EXPECT_EQ(st.checkpoints_size(), 1);

  client->reset();
  (*server)->Stop();
  serving.join();
}

// A checkpoint in flight when a server dies fails as soon as the server is
// declared dead, not at the checkpoint deadline (120 s): until it finished,
// no later checkpoint could start, so a second failure rolled back to the
// checkpoint taken before the first one.
TEST(CoordinatorClockTest, CheckpointInFlightFailsWhenItsServerIsDeclaredDead) {
  FakeClock clock;
  CoordinatorOptions co;
  co.num_servers = 1;
  co.heartbeat_timeout_ms = 3000;
  co.recovery = "checkpoint";
  co.checkpoint_timeout_ms = 120000;
  co.clock = &clock;
  RunningCoordinator coordinator(co);

  // A "server" whose endpoint nobody listens on: the CHECKPOINT sent to it is
  // never answered, and it never heartbeats. (The promise outlives the
  // client, whose destructor completes what is still in flight.)
  std::promise<StatusOr<Message>> answered;
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  ASSERT_TRUE(RegisterSilentServer(&rpc, peer, getpid()).ok());

  StatusOr<Message> session = Register(&rpc, peer, "operator", getpid());
  ASSERT_TRUE(session.ok()) << session.status();
  Message trigger;
  trigger.header.set_type(wire::TRIGGER_CHECKPOINT);
  SetMemberToken(session->header.register_reply().member_token(), &trigger.header);
  rpc.Call(peer, std::move(trigger), 60000,
           [&answered](const Status& s, Message reply) {
             if (s.ok()) {
               answered.set_value(std::move(reply));
             } else {
               answered.set_value(s);
             }
           });
  std::future<StatusOr<Message>> reply = answered.get_future();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(reply.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout)
      << "the checkpoint was answered before its server could have written it";

  // Past the heartbeat timeout of clock time (far from the 120 s deadline):
  // the server is declared dead and the checkpoint fails, naming why.
  clock.AdvanceMs(3700);
  ASSERT_EQ(reply.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  // The refusal comes back as the call's status.
  const Status st = reply.get().status();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("missed heartbeats"), std::string::npos) << st;
  EXPECT_EQ(GetStatus(&rpc, peer).checkpoints_failed(), 1u);
}

// A server whose REGISTER reply came too late retries: the coordinator
// answers the same process at the same endpoint with the id it already has
// (it used to refuse: "job already has 1 server(s)"), and a different
// process is still refused.
TEST(CoordinatorTest, RepeatedServerRegistrationOfTheSameProcessGetsTheSameId) {
  CoordinatorOptions co;
  co.num_servers = 1;
  RunningCoordinator coordinator(co);
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  auto register_server = [&](int pid) { return RegisterSilentServer(&rpc, peer, pid); };
  ASSERT_TRUE(register_server(getpid()).ok());
  Status again = register_server(getpid());
  EXPECT_TRUE(again.ok()) << again;
  wire::StatusReply st = GetStatus(&rpc, peer);
  ASSERT_EQ(st.servers_size(), 1);
  EXPECT_EQ(st.servers(0).info().id(), 0);
  Status stranger = register_server(getpid() + 1);
  EXPECT_FALSE(stranger.ok());
  EXPECT_NE(stranger.message().find("already has 1 server"), std::string::npos) << stranger;
}

// A server that registers (again) learns the live workers and their clocks in
// its RegisterReply, before it serves anything: a server restored from an old
// checkpoint would otherwise refuse the workers' pushes as too far ahead of
// its clock (--max_clocks_ahead) until its first heartbeat.
TEST(CoordinatorTest, ServerRegistrationCarriesTheLiveWorkersAndTheirClocks) {
  CoordinatorOptions co;
  co.num_servers = 1;
  co.consistency = ConsistencyModel::kBsp;
  RunningCoordinator coordinator(co);
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  // The worker first (a silent server would never acknowledge its worker set).
  StatusOr<Message> worker = Register(&rpc, peer, "worker", getpid());
  ASSERT_TRUE(worker.ok()) << worker.status();
  const int worker_id = worker->header.register_reply().id();
  Message hb;
  hb.header.set_type(wire::HEARTBEAT);
  hb.header.mutable_heartbeat()->set_role("worker");
  hb.header.mutable_heartbeat()->set_id(worker_id);
  SetMemberToken(worker->header.register_reply().member_token(), &hb.header);
  hb.header.mutable_heartbeat()->set_clock(42);
  ASSERT_TRUE(rpc.CallSync(peer, std::move(hb), 5000).ok());
  StatusOr<Message> server = Register(&rpc, peer, "server", getpid());
  ASSERT_TRUE(server.ok()) << server.status();
  const wire::LiveWorkers& lw = server->header.register_reply().live_workers();
  ASSERT_EQ(lw.ids_size(), 1);
  EXPECT_EQ(lw.ids(0), worker_id);
  ASSERT_EQ(lw.clocks_size(), 1);
  EXPECT_EQ(lw.clocks(0), 42);
}

// Hybrid replicates like chain: it needs 2 <= --replicas <= --num_servers,
// and says which policy asked.
TEST(CoordinatorTest, WorkerUnknownToARestartedCoordinatorRegistersAgainWithItsId) {
  CoordinatorOptions co;
  co.num_servers = 1;
  auto first = std::make_unique<RunningCoordinator>(co);
  const std::string endpoint = first->endpoint();
  ClientOptions o;
  o.coordinator = endpoint;
  o.worker_id = 7;
  o.heartbeat_ms = 50;
  auto client = Client::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  // The same endpoint, no stored state: this coordinator never heard of
  // worker 7, and answers its heartbeats NotFound until it registers again.
  first.reset();
  co.bind = endpoint;
  RunningCoordinator second(co);
  RpcClient rpc;
  const int peer = rpc.Connect(endpoint);
  EXPECT_TRUE(Eventually([&] {
    const wire::StatusReply st = GetStatus(&rpc, peer);
    for (const wire::WorkerState& w : st.workers()) {
      if (w.id() == 7 && w.alive()) return true;
    }
    return false;
  })) << "worker 7 did not register again";
  EXPECT_TRUE(Eventually([&] { return (*client)->coordinator_healthy(); }));
  EXPECT_EQ((*client)->worker_id(), 7);
}

TEST(CoordinatorTest, HybridNeedsReplicasLikeChain) {
  CoordinatorOptions co;
  co.num_servers = 2;
  co.recovery = "hybrid";
  co.replicas = 2;
  EXPECT_TRUE(co.Validate().ok()) << co.Validate();
  for (int replicas : {1, 3}) {
    co.replicas = replicas;
    Status s = co.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << replicas;
    EXPECT_NE(s.message().find("under --recovery=hybrid"), std::string::npos) << s;
  }
  co.recovery = "stateless";  // Does not replicate: not checked.
  EXPECT_TRUE(co.Validate().ok()) << co.Validate();
}

// A worker's map watch (GET_SHARD_MAP with watch_ms) is held while the map
// is unchanged, answered as soon as the map changes (here: a server
// registers), and answered unchanged when it expires (clock time).
TEST(CoordinatorClockTest, MapWatchIsAnsweredWhenTheMapChangesOrItExpires) {
  FakeClock clock;
  CoordinatorOptions co;
  co.num_servers = 1;
  co.heartbeat_timeout_ms = 60000;
  co.clock = &clock;
  RunningCoordinator coordinator(co);
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  auto watch = [&](uint64_t version) {
    auto done = std::make_shared<std::promise<StatusOr<Message>>>();
    Message m;
    m.header.set_type(wire::GET_SHARD_MAP);
    m.header.set_shard_map_version(version);
    m.header.set_watch_ms(10000);
    rpc.Call(peer, std::move(m), 60000, [done](const Status& st, Message reply) {
      done->set_value(st.ok() ? StatusOr<Message>(std::move(reply)) : StatusOr<Message>(st));
    });
    return done->get_future();
  };
  const uint64_t v0 = GetStatus(&rpc, peer).shard_map().version();
  // Older than the map: answered at once.
  auto stale = watch(v0 - 1);
  ASSERT_EQ(stale.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(stale.get()->header.shard_map().version(), v0);
  // Current: held until the map changes.
  auto held = watch(v0);
  EXPECT_EQ(held.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  ASSERT_TRUE(RegisterSilentServer(&rpc, peer, getpid()).ok());
  ASSERT_EQ(held.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  StatusOr<Message> changed = held.get();
  ASSERT_TRUE(changed.ok()) << changed.status();
  const uint64_t v1 = changed->header.shard_map().version();
  EXPECT_GT(v1, v0);
  EXPECT_EQ(changed->header.shard_map().servers_size(), 1);
  // Unchanged: answered when the watch expires (at the first liveness check,
  // every 60000 / 5 ms of clock time, past its 10 s), not before. The watch
  // may reach the coordinator after the first advance: its deadline is then
  // at most 19 s of clock time.
  auto expiring = watch(v1);
  clock.AdvanceMs(9000);
  EXPECT_EQ(expiring.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  clock.AdvanceMs(12000);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  clock.AdvanceMs(12000);
  ASSERT_EQ(expiring.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(expiring.get()->header.shard_map().version(), v1);
}

}  // namespace
}  // namespace relaxps
