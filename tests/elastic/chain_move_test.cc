// Range moves under chain replication (docs/elastic.md "Chains") on real
// processes, under --recovery=chain and --recovery=hybrid (whose workers
// also keep local copies that follow each range's head): a coordinator and
// two servers with --replicas=2, two workers pushing as fast as they can
// (async, SGD lr 1, integer gradients), and a third server that joins (--join): the replica
// of the first range on server 0 (its head) moves to it. Then, with the
// destination or the source SIGKILLed as soon as the move started, the map
// ends consistent (every chain's replicas hold the same, nothing of a dead
// server), the move ends with a clear event, the workers go on, and by the
// independent counter check nothing acknowledged is lost or applied twice:
// per worker, a counter key at the start of every range counts the pushes
// applied there (lost = acknowledged - applied), and every pushed key is
// compared bit for bit with the workers' own sums. Under hybrid, losing
// every replica that holds the state mid-move fails the move and the workers
// go local. Under BSP, a job with a join and a drain ends bit for bit with
// the model of one process (ChainMoveBspTest).
#include <signal.h>

#include <atomic>
#include <cctype>
#include <functional>
#include <future>
#include <chrono>
#include <memory>
#include <numeric>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/consistency/dense_bsp_driver.h"
#include "tests/recovery/chain_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

// Two ranges of 4 Mi keys (16 MiB each): the state transfer to the joined
// server takes many pieces, so a kill right after range_move_started lands
// in the middle of the move.
constexpr uint64_t kSize = uint64_t{8} << 20;
constexpr uint64_t kPushed = 64;  // Keys pushed at the start of each range.
constexpr float kInit = 4096.0f;
constexpr int kWorkers = 2;
constexpr int kJoined = 2;  // The joined server's id (the next after 0 and 1).

// A server started with --join (it takes the next id after the job's).
struct JoinedServer {
  std::unique_ptr<Subprocess> process;
  std::string log, endpoint_file;
  std::string endpoint;  // Once AwaitJoinedServer read it.
};

// Starts relaxps-server --join against `cluster`'s coordinator, its files
// under `dir`. Call from the test's thread: the server dies with the thread
// that started it (PR_SET_PDEATHSIG).
StatusOr<JoinedServer> StartJoinedServer(RecoveryCluster* cluster, const std::string& dir) {
  JoinedServer j;
  j.endpoint_file = dir + "/server-joined.endpoint";
  j.log = dir + "/server-joined.log";
  ASSIGN_OR_RETURN(j.process,
                   Subprocess::Start({BinPath("relaxps-server"),
                                      "--coordinator=" + cluster->coordinator_endpoint(), "--join",
                                      "--data_dir=" + dir + "/data/server-joined",
                                      "--endpoint_file=" + j.endpoint_file, "--store=memory",
                                      "--heartbeat_ms=100", "--state_transfer_chunk_kb=256"},
                                     j.log));
  return j;
}

// Waits until `j` listens and reads its endpoint.
Status AwaitJoinedServer(JoinedServer* j) {
  RETURN_IF_ERROR(WaitForLine(j->log, "listening on", Millis(30000), j->process.get()).status());
  ASSIGN_OR_RETURN(j->endpoint, ReadFile(j->endpoint_file));
  while (!j->endpoint.empty() && std::isspace(static_cast<unsigned char>(j->endpoint.back()))) {
    j->endpoint.pop_back();
  }
  return Status::OK();
}

// The parameter: the recovery policy (chain or hybrid).
class ChainMoveTest : public ::testing::TestWithParam<const char*> {
 protected:
  struct Worker {
    std::unique_ptr<Client> client;
    // Per range (by index of range_begins_), the sum of what it pushed.
    std::vector<std::vector<double>> sum;
    int64_t acked = 0;  // Pushes acknowledged (each touches every range).
    Status error;
  };

  void SetUp() override {
    dir_ = MakeTempDir();
    events_ = dir_ + "/events.jsonl";
    ASSERT_OK_AND_ASSIGN(cluster_, RecoveryCluster::Start(dir_, 2,
                                                          {std::string("--recovery=") + GetParam(),
                                                           "--replicas=2",
                                                           "--consistency=async",
                                                           "--heartbeat_timeout_ms=1000",
                                                           "--events_file=" + events_}));
    for (int id = 0; id < 2; ++id) ASSERT_OK(cluster_->StartServer(id, ServerFlags()));
    TableOptions t;
    t.name = "w";
    t.type = TableType::kDense;
    t.size = kSize;
    t.optimizer.name = "sgd";
    t.optimizer.lr = 1.0f;
    t.init.segments.push_back(InitSegment{0, kSize, InitKind::kConstant, kInit, 0.0f});
    for (int w = 0; w < kWorkers; ++w) {
      workers_.push_back(std::make_unique<Worker>());
      ASSERT_OK_AND_ASSIGN(workers_[w]->client, cluster_->Connect("worker"));
      ASSERT_OK(workers_[w]->client->CreateTable(t));
    }
    for (const ChainRange& r : Chains(cluster_.get(), "w")) range_begins_.push_back(r.begin);
    ASSERT_EQ(range_begins_.size(), 2u);
    for (auto& w : workers_) {
      w->sum.assign(range_begins_.size(), std::vector<double>(kPushed, 0.0));
    }
  }

  void TearDown() override {
    pushers_.Join();
    if (joined_ != nullptr) joined_->Kill(SIGKILL);
  }

  static std::vector<std::string> ServerFlags() {
    return {"--store=memory", "--heartbeat_ms=100", "--state_transfer_chunk_kb=256"};
  }

  // Starts the third server with --join (it takes id 2).
  void Join() {
    ASSERT_OK_AND_ASSIGN(JoinedServer j, StartJoinedServer(cluster_.get(), dir_));
    ASSERT_OK(AwaitJoinedServer(&j));
    joined_ = std::move(j.process);
    joined_endpoint_ = j.endpoint;
  }

  std::string Endpoint(int server) {
    return server == kJoined ? joined_endpoint_ : cluster_->server_endpoint(server);
  }

  // Push k of worker w, at the start of range r: -1 on its counter key
  // (the value counts the pushes applied), small integers elsewhere.
  static FloatBuffer Gradient(int w, int64_t k, size_t r) {
    FloatBuffer g(kPushed);
    for (uint64_t i = 0; i < kPushed; ++i) {
      g[i] = static_cast<float>((i * 5 + k + 3 * w + r) % 3) - 1.0f;
    }
    for (int v = 0; v < kWorkers; ++v) g[v] = v == w ? -1.0f : 0.0f;
    return g;
  }

  // Each worker pushes to every range in turn; a push counts once all its
  // parts were acknowledged.
  void StartPushing() {
    for (int w = 0; w < kWorkers; ++w) {
      pushers_.threads.emplace_back([this, w] {
        Worker& me = *workers_[w];
        while (!pushers_.stop.load()) {
          std::vector<FloatBuffer> grads;
          std::vector<std::future<Status>> acks;
          for (size_t r = 0; r < range_begins_.size(); ++r) {
            grads.push_back(Gradient(w, me.acked, r));
            acks.push_back(me.client->Push("w", range_begins_[r], grads.back()));
          }
          for (size_t r = 0; r < acks.size(); ++r) {
            Status s = acks[r].get();
            if (!s.ok()) {
              me.error = s.WithPrefix("range " + std::to_string(r));
              return;
            }
            for (uint64_t i = 0; i < kPushed; ++i) me.sum[r][i] += grads[r][i];
          }
          ++me.acked;
        }
      });
    }
  }

  // The first event of `kind` (its JSON line).
  StatusOr<std::string> WaitForEvent(const std::string& kind, int timeout_ms) {
    return WaitForLine(events_, "\"kind\":\"" + kind + "\"", Millis(timeout_ms));
  }

  // Stops pushing; every replica of every chain must hold exactly the
  // initial value minus the acknowledged pushes, once.
  void Verify(const std::vector<int>& dead) {
    pushers_.Join();
    for (int w = 0; w < kWorkers; ++w) {
      ASSERT_OK(workers_[w]->error) << "worker " << w;
      EXPECT_GT(workers_[w]->acked, 0) << "worker " << w;
    }
    std::vector<ChainRange> ranges = Chains(cluster_.get(), "w");
    ASSERT_EQ(ranges.size(), range_begins_.size());
    int64_t lost = 0, doubled = 0;
    for (size_t ri = 0; ri < ranges.size(); ++ri) {
      const ChainRange& r = ranges[ri];
      ASSERT_EQ(r.begin, range_begins_[ri]);
      ASSERT_FALSE(r.chain.empty());
      for (int server : r.chain) {
        for (int d : dead) ASSERT_NE(server, d) << "a dead server is in the chain of " << r.begin;
        ASSERT_OK_AND_ASSIGN(std::vector<float> got, WhenInSync([&] {
                               return ReadDenseSlot(Endpoint(server), "w", r.begin, kPushed, 0);
                             }));
        for (int w = 0; w < kWorkers; ++w) {
          const int64_t applied = static_cast<int64_t>(got[w]) - static_cast<int64_t>(kInit);
          lost += std::max<int64_t>(0, workers_[w]->acked - applied);
          doubled += std::max<int64_t>(0, applied - workers_[w]->acked);
        }
        for (uint64_t i = kWorkers; i < kPushed; ++i) {
          double v = kInit;
          for (int w = 0; w < kWorkers; ++w) v -= workers_[w]->sum[ri][i];
          ASSERT_EQ(got[i], static_cast<float>(v)) << "server " << server << " key " << r.begin + i;
        }
      }
    }
    int64_t acked = 0;
    for (auto& w : workers_) acked += w->acked;
    std::printf("chain move check: acked=%lld lost=%lld doubled=%lld\n",
                static_cast<long long>(acked), static_cast<long long>(lost),
                static_cast<long long>(doubled));
    EXPECT_EQ(lost, 0);
    EXPECT_EQ(doubled, 0);
  }

  // Waits until chains hold no server of `dead` and the move is over.
  void WaitForChainsWithout(const std::vector<int>& dead) {
    const int64_t until = RealClock()->NowMs() + 15000 * TimeScale();
    while (RealClock()->NowMs() < until) {
      bool clean = true;
      for (const ChainRange& r : Chains(cluster_.get(), "w")) {
        for (int c : r.chain) {
          for (int d : dead) clean &= c != d;
        }
      }
      if (clean) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "chains still hold a dead server";
  }

  // Pushes go on for a while after the move.
  void TrainOn() {
    const int64_t before = workers_[0]->acked;
    const int64_t until = RealClock()->NowMs() + 10000 * TimeScale();
    while (workers_[0]->acked < before + 20 && RealClock()->NowMs() < until &&
           workers_[0]->error.ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  std::string dir_, events_, joined_endpoint_;
  std::unique_ptr<RecoveryCluster> cluster_;
  std::unique_ptr<Subprocess> joined_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<uint64_t> range_begins_;
  Pushers pushers_;  // Joined before the workers go (TearDown).
};

TEST_P(ChainMoveTest, AJoinedServerTakesTheHeadsReplicaWhileWorkersPushLosingNothing) {
  StartPushing();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Join();
  ASSERT_OK_AND_ASSIGN(std::string done, WaitForEvent("range_move_done", 30000));
  EXPECT_NE(done.find("\"source\":0"), std::string::npos) << done;
  EXPECT_NE(done.find("\"destination\":2"), std::string::npos) << done;
  TrainOn();
  // The first range moved from [0, 1] to [1, 2] (its survivor ahead, the
  // joined server at the tail); the second kept [1, 0].
  const std::vector<ChainRange> ranges = Chains(cluster_.get(), "w");
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].chain, (std::vector<int>{1, 2}));
  EXPECT_EQ(ranges[1].chain, (std::vector<int>{1, 0}));
  Verify({});
}

TEST_P(ChainMoveTest, KillingTheDestinationMidMoveFailsItAndLosesNothing) {
  StartPushing();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Join();
  ASSERT_OK(WaitForEvent("range_move_started", 30000).status());
  joined_->Kill(SIGKILL);
  ASSERT_OK_AND_ASSIGN(std::string failed, WaitForEvent("range_move_failed", 30000));
  EXPECT_NE(failed.find("destination server 2 was lost"), std::string::npos) << failed;
  ASSERT_OK_AND_ASSIGN(std::string events, ReadFile(events_));
  EXPECT_EQ(events.find("\"kind\":\"range_move_done\""), std::string::npos);
  WaitForChainsWithout({kJoined});
  TrainOn();
  // The chains are as before the move.
  const std::vector<ChainRange> ranges = Chains(cluster_.get(), "w");
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].chain, (std::vector<int>{0, 1}));
  EXPECT_EQ(ranges[1].chain, (std::vector<int>{1, 0}));
  Verify({kJoined});
}

TEST_P(ChainMoveTest, KillingTheSourceMidMoveEndsItOnTheSurvivorsAndLosesNothing) {
  StartPushing();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Join();
  ASSERT_OK_AND_ASSIGN(std::string started, WaitForEvent("range_move_started", 30000));
  ASSERT_NE(started.find("\"source\":0"), std::string::npos) << started;
  cluster_->server(0)->Kill(SIGKILL);
  // The policy splices the source out; the move is done once the joined
  // server holds the state.
  ASSERT_OK_AND_ASSIGN(std::string done, WaitForEvent("range_move_done", 30000));
  // Mid-move: the source's failover came before the move was done.
  ASSERT_OK_AND_ASSIGN(std::string events, ReadFile(events_));
  const size_t failover = events.find("\"kind\":\"chain_failover\"");
  ASSERT_NE(failover, std::string::npos) << events;
  EXPECT_LT(failover, events.find("\"kind\":\"range_move_done\"")) << events;
  WaitForChainsWithout({0});
  TrainOn();
  const std::vector<ChainRange> ranges = Chains(cluster_.get(), "w");
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].chain, (std::vector<int>{1, 2}));
  EXPECT_EQ(ranges[1].chain, (std::vector<int>{1}));
  Verify({0});
}

// Under BSP (chain and hybrid): a job of 2 servers with --replicas=2, three
// workers training an Adam table layer by layer (one worker skips a layer
// each clock; a different order each clock), gets a third server (--join),
// which takes server 0's replica of the first range; then server 0 is
// drained (its replica of the second range goes to the joined server too)
// and exits. The workers train throughout. At every clock each worker's pull
// of the whole table, and at the end every slot (parameters, Adam's m and v)
// of every replica, is bit for bit the model of one process with the
// combined batch: the model the same job without the moves ends with
// (tests/recovery/chain_bsp_test).
class ChainMoveBspTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ChainMoveBspTest, AJobWithAnAddAndADrainEndsWithTheModelOfTheJobWithout) {
  constexpr uint64_t kBspSize = 6000;  // Two ranges: [0, 4096) and [4096, 6000).
  constexpr int kBspWorkers = 3;
  constexpr int kBspClocksBefore = 2;  // Clocks before the join, and after the drain.
  const std::string dir = MakeTempDir();
  const std::string events = dir + "/events.jsonl";
  ASSERT_OK_AND_ASSIGN(auto cluster,
                       RecoveryCluster::Start(dir, 2,
                                              {std::string("--recovery=") + GetParam(),
                                               "--replicas=2", "--consistency=bsp",
                                               "--heartbeat_timeout_ms=3000",
                                               "--events_file=" + events}));
  for (int id = 0; id < 2; ++id) {
    ASSERT_OK(cluster->StartServer(id, {"--store=memory", "--heartbeat_ms=100"}));
  }
  ASSERT_OK_AND_ASSIGN(std::vector<std::unique_ptr<Client>> owned,
                       ConnectWorkers(cluster.get(), kBspWorkers, DenseAdamTable("w", kBspSize)));
  std::vector<Client*> workers;
  for (auto& c : owned) workers.push_back(c.get());
  DenseBspDriver driver(workers, DenseAdamTable("w", kBspSize), {0, 2500, 4096, kBspSize});
  ASSERT_OK(driver.Start());
  JoinedServer joined;
  std::vector<size_t> order(kBspWorkers);
  std::iota(order.begin(), order.end(), 0);
  int t = 0;
  // One clock: every worker pushes every layer it does not skip, clocks and
  // pulls the whole table, which must be the one-process model.
  auto train_one_clock = [&]() {
    std::next_permutation(order.begin(), order.end());
    ASSERT_OK(driver.Push(t, order));
    for (Client* w : workers) ASSERT_OK(w->Clock());
    ASSERT_OK_AND_ASSIGN(const size_t differing, driver.PullAndCompare());
    ASSERT_EQ(differing, 0u) << "clock " << t;
    ++t;
  };
  // Trains until `over` holds (checked between clocks), for at most
  // kMaxClocksPerMove clocks; returns how many ran.
  constexpr int kMaxClocksPerMove = 2000;
  auto train_until = [&](const std::function<bool()>& over) {
    int clocks = 0;
    while (!over() && clocks < kMaxClocksPerMove && !HasFatalFailure()) {
      train_one_clock();
      ++clocks;
    }
    return clocks;
  };
  auto moves_done = [&] {
    const StatusOr<std::string> log = ReadFile(events);
    size_t n = 0;
    if (!log.ok()) return n;
    for (size_t at = log->find("\"kind\":\"range_move_done\""); at != std::string::npos;
         at = log->find("\"kind\":\"range_move_done\"", at + 1)) {
      ++n;
    }
    return n;
  };
  for (int i = 0; i < kBspClocksBefore; ++i) train_one_clock();
  ASSERT_FALSE(HasFatalFailure());
  // The workers train on from the join's start until its move is done, and
  // from the drain's until server 0 exits.
  ASSERT_OK_AND_ASSIGN(joined, StartJoinedServer(cluster.get(), dir));
  const int join_clocks = train_until([&] { return moves_done() >= 1; });
  ASSERT_OK(AwaitJoinedServer(&joined));
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(moves_done(), 1u) << "the join's move did not end in " << join_clocks << " clocks";
  // (relaxps-ctl runs on a thread of its own: the workers train meanwhile.)
  auto draining = std::async(std::launch::async, [&] { return cluster->Ctl({"drain-server", "0"}); });
  const int drain_clocks = train_until([&] {
    return !cluster->server(0)->IsRunning() &&
           draining.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  ASSERT_OK_AND_ASSIGN(CommandResult drain, draining.get());
  ASSERT_EQ(drain.exit_status, 0) << drain.output;
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_GT(join_clocks, 0);
  EXPECT_GT(drain_clocks, 0);
  ASSERT_OK_AND_ASSIGN(const int exit_status, cluster->server(0)->Wait(Millis(1000)));
  EXPECT_EQ(exit_status, 0) << "the drained server exits 0";
  for (int i = 0; i < kBspClocksBefore; ++i) train_one_clock();
  ASSERT_FALSE(HasFatalFailure());
  std::printf("chain bsp move: %d clocks, %d of them from the join's start to its move's "
              "end, %d from the drain's start to server 0's exit\n", t, join_clocks, drain_clocks);

  ASSERT_OK_AND_ASSIGN(std::string log, ReadFile(events));
  EXPECT_EQ(moves_done(), 2u) << log;
  EXPECT_EQ(log.find("\"kind\":\"range_move_failed\""), std::string::npos) << log;
  const std::vector<ChainRange> ranges = Chains(cluster.get(), "w");
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].chain, (std::vector<int>{1, kJoined}));
  EXPECT_EQ(ranges[1].chain, (std::vector<int>{1, kJoined}));
  for (const ChainRange& r : ranges) {
    for (int slot = 0; slot < 3; ++slot) {
      const float* expected = driver.reference().slot(slot).data() + r.begin;
      for (int server : r.chain) {
        const std::string ep = server == kJoined ? joined.endpoint : cluster->server_endpoint(server);
        ASSERT_OK_AND_ASSIGN(std::vector<float> got, WhenInSync([&] {
                               return ReadDenseSlot(ep, "w", r.begin, r.end - r.begin, slot);
                             }));
        ASSERT_EQ(got.size(), r.end - r.begin);
        const size_t differing = DifferingFloats(got.data(), expected, got.size());
        EXPECT_EQ(differing, 0u) << "range " << r.begin << " slot " << slot << " server " << server;
        std::printf("chain bsp move: range [%llu, %llu) slot %d on server %d: %zu of %zu floats "
                    "differ from one process with the combined batch\n",
                    static_cast<unsigned long long>(r.begin),
                    static_cast<unsigned long long>(r.end), slot, server, differing, got.size());
      }
    }
  }
  RemoveTree(dir);
}

// The name of a test's instance: its policy.
std::string PolicyName(const ::testing::TestParamInfo<const char*>& info) { return info.param; }

// Hybrid only: both servers holding the moved range's state are SIGKILLed
// while the joined destination still waits for it. The policy strands the
// range with its last holder and takes the destination out of the chain; the
// move fails with that reason (never range_move_done), and the workers go on
// pushing to their local copies of the stranded ranges.
using HybridMoveTest = ChainMoveTest;

TEST_P(HybridMoveTest, LosingEveryReplicaWithStateMidMoveFailsItAndTheWorkersGoLocal) {
  StartPushing();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Join();
  ASSERT_OK(WaitForEvent("range_move_started", 30000).status());
  cluster_->server(0)->Kill(SIGKILL);
  cluster_->server(1)->Kill(SIGKILL);
  ASSERT_OK_AND_ASSIGN(std::string failed, WaitForEvent("range_move_failed", 30000));
  EXPECT_NE(failed.find("no replica that holds the range's state is left"), std::string::npos)
      << failed;
  // Both ranges are stranded on their last holders; the destination is in
  // no chain.
  const int64_t until = RealClock()->NowMs() + 15000 * TimeScale();
  std::vector<ChainRange> ranges;
  while (RealClock()->NowMs() < until) {
    ranges = Chains(cluster_.get(), "w");
    if (ranges.size() == 2 && ranges[0].chain.size() == 1 && ranges[1].chain.size() == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(ranges.size(), 2u);
  for (const ChainRange& r : ranges) {
    ASSERT_EQ(r.chain.size(), 1u) << r.begin;
    EXPECT_NE(r.chain[0], kJoined) << r.begin;
  }
  TrainOn();
  pushers_.Join();
  ASSERT_OK_AND_ASSIGN(std::string events, ReadFile(events_));
  EXPECT_EQ(events.find("\"kind\":\"range_move_done\""), std::string::npos) << events;
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_OK(workers_[w]->error) << "worker " << w;
    EXPECT_GT(workers_[w]->client->stats().local_steps, 0u) << "worker " << w;
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, HybridMoveTest, ::testing::Values("hybrid"),
                         PolicyName);

INSTANTIATE_TEST_SUITE_P(Policies, ChainMoveBspTest, ::testing::Values("chain", "hybrid"),
                         PolicyName);

INSTANTIATE_TEST_SUITE_P(Policies, ChainMoveTest, ::testing::Values("chain", "hybrid"),
                         PolicyName);

}  // namespace
}  // namespace test
}  // namespace relaxps
