// The coordinator's clock-driven rules under a FakeClock: a server that stops
// heartbeating is declared dead once heartbeat_timeout_ms of clock time has
// passed (at the next liveness check) and not before, and coordinated checkpoints follow checkpoint_every_s of
// clock time. No test sleeps for those durations: the clock is advanced, and
// the loop (whose waits the fake clock bounds to a few ms) reacts at once.
#include "coordinator/coordinator.h"

#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/clock.h"
#include "common/rpc_client.h"
#include "server/server.h"
#include "tests/storage/storage_test_util.h"

namespace relaxps {
namespace {

// Runs a coordinator on a thread for the test's scope.
class RunningCoordinator {
 public:
  explicit RunningCoordinator(const CoordinatorOptions& options) {
    auto c = Coordinator::Start(options);
    CHECK(c.ok()) << c.status();
    coordinator_ = std::move(c).value();
    thread_ = std::thread([this] { coordinator_->Run(); });
  }
  ~RunningCoordinator() {
    coordinator_->Stop();
    thread_.join();
  }
  const std::string& endpoint() const { return coordinator_->endpoint(); }

 private:
  std::unique_ptr<Coordinator> coordinator_;
  std::thread thread_;
};

wire::StatusReply GetStatus(RpcClient* rpc, int peer) {
  Message m;
  m.header.set_type(wire::GET_STATUS);
  StatusOr<Message> reply = rpc->CallSync(peer, std::move(m), 5000);
  EXPECT_TRUE(reply.ok()) << reply.status();
  return reply.ok() ? reply->header.status_reply() : wire::StatusReply();
}

// Polls `done` (real time, bounded) and returns whether it became true.
bool Eventually(const std::function<bool()>& done, int max_ms = 20000) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(max_ms);
  while (std::chrono::steady_clock::now() < give_up) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
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
  Message reg;
  reg.header.set_type(wire::REGISTER);
  reg.header.mutable_register_request()->set_role("server");
  reg.header.mutable_register_request()->set_requested_id(-1);
  reg.header.mutable_register_request()->set_endpoint("tcp://127.0.0.1:9");
  reg.header.mutable_register_request()->set_pid(getpid());
  StatusOr<Message> registered = rpc.CallSync(peer, std::move(reg), 5000);
  ASSERT_TRUE(registered.ok()) << registered.status();

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
  cli.role = "observer";
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

}  // namespace
}  // namespace relaxps
