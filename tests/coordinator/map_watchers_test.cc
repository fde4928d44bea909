// MapWatchers on its own, on a real RpcServer loop (tcp://127.0.0.1:*)
// standing in for the coordinator's: a map watch is answered at once when
// the worker's map is older, held until Notify sees a newer one, or answered
// unchanged once FakeClock time passes its deadline (watch_ms, clamped).
//
// Deterministic without sleeps: the test drives the loop with control
// requests sent on the same connection as the watches, so the loop handles
// them in order, and every control reply arrives after any watch reply the
// loop sent before it. Each check waits only on a CallSync (bounded by its
// deadline), never on time passing.
#include "coordinator/map_watchers.h"

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

// Control requests (PING, their table names what to do); each reply
// carries MapWatchers::size() in key_count.
const std::string kProbe = "probe";    // Nothing.
const std::string kNotify = "notify";  // The map becomes version shard_map_version; Notify.
const std::string kExpire = "expire";  // Expire at the FakeClock's now.

// An RpcServer on a thread whose handler holds GET_SHARD_MAP watches in a
// MapWatchers, as the coordinator's loop does, with the current map.
class WatchLoop {
 public:
  WatchLoop(const FakeClock* clock, uint64_t map_version) : clock_(clock) {
    map_.set_version(map_version);
    wire::ServerInfo* s = map_.add_servers();
    s->set_id(0);
    s->set_endpoint("tcp://127.0.0.1:1");
    s->set_alive(true);
    auto rpc = RpcServer::Bind(RpcServerOptions());
    CHECK(rpc.ok()) << rpc.status();
    rpc_ = std::move(rpc).value();
    watchers_ = std::make_unique<MapWatchers>(rpc_.get());
    thread_ = std::thread([this] { rpc_->Run([this](Request&& req) { Handle(std::move(req)); }); });
  }
  ~WatchLoop() {
    rpc_->Stop();
    thread_.join();
  }
  WatchLoop(const WatchLoop&) = delete;
  WatchLoop& operator=(const WatchLoop&) = delete;

  const std::string& endpoint() const { return rpc_->endpoint(); }

 private:
  // Loop thread.
  void Handle(Request&& req) {
    if (req.msg.header.type() == wire::GET_SHARD_MAP) {
      watchers_->Add(std::move(req), map_, clock_->NowMs());
      return;
    }
    const std::string what = req.msg.header.table();
    if (what == kNotify) {
      map_.set_version(req.msg.header.shard_map_version());
      watchers_->Notify(map_);
    } else if (what == kExpire) {
      watchers_->Expire(map_, clock_->NowMs());
    }
    Message reply = MakeReply(req.msg.header, Status::OK());
    reply.header.set_key_count(watchers_->size());
    rpc_->Reply(req, std::move(reply)).IgnoreError();
  }

  // Constant after construction.
  const FakeClock* const clock_;
  std::unique_ptr<RpcServer> rpc_;
  std::thread thread_;
  // Loop thread only.
  wire::ShardMap map_;
  std::unique_ptr<MapWatchers> watchers_;
};

// How a watch was answered (written on the client's I/O thread; read by the
// test after a later control reply on the same connection).
struct Answer {
  bool answered = false;
  Status status;
  uint64_t version = 0;
  int servers = 0;
};

// A worker's side: one connection carrying its watches and the control
// requests. Declare it after the WatchLoop (destroyed first: held watches
// complete with Aborted into its own answers).
class Worker {
 public:
  explicit Worker(const std::string& endpoint) : peer_(rpc_.Connect(endpoint)) {}

  // Sends a watch from a worker holding map `version`; returns its index.
  size_t Watch(uint64_t version, int watch_ms) {
    answers_.push_back(std::make_unique<Answer>());
    Answer* a = answers_.back().get();
    Message m;
    m.header.set_type(wire::GET_SHARD_MAP);
    m.header.set_shard_map_version(version);
    m.header.set_watch_ms(watch_ms);
    rpc_.Call(peer_, std::move(m), kWatchDeadlineMs, [a](const Status& s, Message&& reply) {
      a->answered = true;
      a->status = s;
      a->version = reply.header.shard_map().version();
      a->servers = reply.header.shard_map().servers_size();
    });
    return answers_.size() - 1;
  }

  // Sends a control request and returns the number of watches still held
  // after it, or -1 if it failed. Every watch answer sent before its reply
  // has been recorded when it returns.
  int64_t Control(const std::string& what, uint64_t version = 0) {
    Message m;
    m.header.set_type(wire::PING);
    m.header.set_table(what);
    m.header.set_shard_map_version(version);
    StatusOr<Message> reply = rpc_.CallSync(peer_, std::move(m), kControlDeadlineMs);
    if (!reply.ok()) {
      ADD_FAILURE() << "control request '" << what << "': " << reply.status();
      return -1;
    }
    return static_cast<int64_t>(reply->header.key_count());
  }

  const Answer& answer(size_t i) const { return *answers_.at(i); }

 private:
  // Deadlines (real time) far beyond what a passing test takes; they bound
  // a broken one.
  static constexpr int kWatchDeadlineMs = 60000;
  static constexpr int kControlDeadlineMs = 30000;

  std::vector<std::unique_ptr<Answer>> answers_;  // Before rpc_: outlives its callbacks.
  RpcClient rpc_;
  const int peer_;
};

TEST(MapWatchersTest, AnswersAtOnceAWorkerHoldingAnOlderMap) {
  FakeClock clock;
  WatchLoop loop(&clock, /*map_version=*/5);
  Worker worker(loop.endpoint());
  const size_t w = worker.Watch(/*version=*/4, /*watch_ms=*/10000);
  EXPECT_EQ(worker.Control(kProbe), 0);
  const Answer& a = worker.answer(w);
  ASSERT_TRUE(a.answered);
  EXPECT_OK(a.status);
  EXPECT_EQ(a.version, 5u);
  EXPECT_EQ(a.servers, 1);
}

TEST(MapWatchersTest, HoldsUntilNotifySeesANewerMap) {
  FakeClock clock;
  WatchLoop loop(&clock, /*map_version=*/5);
  Worker worker(loop.endpoint());
  const size_t current1 = worker.Watch(5, 10000);
  const size_t current2 = worker.Watch(5, 10000);
  // A worker ahead of this map (it heard from a newer coordinator).
  const size_t ahead = worker.Watch(6, 10000);
  EXPECT_EQ(worker.Control(kProbe), 3);
  EXPECT_FALSE(worker.answer(current1).answered);

  // The same version again is no news.
  EXPECT_EQ(worker.Control(kNotify, 5), 3);
  EXPECT_FALSE(worker.answer(current1).answered);
  EXPECT_FALSE(worker.answer(current2).answered);

  EXPECT_EQ(worker.Control(kNotify, 6), 1);
  for (size_t w : {current1, current2}) {
    ASSERT_TRUE(worker.answer(w).answered) << w;
    EXPECT_OK(worker.answer(w).status);
    EXPECT_EQ(worker.answer(w).version, 6u);
  }
  EXPECT_FALSE(worker.answer(ahead).answered);

  EXPECT_EQ(worker.Control(kNotify, 7), 0);
  ASSERT_TRUE(worker.answer(ahead).answered);
  EXPECT_OK(worker.answer(ahead).status);
  EXPECT_EQ(worker.answer(ahead).version, 7u);
}

// Each watch is answered on the connection it came from.
TEST(MapWatchersTest, AnswersEachWorkerOnItsOwnConnection) {
  FakeClock clock;
  WatchLoop loop(&clock, /*map_version=*/5);
  Worker first(loop.endpoint());
  Worker second(loop.endpoint());
  const size_t a = first.Watch(5, 10000);
  const size_t b = second.Watch(5, 10000);
  // Each probe follows its own worker's watch.
  EXPECT_GE(first.Control(kProbe), 1);
  EXPECT_EQ(second.Control(kProbe), 2);
  EXPECT_EQ(first.Control(kNotify, 6), 0);
  ASSERT_TRUE(first.answer(a).answered);
  EXPECT_EQ(first.answer(a).version, 6u);
  // The second worker's answer was sent before the notify's reply, so it
  // precedes the reply to this later probe on the second connection.
  EXPECT_EQ(second.Control(kProbe), 0);
  ASSERT_TRUE(second.answer(b).answered);
  EXPECT_OK(second.answer(b).status);
  EXPECT_EQ(second.answer(b).version, 6u);
}

TEST(MapWatchersTest, ExpiresAtItsDeadlineByFakeClockTimeWithTheUnchangedMap) {
  FakeClock clock;
  WatchLoop loop(&clock, /*map_version=*/5);
  Worker worker(loop.endpoint());
  const size_t short_watch = worker.Watch(5, 1000);
  const size_t long_watch = worker.Watch(5, 3000);
  EXPECT_EQ(worker.Control(kProbe), 2);  // Both added at the same FakeClock time.

  EXPECT_EQ(worker.Control(kExpire), 2);
  clock.AdvanceMs(999);
  EXPECT_EQ(worker.Control(kExpire), 2);
  EXPECT_FALSE(worker.answer(short_watch).answered);

  clock.AdvanceMs(1);
  EXPECT_EQ(worker.Control(kExpire), 1);
  const Answer& s = worker.answer(short_watch);
  ASSERT_TRUE(s.answered);
  EXPECT_OK(s.status);
  EXPECT_EQ(s.version, 5u);  // No newer map: the same one.
  EXPECT_FALSE(worker.answer(long_watch).answered);

  // A watch added later gets its own deadline from the time it arrived.
  const size_t late_watch = worker.Watch(5, 1000);
  EXPECT_EQ(worker.Control(kProbe), 2);
  clock.AdvanceMs(999);  // 1999 ms after the first two.
  EXPECT_EQ(worker.Control(kExpire), 2);
  clock.AdvanceMs(1);  // The late watch's deadline.
  EXPECT_EQ(worker.Control(kExpire), 1);
  EXPECT_TRUE(worker.answer(late_watch).answered);
  EXPECT_FALSE(worker.answer(long_watch).answered);
  clock.AdvanceMs(1000);  // 3000 ms after the first two.
  EXPECT_EQ(worker.Control(kExpire), 0);
  ASSERT_TRUE(worker.answer(long_watch).answered);
  EXPECT_EQ(worker.answer(long_watch).version, 5u);
}

TEST(MapWatchersTest, ClampsTheHoldToTheMaximum) {
  FakeClock clock;
  WatchLoop loop(&clock, /*map_version=*/5);
  Worker worker(loop.endpoint());
  const size_t w = worker.Watch(5, 10 * MapWatchers::kMaxWatchMs);
  EXPECT_EQ(worker.Control(kProbe), 1);
  clock.AdvanceMs(MapWatchers::kMaxWatchMs - 1);
  EXPECT_EQ(worker.Control(kExpire), 1);
  EXPECT_FALSE(worker.answer(w).answered);
  clock.AdvanceMs(1);
  EXPECT_EQ(worker.Control(kExpire), 0);
  ASSERT_TRUE(worker.answer(w).answered);
  EXPECT_OK(worker.answer(w).status);
  EXPECT_EQ(worker.answer(w).version, 5u);
}

}  // namespace
}  // namespace relaxps
