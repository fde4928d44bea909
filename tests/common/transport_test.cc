// RpcClient against a real RpcServer, and the fault-injecting wrapper's
// drop / duplicate / delay / partition behaviour, seeded and reproducible.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/fault_injecting_transport.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "tests/common/echo_server.h"

namespace relaxps {
namespace {

using test::EchoServer;

Message Ping(uint32_t payload) {
  Message m;
  m.header.set_type(wire::SERVER_STATS);
  m.frames.push_back(Frame::Copy(&payload, sizeof(payload)));
  return m;
}

TEST(RpcClientTest, EchoesPayloadAndTimesOutOnASilentPeer) {
  EchoServer echo;
  RpcClient rpc;
  const int peer = rpc.Connect(echo.endpoint());
  auto reply = rpc.CallSync(peer, Ping(42), 3000);
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->frames.size(), 1u);
  EXPECT_EQ(*reply->frames[0].as<uint32_t>(), 42u);
  // Nobody listens on this port: the deadline, not a hang.
  const int dead = rpc.Connect("tcp://127.0.0.1:9");
  const auto t0 = std::chrono::steady_clock::now();
  auto lost = rpc.CallSync(dead, Ping(1), 200);
  EXPECT_EQ(lost.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(rpc.stats().timeouts, 1u);
}

// With a source address, connections leave from it: the listener sees the
// request come from 127.0.0.2 although it listens on 127.0.0.1 (every
// 127/8 address is this host's). ipc:// endpoints are left as they are.
TEST(RpcClientTest, ConnectionsLeaveFromTheSourceAddress) {
  RpcClientOptions options;
  options.source_address = "127.0.0.2";
  EXPECT_EQ(ConnectAddress(options, "tcp://10.0.0.1:5555"), "tcp://127.0.0.2:0;10.0.0.1:5555");
  EXPECT_EQ(ConnectAddress(options, "ipc:///tmp/x"), "ipc:///tmp/x");
  EXPECT_EQ(ConnectAddress(RpcClientOptions(), "tcp://10.0.0.1:5555"), "tcp://10.0.0.1:5555");
  RpcClientOptions v6;
  v6.source_address = "::1";
  EXPECT_EQ(ConnectAddress(v6, "tcp://[::1]:7"), "tcp://[::1]:0;[::1]:7");

  zmq::context_t context;
  zmq::socket_t listener(context, zmq::socket_type::router);
  listener.set(zmq::sockopt::linger, 0);
  listener.set(zmq::sockopt::rcvtimeo, 10000);
  listener.bind("tcp://127.0.0.1:*");
  RpcClient rpc(options);
  const int peer = rpc.Connect(listener.get(zmq::sockopt::last_endpoint));
  std::promise<Status> done;
  rpc.Call(peer, Ping(7), 500, [&](const Status& s, Message&&) { done.set_value(s); });
  zmq::message_t routing_id;
  ASSERT_TRUE(listener.recv(routing_id).has_value()) << "no request arrived";
  EXPECT_STREQ(routing_id.gets("Peer-Address"), "127.0.0.2");
  // Unanswered: the deadline ends it.
  EXPECT_EQ(done.get_future().get().code(), StatusCode::kDeadlineExceeded);
}

// An answered request takes its deadline with it. The deadlines of answered
// requests used to stay until they passed (an hour here): 10,000 requests
// held about 640 KB of them, a busy client up to request rate x timeout
// entries, and its I/O thread woke for each once the first timeout had gone
// by. (Heap in use from mallinfo2, which sanitizer builds report as zero.)
TEST(RpcClientTest, AnsweredRequestsKeepNoDeadlineUntilItPasses) {
  EchoServer echo;
  RpcClientOptions options;
  options.default_timeout_ms = 3600 * 1000;
  RpcClient rpc(options);
  const int peer = rpc.Connect(echo.endpoint());
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_TRUE(rpc.CallSync(peer, Ping(i), 0).ok());
  const int64_t before = static_cast<int64_t>(mallinfo2().uordblks);
  for (uint32_t i = 0; i < 10000; ++i) ASSERT_TRUE(rpc.CallSync(peer, Ping(i), 0).ok());
  const int64_t grown = static_cast<int64_t>(mallinfo2().uordblks) - before;
  EXPECT_LT(grown, 256 << 10) << "bytes of heap kept by 10,000 answered requests";
}

// CancelPeer fails every call made to the peer before it, including one the
// I/O thread has not sent yet when the cancellation reaches it (both in one
// batch): such a call used to be sent after the cancellation was applied and
// waited for its whole deadline (a hybrid worker's first push after a
// double failure waited 10 s).
TEST(RpcClientTest, CancelPeerFailsACallQueuedInTheSameBatch) {
  // Declared before the client: its callbacks may run until it is destroyed.
  std::promise<void> release, holding;
  std::shared_future<void> released = release.get_future().share();
  std::promise<Status> cancelled;
  EchoServer echo;
  RpcClient rpc;
  const int live = rpc.Connect(echo.endpoint());
  const int dead = rpc.Connect("tcp://127.0.0.1:9");
  // Hold the I/O thread inside a reply callback while the call and the
  // cancellation are queued, so that it takes both at once.
  rpc.Call(live, Ping(1), 5000, [&](const Status&, Message) {
    holding.set_value();
    released.wait();
  });
  holding.get_future().wait();
  const auto t0 = std::chrono::steady_clock::now();
  rpc.Call(dead, Ping(2), 60000, [&](const Status& s, Message) { cancelled.set_value(s); });
  rpc.CancelPeer(dead, UnavailableError("peer lost"));
  release.set_value();
  std::future<Status> result = cancelled.get_future();
  ASSERT_EQ(result.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "the queued call was not cancelled";
  EXPECT_EQ(result.get().code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

// While the I/O thread sleeps, a caller sends its request on the socket
// itself: no wake-up of the I/O thread, no thread crossing on the way out.
TEST(RpcClientTest, CallerSendsItsRequestItselfWhileTheIoThreadSleeps) {
  EchoServer echo;
  RpcClient rpc;
  const int peer = rpc.Connect(echo.endpoint());
  constexpr uint32_t kCalls = 40;
  for (uint32_t i = 0; i < kCalls; ++i) {
    auto reply = rpc.CallSync(peer, Ping(i), 5000);
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(reply->frames.size(), 1u);
    EXPECT_EQ(*reply->frames[0].as<uint32_t>(), i);
    // Long enough for the I/O thread to be back asleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const TransportStats stats = rpc.stats();
  EXPECT_EQ(stats.requests, kCalls);
  EXPECT_GT(stats.sent_by_caller, 0u);
}

// Callers on several threads, some sending themselves and some through the
// I/O thread, with a cancellation among them: every callback runs exactly
// once, and on the I/O thread.
TEST(RpcClientTest, ConcurrentCallersGetEveryCallbackExactlyOnce) {
  EchoServer echo;
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 300;
  std::vector<std::atomic<int>> runs(kThreads * kCallsPerThread);
  std::atomic<int> completed{0}, on_caller_thread{0};
  {
    RpcClient rpc;
    const int peer = rpc.Connect(echo.endpoint());
    std::vector<std::thread> callers;
    for (int t = 0; t < kThreads; ++t) {
      callers.emplace_back([&, t] {
        const std::thread::id me = std::this_thread::get_id();
        for (int i = 0; i < kCallsPerThread; ++i) {
          const int n = t * kCallsPerThread + i;
          rpc.Call(peer, Ping(static_cast<uint32_t>(n)), 20000, [&, n, me](const Status&, Message) {
            if (std::this_thread::get_id() == me) on_caller_thread.fetch_add(1);
            runs[n].fetch_add(1);
            completed.fetch_add(1);
          });
          if (t == 0 && i == kCallsPerThread / 2) rpc.CancelAll(AbortedError("test"));
        }
      });
    }
    for (auto& c : callers) c.join();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (completed.load() < kThreads * kCallsPerThread &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }  // Destroying the client fails whatever is left, exactly once too.
  for (size_t n = 0; n < runs.size(); ++n) ASSERT_EQ(runs[n].load(), 1) << "call " << n;
  EXPECT_EQ(on_caller_thread.load(), 0);
}

// A thread in Drive() reads its own replies and runs their callbacks: the
// reply does not go through the I/O thread. Many drives in a row keep the
// sockets with the driver (the I/O thread leaves them during the grace);
// a request nobody drives for still completes, on the I/O thread, once it
// has taken them back.
TEST(RpcClientTest, DriverReadsItsRepliesAndTheIoThreadTakesThemBack) {
  EchoServer echo;
  RpcClient rpc;
  const int peer = rpc.Connect(echo.endpoint());
  ASSERT_TRUE(rpc.CallSync(peer, Ping(0), 5000).ok());  // The socket exists.
  const std::thread::id me = std::this_thread::get_id();
  constexpr uint32_t kDrives = 200;
  uint64_t on_me = 0;
  for (uint32_t i = 1; i <= kDrives; ++i) {
    std::atomic<bool> done{false};
    std::atomic<uint32_t> echoed{0};
    std::thread::id ran_on;
    rpc.Call(peer, Ping(i), 5000, [&](const Status& s, Message reply) {
      ASSERT_TRUE(s.ok()) << s;
      echoed = *reply.frames[0].as<uint32_t>();
      ran_on = std::this_thread::get_id();
      done = true;
    });
    ASSERT_TRUE(rpc.Drive([&] { return done.load(); }, 5000)) << "drive " << i;
    ASSERT_EQ(echoed.load(), i);
    on_me += ran_on == me ? 1 : 0;
  }
  // Nearly all on a quiet machine. The I/O thread takes a reply when this
  // thread is off the CPU for longer than the grace between two drives, as
  // on a loaded one; a driver that never reads shows as none.
  EXPECT_GT(on_me, 0u);
  EXPECT_EQ(rpc.stats().replies_read_by_caller, on_me);
  // Right after a drive, and after the grace: nobody drives for these.
  for (int wait_ms : {0, 20}) {
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    const auto t0 = std::chrono::steady_clock::now();
    auto reply = rpc.CallSync(peer, Ping(7), 5000);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  }
  // A callback on the I/O thread that tries to drive is refused at once: the
  // thread would otherwise stop keeping deadlines for as long as it drove.
  std::promise<std::chrono::steady_clock::duration> refused;
  rpc.Call(peer, Ping(8), 5000, [&](const Status&, Message) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(rpc.Drive([] { return false; }, 2000));
    refused.set_value(std::chrono::steady_clock::now() - t0);
  });
  EXPECT_LT(refused.get_future().get(), std::chrono::milliseconds(500));
}

// One thread drives at a time: a second one returns false at once. The I/O
// thread keeps the deadlines meanwhile and wakes the driver when it fails a
// request (without that wake-up the driver would sleep on for a second).
TEST(RpcClientTest, OneDriverAtATimeAndDeadlinesWakeIt) {
  EchoServer echo;
  RpcClient rpc;
  const int live = rpc.Connect(echo.endpoint());
  const int dead = rpc.Connect("tcp://127.0.0.1:9");
  ASSERT_TRUE(rpc.CallSync(live, Ping(0), 5000).ok());
  std::atomic<bool> failed{false};
  rpc.Call(dead, Ping(1), 300, [&](const Status& s, Message) {
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
    failed = true;
  });
  std::promise<void> driving;
  std::atomic<int> asked{0};
  std::thread driver([&] {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(rpc.Drive(
        [&] {
          // The second ask is made with driving set (see Drive()).
          if (asked.fetch_add(1) == 1) driving.set_value();
          return failed.load();
        },
        20000));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(900));
  });
  driving.get_future().wait();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(rpc.Drive([] { return false; }, 10000));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  driver.join();
  EXPECT_TRUE(failed.load());
}

// Callers on several threads drive for their own requests (one at a time;
// the others fall back to waiting on a future) while the others' replies
// are read by whoever drives: every callback runs exactly once.
TEST(RpcClientTest, DrivingCallersGetEveryCallbackExactlyOnce) {
  EchoServer echo;
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 200;
  std::vector<std::atomic<int>> runs(kThreads * kCallsPerThread);
  {
    RpcClient rpc;
    const int peer = rpc.Connect(echo.endpoint());
    ASSERT_TRUE(rpc.CallSync(peer, Ping(0), 5000).ok());
    std::vector<std::thread> callers;
    for (int t = 0; t < kThreads; ++t) {
      callers.emplace_back([&, t] {
        for (int i = 0; i < kCallsPerThread; ++i) {
          const int n = t * kCallsPerThread + i;
          auto done = std::make_shared<std::promise<void>>();
          std::future<void> f = done->get_future();
          rpc.Call(peer, Ping(static_cast<uint32_t>(n)), 20000,
                   [&runs, n, done](const Status& s, Message) {
                     EXPECT_TRUE(s.ok()) << s;
                     runs[n].fetch_add(1);
                     done->set_value();
                   });
          const auto ready = [&f] {
            return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
          };
          if (!rpc.Drive(ready, 20000)) f.wait();
        }
      });
    }
    for (auto& c : callers) c.join();
  }
  for (size_t n = 0; n < runs.size(); ++n) ASSERT_EQ(runs[n].load(), 1) << "call " << n;
}

// A request's deadline is measured on the client's clock: with a FakeClock a
// one-minute deadline expires when the clock passes it, not after a minute.
TEST(RpcClientTest, DeadlinesFollowTheClock) {
  FakeClock clock;
  RpcClientOptions options;
  options.clock = &clock;
  RpcClient rpc(options);
  const int dead = rpc.Connect("tcp://127.0.0.1:9");  // Nobody answers.
  std::promise<Status> result;
  std::future<Status> done = result.get_future();
  rpc.Call(dead, Ping(1), /*timeout_ms=*/60000,
           [&result](const Status& s, Message) { result.set_value(s); });
  clock.AdvanceMs(59999);
  // The I/O loop checks deadlines every few ms under a fake clock.
  EXPECT_EQ(done.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  const auto t0 = std::chrono::steady_clock::now();
  clock.AdvanceMs(1);
  ASSERT_EQ(done.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(done.get().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(rpc.stats().timeouts, 1u);
}

TEST(FaultInjectingTransportTest, DropsFailAtTheDeadlineAndAreReproducible) {
  EchoServer echo;
  auto pattern = [&](uint64_t seed) {
    FaultOptions f;
    f.drop_prob = 0.5;
    f.seed = seed;
    auto t = FaultInjectingTransport::Wrap(std::make_unique<RpcClient>(), f);
    const int peer = t->Connect(echo.endpoint());
    std::string outcome;
    for (int i = 0; i < 16; ++i) outcome += t->CallSync(peer, Ping(i), 100).ok() ? '1' : '0';
    EXPECT_EQ(t->stats().dropped_by_faults,
              static_cast<uint64_t>(std::count(outcome.begin(), outcome.end(), '0')));
    return outcome;
  };
  const std::string a = pattern(7), b = pattern(7), c = pattern(8);
  EXPECT_EQ(a, b) << "same seed, same faults";
  EXPECT_NE(a, c) << "another seed, other faults";
  EXPECT_NE(a.find('0'), std::string::npos);
  EXPECT_NE(a.find('1'), std::string::npos);
}

TEST(FaultInjectingTransportTest, DuplicatesReachThePeerTwiceButReplyOnce) {
  EchoServer echo;
  FaultOptions f;
  f.duplicate_prob = 1.0;
  auto t = FaultInjectingTransport::Wrap(std::make_unique<RpcClient>(), f);
  const int peer = t->Connect(echo.endpoint());
  std::atomic<int> callbacks{0};
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(t->CallSync(peer, Ping(i), 2000).ok());
  }
  t->Call(peer, Ping(9), 2000, [&](const Status&, Message) { callbacks.fetch_add(1); });
  for (int i = 0; i < 100 && echo.received() < 12; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(echo.received(), 12);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(callbacks.load(), 1);
}

TEST(FaultInjectingTransportTest, DelayAndPartition) {
  EchoServer echo;
  FaultOptions f;
  f.delay_ms = 150;
  auto t = FaultInjectingTransport::Wrap(std::make_unique<RpcClient>(), f);
  const int peer = t->Connect(echo.endpoint());
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(t->CallSync(peer, Ping(1), 2000).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(150));

  t->SetPartitioned(true);
  EXPECT_EQ(t->CallSync(peer, Ping(2), 300).status().code(), StatusCode::kDeadlineExceeded);
  t->SetPartitioned(false);
  EXPECT_TRUE(t->CallSync(peer, Ping(3), 2000).ok());
}

}  // namespace
}  // namespace relaxps
