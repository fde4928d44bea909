// How a job ends (Coordinator::job_end(): the verdict, the reason and
// relaxps-coordinator's exit status, docs/events.md "Exit codes") and the
// events the coordinator emits on the way (its events file and GET_EVENTS,
// what relaxps-ctl events reads). Under a FakeClock: heartbeat timeouts pass
// by advancing it, no test sleeps for them.
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/member_token.h"
#include "common/rpc_client.h"
#include "coordinator/coordinator.h"
#include "coordinator/event_ring.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using test::Eventually;
using test::MakeTempDir;
using test::ReadFile;
using test::RemoveTree;

// A coordinator whose Run() returns by itself (or on Stop()); job_end() is
// read once it did.
class JobEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    options_.num_servers = 1;
    options_.num_workers = 1;
    options_.heartbeat_timeout_ms = 1000;
    options_.failed_exit_ms = 500;
    options_.clock = &clock_;
    options_.events_file = dir_ + "/events.jsonl";
  }
  void TearDown() override {
    if (thread_.joinable()) {
      coordinator_->Stop();
      thread_.join();
    }
    RemoveTree(dir_);
  }
  void Start() {
    auto c = Coordinator::Start(options_);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(c).value();
    thread_ = std::thread([this] {
      coordinator_->Run();
      returned_.store(true);
    });
    peer_ = rpc_.Connect(coordinator_->endpoint());
  }
  // Advances the clock in heartbeat-check steps until Run() returned.
  bool RunsToItsEnd() {
    return Eventually([this] {
      clock_.AdvanceMs(100);
      return returned_.load();
    }) && (thread_.join(), true);
  }
  StatusOr<Message> Call(Message m) { return rpc_.CallSync(peer_, std::move(m), 5000); }
  // Registers a worker, or a server at an endpoint nobody listens on (it
  // never answers nor heartbeats). Returns its id.
  int Register(const std::string& role) {
    Message reg;
    reg.header.set_type(wire::REGISTER);
    wire::RegisterRequest* r = reg.header.mutable_register_request();
    r->set_role(role);
    r->set_requested_id(-1);
    if (role == "server") r->set_endpoint("tcp://127.0.0.1:9");
    r->set_pid(getpid());
    r->set_protocol_version(kProtocolVersion);
    StatusOr<Message> reply = Call(std::move(reg));
    EXPECT_TRUE(reply.ok()) << reply.status();
    if (!reply.ok()) return -1;
    tokens_[reply->header.register_reply().id()] = reply->header.register_reply().member_token();
    return reply->header.register_reply().id();
  }
  // Member tokens of the workers registered, by id.
  std::map<int, std::string> tokens_;
  int RegisterWorker() { return Register("worker"); }
  // A worker's heartbeat; `finished`: its final report, with `failure`.
  Status Heartbeat(int worker, bool finished, const std::string& failure = "") {
    Message hb;
    hb.header.set_type(wire::HEARTBEAT);
    hb.header.mutable_heartbeat()->set_role("worker");
    hb.header.mutable_heartbeat()->set_id(worker);
    SetMemberToken(tokens_[worker], &hb.header);
    hb.header.mutable_heartbeat()->set_clock(7);
    hb.header.mutable_heartbeat()->set_finished(finished);
    hb.header.mutable_heartbeat()->set_failure(failure);
    return Call(std::move(hb)).status();
  }
  std::string Events() {
    StatusOr<std::string> text = ReadFile(options_.events_file);
    return text.ok() ? *text : "";
  }

  std::string dir_;
  FakeClock clock_;
  CoordinatorOptions options_;
  std::unique_ptr<Coordinator> coordinator_;
  std::thread thread_;
  std::atomic<bool> returned_{false};
  RpcClient rpc_;
  int peer_ = -1;
};

// The worker reported finishing, then its goodbye was lost (it went silent):
// the job still ended as configured.
TEST_F(JobEndTest, AFinishedWorkerWhoseGoodbyeIsLostLeavesTheJobDone) {
  Start();
  const int worker = RegisterWorker();
  ASSERT_TRUE(Heartbeat(worker, /*finished=*/true).ok());
  ASSERT_TRUE(RunsToItsEnd());
  const JobEnd end = coordinator_->job_end();
  EXPECT_EQ(end.verdict, "done") << end.reason;
  EXPECT_EQ(end.exit_code, kExitDone);
  EXPECT_TRUE(coordinator_->result().ok()) << coordinator_->result();
  const std::string events = Events();
  EXPECT_NE(events.find("\"kind\":\"member_finished\",\"role\":\"worker\",\"id\":0,\"clock\":7"),
            std::string::npos) << events;
  EXPECT_NE(events.find("\"kind\":\"member_dead\",\"role\":\"worker\",\"id\":0"),
            std::string::npos) << events;
  EXPECT_NE(events.find("\"finished\":true}"), std::string::npos) << events;
  EXPECT_NE(events.find("\"kind\":\"job_end\",\"verdict\":\"done\""), std::string::npos) << events;
}

TEST_F(JobEndTest, AWorkerThatWentSilentWithoutFinishingIsWorkersLost) {
  Start();
  const int worker = RegisterWorker();
  ASSERT_TRUE(Heartbeat(worker, /*finished=*/false).ok());
  ASSERT_TRUE(RunsToItsEnd());
  const JobEnd end = coordinator_->job_end();
  EXPECT_EQ(end.verdict, "workers_lost");
  EXPECT_EQ(end.exit_code, kExitWorkersLost);
  EXPECT_NE(end.reason.find("1 worker(s) went silent"), std::string::npos) << end.reason;
  EXPECT_FALSE(coordinator_->result().ok());
  EXPECT_NE(Events().find("\"kind\":\"job_end\",\"verdict\":\"workers_lost\",\"reason\":\"1 "
                          "worker(s) went silent"),
            std::string::npos);
}

// A worker that reported an error fails the job's end even though it said
// goodbye.
TEST_F(JobEndTest, AWorkerThatReportedAnErrorIsWorkersFailed) {
  Start();
  const int worker = RegisterWorker();
  ASSERT_TRUE(Heartbeat(worker, /*finished=*/true, "Unavailable: server 1 is lost").ok());
  Message bye;
  bye.header.set_type(wire::DEREGISTER);
  bye.header.set_sender(worker);
  SetMemberToken(tokens_[worker], &bye.header);
  ASSERT_TRUE(Call(std::move(bye)).ok());
  ASSERT_TRUE(RunsToItsEnd());
  const JobEnd end = coordinator_->job_end();
  EXPECT_EQ(end.verdict, "workers_failed");
  EXPECT_EQ(end.exit_code, kExitWorkersLost);
  EXPECT_EQ(end.reason, "1 worker(s) failed: worker 0: Unavailable: server 1 is lost");
  EXPECT_NE(Events().find("\"kind\":\"member_failed\",\"role\":\"worker\",\"id\":0,\"clock\":7,"),
            std::string::npos);
}

TEST_F(JobEndTest, AGoodbyeWithoutAFinalReportIsDoneAsBefore) {
  Start();
  const int worker = RegisterWorker();
  Message bye;
  bye.header.set_type(wire::DEREGISTER);
  bye.header.set_sender(worker);
  SetMemberToken(tokens_[worker], &bye.header);
  ASSERT_TRUE(Call(std::move(bye)).ok());
  ASSERT_TRUE(RunsToItsEnd());
  EXPECT_EQ(coordinator_->job_end().verdict, "done");
  EXPECT_NE(Events().find("\"kind\":\"member_left\",\"role\":\"worker\",\"id\":0}"),
            std::string::npos);
}

// Recovery "none": a lost server fails the job, and the exit status says so.
TEST_F(JobEndTest, AServerLostUnderNoneIsAFailedJob) {
  Start();
  ASSERT_EQ(Register("server"), 0);
  ASSERT_TRUE(RunsToItsEnd());
  const JobEnd end = coordinator_->job_end();
  EXPECT_EQ(end.verdict, "failed");
  EXPECT_EQ(end.exit_code, kExitJobFailed);
  EXPECT_NE(end.reason.find("server 0"), std::string::npos) << end.reason;
  EXPECT_NE(end.reason.find("recovery policy 'none' ends the job"), std::string::npos)
      << end.reason;
  const std::string events = Events();
  EXPECT_NE(events.find("\"kind\":\"member_dead\",\"role\":\"server\",\"id\":0"),
            std::string::npos) << events;
  EXPECT_NE(events.find("\"kind\":\"job_failed\""), std::string::npos) << events;
  EXPECT_NE(events.find("\"kind\":\"job_end\",\"verdict\":\"failed\""), std::string::npos);
}

TEST_F(JobEndTest, StoppedBeforeItsEndIsInterruptedUnlessItsLauncherEndsTheJob) {
  Start();
  RegisterWorker();
  coordinator_->Stop();
  thread_.join();
  EXPECT_EQ(coordinator_->job_end().verdict, "interrupted");
  EXPECT_EQ(coordinator_->job_end().exit_code, kExitInterrupted);

  options_.exit_when_done = false;  // As run_local.sh runs it.
  auto launched = Coordinator::Start(options_);
  ASSERT_TRUE(launched.ok());
  std::thread t([&] { (*launched)->Run(); });
  (*launched)->Stop();
  t.join();
  EXPECT_EQ((*launched)->job_end().verdict, "stopped");
  EXPECT_EQ((*launched)->job_end().exit_code, kExitDone);
}

// coordinator_started and endpoint() name the advertised endpoint (what
// others connect to), not the bound one.
TEST_F(JobEndTest, CoordinatorStartedNamesTheAdvertisedEndpoint) {
  options_.advertise = "localhost";
  Start();
  const std::string bound_port =
      coordinator_->endpoint().substr(coordinator_->endpoint().rfind(':'));
  EXPECT_EQ(coordinator_->endpoint(), "tcp://localhost" + bound_port);
  EXPECT_NE(Events().find("\"kind\":\"coordinator_started\",\"endpoint\":\"tcp://localhost" +
                          bound_port + "\""),
            std::string::npos)
      << Events();

  options_.advertise = "relaxps-a.example:7001";  // A forwarded port.
  auto forwarded = Coordinator::Start(options_);
  ASSERT_TRUE(forwarded.ok()) << forwarded.status();
  EXPECT_EQ((*forwarded)->endpoint(), "tcp://relaxps-a.example:7001");
  EXPECT_NE(Events().find("\"endpoint\":\"tcp://relaxps-a.example:7001\""), std::string::npos);
}

// GET_EVENTS (relaxps-ctl events): what the ring holds, then a held request
// answered by the next event.
TEST_F(JobEndTest, GetEventsReturnsTheRingAndHoldsAFollowerUntilTheNextEvent) {
  Start();
  auto get = [&](uint64_t after, int wait_ms) {
    Message m;
    m.header.set_type(wire::GET_EVENTS);
    m.header.mutable_events_request()->set_after_seq(after);
    m.header.mutable_events_request()->set_wait_ms(wait_ms);
    StatusOr<Message> reply = Call(std::move(m));
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? reply->header.events_reply() : wire::EventsReply();
  };
  const wire::EventsReply first = get(0, 0);
  ASSERT_EQ(first.lines_size(), 2);
  EXPECT_NE(first.lines(0).find("\"kind\":\"coordinator_started\""), std::string::npos);
  EXPECT_NE(first.lines(1).find("\"kind\":\"leader_elected\""), std::string::npos);
  EXPECT_EQ(first.last_seq(), 2u);
  EXPECT_EQ(first.missed(), 0u);
  // The same lines as the file.
  EXPECT_EQ(Events(), first.lines(0) + "\n" + first.lines(1) + "\n");

  // Held (the fake clock does not move), then answered by a registration.
  std::thread registers([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    RegisterWorker();
  });
  RpcClient follower;
  const int peer = follower.Connect(coordinator_->endpoint());
  Message m;
  m.header.set_type(wire::GET_EVENTS);
  m.header.mutable_events_request()->set_after_seq(first.last_seq());
  m.header.mutable_events_request()->set_wait_ms(30000);
  StatusOr<Message> held = follower.CallSync(peer, std::move(m), 10000);
  registers.join();
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_GE(held->header.events_reply().lines_size(), 1);
  EXPECT_NE(held->header.events_reply().lines(0).find("\"kind\":\"member_joined\""),
            std::string::npos);
  EXPECT_GT(held->header.events_reply().last_seq(), first.last_seq());
}

TEST(EventRingTest, KeepsTheNewestAndCountsWhatAReaderMissed) {
  EventRing ring(3);
  EXPECT_EQ(ring.last_seq(), 0u);
  EXPECT_TRUE(ring.Since(0, 10).lines.empty());
  for (int i = 1; i <= 5; ++i) EXPECT_EQ(ring.Append("e" + std::to_string(i)), uint64_t(i));
  EventRing::Slice s = ring.Since(0, 10);
  EXPECT_EQ(s.lines, (std::vector<std::string>{"e3", "e4", "e5"}));
  EXPECT_EQ(s.missed, 2u);
  EXPECT_EQ(s.last_seq, 5u);
  s = ring.Since(3, 1);  // At most one.
  EXPECT_EQ(s.lines, std::vector<std::string>{"e4"});
  EXPECT_EQ(s.missed, 0u);
  EXPECT_EQ(s.last_seq, 4u);
  s = ring.Since(5, 10);  // Nothing new.
  EXPECT_TRUE(s.lines.empty());
  EXPECT_EQ(s.last_seq, 5u);
}

}  // namespace
}  // namespace relaxps
