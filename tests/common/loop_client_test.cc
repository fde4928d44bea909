// LoopClient: requests sent from an RpcServer's loop and answered on it,
// against a real echo RpcServer; deadlines on a FakeClock; failures never
// completed from inside Call().
#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/loop_client.h"
#include "common/rpc_server.h"
#include "tests/common/echo_server.h"

namespace relaxps {
namespace {

using test::EchoServer;

// An RpcServer loop on a thread with a LoopClient on it.
class Loop {
 public:
  explicit Loop(const Clock* clock = nullptr) {
    RpcServerOptions o;
    o.clock = clock;
    auto s = RpcServer::Bind(o);
    CHECK(s.ok()) << s.status();
    server_ = std::move(s).value();
    RpcClientOptions co;
    co.clock = clock;
    client_ = std::make_unique<LoopClient>(server_.get(), co, /*sweep_ms=*/10);
    thread_ = std::thread([this] {
      loop_thread_ = std::this_thread::get_id();
      server_->Run([](Request) {});
    });
  }
  ~Loop() {
    server_->Stop();
    thread_.join();
    client_.reset();  // After Run() returned (LoopClient's contract).
  }
  // Runs fn(client) on the loop thread and waits for it.
  template <typename Fn>
  void OnLoop(Fn fn) {
    std::promise<void> done;
    server_->Post([&] {
      fn(client_.get());
      done.set_value();
    });
    done.get_future().wait();
  }
  bool OnLoopThread() const { return std::this_thread::get_id() == loop_thread_; }

 private:
  std::unique_ptr<RpcServer> server_;
  std::unique_ptr<LoopClient> client_;
  std::thread thread_;
  std::atomic<std::thread::id> loop_thread_{};
};

Message Numbered(uint32_t n) {
  Message m;
  m.header.set_type(wire::PING);
  m.frames.push_back(Frame::Copy(&n, sizeof(n)));
  return m;
}

TEST(LoopClientTest, RepliesRunOnTheLoopThreadInOrder) {
  EchoServer echo;
  Loop loop;
  constexpr int kCalls = 200;
  std::vector<uint32_t> got;  // Loop thread only.
  std::atomic<int> off_loop{0};
  std::promise<void> all;
  loop.OnLoop([&](LoopClient* c) {
    const int peer = c->Connect(echo.endpoint());
    EXPECT_EQ(c->Connect(echo.endpoint()), peer);  // Idempotent.
    for (uint32_t i = 0; i < kCalls; ++i) {
      c->Call(peer, Numbered(i), 5000, [&](const Status& s, Message reply) {
        if (!loop.OnLoopThread()) off_loop.fetch_add(1);
        EXPECT_TRUE(s.ok()) << s;
        got.push_back(reply.frames.size() == 1 ? *reply.frames[0].as<uint32_t>() : 999999);
        if (got.size() == kCalls) all.set_value();
      });
    }
  });
  ASSERT_EQ(all.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(off_loop.load(), 0);
  loop.OnLoop([&](LoopClient* c) {
    ASSERT_EQ(got.size(), static_cast<size_t>(kCalls));
    for (uint32_t i = 0; i < kCalls; ++i) EXPECT_EQ(got[i], i);
    EXPECT_EQ(c->requests(), static_cast<uint64_t>(kCalls));
    EXPECT_EQ(c->timeouts(), 0u);
  });
}

TEST(LoopClientTest, DeadlinesFollowTheClockAndFailuresNeverCompleteInsideCall) {
  FakeClock clock;
  Loop loop(&clock);
  std::promise<Status> timed_out, bad_peer;
  bool inside_call = false;
  bool completed_inside_call = false;
  loop.OnLoop([&](LoopClient* c) {
    const int dead = c->Connect("tcp://127.0.0.1:9");  // Nobody answers.
    inside_call = true;
    c->Call(dead, Numbered(1), 60000, [&](const Status& s, Message) {
      completed_inside_call |= inside_call;
      timed_out.set_value(s);
    });
    c->Call(dead + 7, Numbered(2), 1000, [&](const Status& s, Message) {
      completed_inside_call |= inside_call;
      bad_peer.set_value(s);
    });
    inside_call = false;
  });
  auto bad = bad_peer.get_future();
  ASSERT_EQ(bad.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(bad.get().code(), StatusCode::kInvalidArgument);
  auto late = timed_out.get_future();
  // Not before the fake clock passes the one-minute deadline.
  EXPECT_EQ(late.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  clock.AdvanceMs(61000);
  ASSERT_EQ(late.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(late.get().code(), StatusCode::kDeadlineExceeded);
  loop.OnLoop([&](LoopClient* c) {
    EXPECT_FALSE(completed_inside_call);
    EXPECT_EQ(c->timeouts(), 1u);
  });
}

}  // namespace
}  // namespace relaxps
