// Chain replication through real processes (--recovery=chain --replicas=2 on
// 3 servers): workers push as fast as they can, to a dense table and to a
// sparse one (8 hash buckets, each its own chain), while servers are
// SIGKILLed and restarted; afterwards every replica of every range and
// bucket holds exactly the initial value minus every acknowledged push, once
// (SGD, lr 1, integer gradients: float sums are exact), and, under Adam,
// exactly what one process applying the same pushes in order computes, slots
// included.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/testing.h"
#include "common/member_token.h"
#include "common/rpc_client.h"
#include "common/shard_map.h"
#include "common/wire.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "tests/recovery/chain_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kSize = 3 * 4096 + 1000;  // Three ranges, one per server.
// The sparse table: rows [0, kRows) of kWidth floats, kRowsPerPush per push.
constexpr uint64_t kRows = 500;
constexpr uint32_t kWidth = 4;
constexpr int kRowsPerPush = 32;
constexpr int kBuckets = 8;

std::vector<std::string> CoordinatorFlags() {
  return {"--recovery=chain", "--replicas=2", "--consistency=async",
          "--heartbeat_timeout_ms=1000", "--sparse_buckets=" + std::to_string(kBuckets)};
}

TableOptions SparseTable(float init) {
  TableOptions t;
  t.name = "e";
  t.type = TableType::kSparse;
  t.row_width = kWidth;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;
  t.init.seed = 6;
  t.init.segments.push_back(InitSegment{0, kWidth, InitKind::kConstant, init, 0.0f});
  return t;
}

// Row ids (with repeats) and integer gradients of sparse push `k` by worker `w`.
void SparseGradient(int w, int k, KeyBuffer* ids, FloatBuffer* grads) {
  *ids = KeyBuffer(kRowsPerPush);
  *grads = FloatBuffer(kRowsPerPush * kWidth);
  for (int j = 0; j < kRowsPerPush; ++j) {
    const uint64_t id = (static_cast<uint64_t>(k) * 37 + w * 101 + j * 13) % kRows;
    (*ids)[j] = id;
    for (uint32_t c = 0; c < kWidth; ++c) {
      (*grads)[j * kWidth + c] = static_cast<float>((id * 3 + c + k) % 4) - 1.0f;
    }
  }
}

TableOptions Table(const std::string& optimizer, float init) {
  TableOptions t;
  t.name = "w";
  t.type = TableType::kDense;
  t.size = kSize;
  t.optimizer.name = optimizer;
  t.optimizer.lr = optimizer == "sgd" ? 1.0f : 0.01f;
  t.init.seed = 5;
  t.init.segments.push_back(InitSegment{0, kSize, InitKind::kConstant, init, 0.0f});
  return t;
}

// Integer gradient of push `k` by worker `w`: values in {-1, 0, 1, 2}.
FloatBuffer Gradient(int w, int k) {
  FloatBuffer g(kSize);
  for (uint64_t i = 0; i < kSize; ++i) g[i] = static_cast<float>((i * 3 + k + 7 * w) % 4) - 1.0f;
  return g;
}

class ChainExactlyOnceTest : public ::testing::Test {
 protected:
  void SetUp() override { StartCluster({}); }
  // Starts the coordinator (CoordinatorFlags() and then `extra`: a flag
  // given twice takes the later value) and the three servers, in place of
  // any cluster started before.
  void StartCluster(const std::vector<std::string>& extra) {
    cluster_.reset();
    std::vector<std::string> flags = CoordinatorFlags();
    flags.insert(flags.end(), extra.begin(), extra.end());
    dir_ = MakeTempDir();
    ASSERT_OK_AND_ASSIGN(cluster_, RecoveryCluster::Start(dir_, 3, flags));
    for (int id = 0; id < 3; ++id) ASSERT_OK(cluster_->StartServer(id, ServerFlags()));
  }
  static std::vector<std::string> ServerFlags() { return {"--store=memory", "--heartbeat_ms=100"}; }

  // Kills server `id`, waits for the failover, restarts it and waits until
  // it is back in all its chains.
  void KillAndRestart(int id) {
    cluster_->server(id)->Kill(SIGKILL);
    ASSERT_TRUE(WaitForChains(cluster_.get(), "w", id, 0, 10000)) << "no failover after killing " << id;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ASSERT_OK(cluster_->StartServer(id, ServerFlags()));
    ASSERT_TRUE(WaitForChains(cluster_.get(), "w", -1, 2, 10000)) << "server " << id << " did not rejoin";
  }

  // Every slot of every range on every replica of its chain.
  void ExpectReplicas(int slots, const std::vector<std::vector<float>>& expected) {
    std::vector<ChainRange> ranges = Chains(cluster_.get(), "w");
    ASSERT_FALSE(ranges.empty());
    for (const ChainRange& r : ranges) {
      for (int server : r.chain) {
        for (int slot = 0; slot < slots; ++slot) {
          ASSERT_OK_AND_ASSIGN(std::vector<float> got, WhenInSync([&] {
                                 return ReadDenseSlot(cluster_->server_endpoint(server), "w",
                                                      r.begin, r.end - r.begin, slot);
                               }));
          for (uint64_t i = r.begin; i < r.end; ++i) {
            ASSERT_EQ(got[i - r.begin], expected[slot][i])
                << "server " << server << " slot " << slot << " key " << i;
          }
        }
      }
    }
  }

  // Two workers push integer gradients (SGD, lr 1) as fast as they can.
  void StartSgdWorkers(float init) {
    for (int w = 0; w < 2; ++w) {
      ASSERT_OK_AND_ASSIGN(auto c, cluster_->Connect("worker"));
      workers_.push_back(std::move(c));
    }
    ASSERT_OK(workers_[0]->CreateTable(Table("sgd", init)));
    ASSERT_OK(workers_[1]->CreateTable(Table("sgd", init)));
    ASSERT_OK(workers_[0]->CreateTable(SparseTable(init)));
    ASSERT_OK(workers_[1]->CreateTable(SparseTable(init)));
    sums_.assign(2, std::vector<double>(kSize, 0.0));
    row_sums_.assign(2, std::vector<double>(kRows * kWidth, 0.0));
    for (auto& p : pushes_) p = 0;
    errors_.assign(2, Status::OK());
    for (int w = 0; w < 2; ++w) {
      pushers_.threads.emplace_back([this, w] {
        for (int k = 0; !pushers_.stop.load(); ++k) {
          FloatBuffer g = Gradient(w, k);
          // The client resends a lost push (same exactly-once key) until
          // the new head acknowledges it.
          Status s = workers_[w]->Push("w", 0, g).get();
          if (!s.ok()) {
            errors_[w] = s;
            return;
          }
          for (uint64_t i = 0; i < kSize; ++i) sums_[w][i] += g[i];
          KeyBuffer ids;
          FloatBuffer rows;
          SparseGradient(w, k, &ids, &rows);
          s = workers_[w]->PushRows("e", ids, rows).get();
          if (!s.ok()) {
            errors_[w] = s;
            return;
          }
          for (int j = 0; j < kRowsPerPush; ++j) {
            for (uint32_t c = 0; c < kWidth; ++c) {
              row_sums_[w][ids[j] * kWidth + c] += rows[j * kWidth + c];
            }
          }
          pushes_[w].fetch_add(1);
        }
      });
    }
  }

  // Stops the workers; every live replica must hold init - (each
  // acknowledged push, once).
  void FinishSgd(float init) {
    pushers_.Join();
    for (int w = 0; w < 2; ++w) ASSERT_OK(errors_[w]) << "worker " << w;
    LOG(INFO) << "pushes acknowledged: " << pushes_[0] << " + " << pushes_[1];
    ASSERT_GT(pushes_[0] + pushes_[1], 20);
    std::vector<std::vector<float>> expected(1, std::vector<float>(kSize));
    for (uint64_t i = 0; i < kSize; ++i) {
      const double v = init - sums_[0][i] - sums_[1][i];
      ASSERT_LT(std::abs(v), 1 << 24);
      expected[0][i] = static_cast<float>(v);
    }
    ExpectReplicas(1, expected);
    ExpectSparseReplicas(init);
  }

  // Every row of every bucket of the sparse table on every replica of the
  // bucket's chain: init - (each acknowledged push, once).
  void ExpectSparseReplicas(float init) {
    std::vector<ChainRange> buckets = BucketChains(cluster_.get(), "e");
    ASSERT_EQ(buckets.size(), static_cast<size_t>(kBuckets));
    std::string shown;
    for (const ChainRange& b : buckets) {
      shown += " #" + std::to_string(b.begin) + ":";
      for (int c : b.chain) shown += " " + std::to_string(c);
    }
    LOG(INFO) << "bucket chains of 'e' (relaxps-ctl status):" << shown;
    size_t rows_checked = 0, rows_expected = 0;
    for (const ChainRange& b : buckets) {
      ASSERT_FALSE(b.chain.empty()) << "bucket " << b.begin;
      std::vector<uint64_t> ids;
      for (uint64_t r = 0; r < kRows; ++r) {
        if (SparseOwner(r, kBuckets) == static_cast<int>(b.begin)) ids.push_back(r);
      }
      for (int server : b.chain) {
        ASSERT_OK_AND_ASSIGN(std::vector<float> got, WhenInSync([&] {
                               return ReadRowsSlot(cluster_->server_endpoint(server), "e", ids,
                                                   0, b.begin);
                             }));
        ASSERT_EQ(got.size(), ids.size() * kWidth);
        for (size_t i = 0; i < ids.size(); ++i) {
          for (uint32_t c = 0; c < kWidth; ++c) {
            const size_t at = ids[i] * kWidth + c;
            const double v = init - row_sums_[0][at] - row_sums_[1][at];
            ASSERT_LT(std::abs(v), 1 << 24);
            ASSERT_EQ(got[i * kWidth + c], static_cast<float>(v))
                << "server " << server << " bucket " << b.begin << " row " << ids[i] << " col "
                << c;
          }
        }
        rows_checked += ids.size();
      }
      rows_expected += b.chain.size() * ids.size();
    }
    EXPECT_EQ(rows_checked, rows_expected);
    EXPECT_GE(rows_checked, kRows);  // Every row, on every live replica.
  }
  int64_t Pushes() { return pushes_[0].load() + pushes_[1].load(); }

  // `worker` pushes Gradient(0, k) (k from applied.size(), after the pushes
  // in `applied`) as fast as it can while the head of range 0 dies and
  // comes back; every replica must then hold, slots included, what one
  // process applying the acknowledged pushes in order computes (Adam
  // `table`). Returns how many pushes that was.
  size_t AdamPushesThroughAFailover(Client* worker, const TableOptions& table,
                                    std::vector<FloatBuffer> applied) {
    Status error;
    Pushers pushers;
    pushers.threads.emplace_back([&] {
      for (int k = static_cast<int>(applied.size()); !pushers.stop.load(); ++k) {
        FloatBuffer g = Gradient(0, k);
        Status s = worker->Push("w", 0, g).get();
        if (!s.ok()) {
          error = s;
          return;
        }
        applied.push_back(g);
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    KillAndRestart(0);  // The head of range 0 dies mid-stream.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    pushers.Join();
    EXPECT_OK(error);
    EXPECT_GT(applied.size(), 10u);
    // One process applying the same pushes in order on the CPU device.
    auto device = kernels::NewDevice(kernels::DeviceOptions());
    auto adam = kernels::NewOptimizer(table.optimizer);
    EXPECT_TRUE(device.ok() && adam.ok());
    if (!device.ok() || !adam.ok()) return applied.size();
    std::vector<std::vector<float>> expected(3, std::vector<float>(kSize, 0.0f));
    expected[0].assign(kSize, 0.5f);
    // Range by range, as the servers apply it (the update is elementwise: a
    // range applied in parts ends bit for bit the same).
    for (const ChainRange& r : Chains(cluster_.get(), "w")) {
      std::vector<float*> state = {expected[1].data() + r.begin, expected[2].data() + r.begin};
      for (size_t t = 0; t < applied.size(); ++t) {
        (*adam)->Apply(device->get(), expected[0].data() + r.begin, state.data(),
                       applied[t].data() + r.begin, r.end - r.begin,
                       static_cast<int64_t>(t + 1), 1.0f);
      }
    }
    ExpectReplicas(3, expected);
    return applied.size();
  }

  std::string dir_;
  std::unique_ptr<RecoveryCluster> cluster_;
  std::vector<std::unique_ptr<Client>> workers_;
  std::vector<std::vector<double>> sums_;
  std::vector<std::vector<double>> row_sums_;  // Per worker: kRows x kWidth.
  std::atomic<int64_t> pushes_[2];
  std::vector<Status> errors_;
  Pushers pushers_;  // Declared last: joined before the workers go.
};

TEST_F(ChainExactlyOnceTest, SgdPushesAppliedExactlyOnceOnEveryReplica) {
  constexpr float kInit = 1000.0f;
  StartSgdWorkers(kInit);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  KillAndRestart(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  // Server 1 holds the ranges it rejoined only through the state transfer.
  cluster_->server(2)->Kill(SIGKILL);
  ASSERT_TRUE(WaitForChains(cluster_.get(), "w", 2, 0, 10000));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  FinishSgd(kInit);
}

std::string TailOf(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(s.size() - n);
}

// Messages `servers` refused as a fenced server's, summed: for its old
// epoch (stale_epoch_refused) or, once they learned that it is no longer
// live, for its revoked member token (quota_rejected counts those; nothing
// else in this test is refused for a control check). Which of the two comes
// first depends on whether the token set without it reached the successor
// before the coordinator paused: both fence it.
uint64_t FencedRefused(RecoveryCluster* cluster, const std::vector<int>& servers) {
  uint64_t total = 0;
  for (int id : servers) {
    StatusOr<wire::ServerStats> stats = TryServerStats(cluster->server_endpoint(id));
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (stats.ok()) total += stats->stale_epoch_refused() + stats->quota_rejected();
  }
  return total;
}

// Acceptance 5: a server paused for 5 s is routed around after the heartbeat
// timeout; when it resumes, what it still does at its old epoch is refused
// (for that epoch, or for its member token, revoked when it was declared dead)
// (here, deterministically: a push that reached it while it was paused, which
// it applies and forwards at the old epoch when it resumes, while the
// coordinator is paused so that no heartbeat reply can tell it first that it
// was fenced), it is fenced, drops its replicas and rejoins its chains in
// process as tail; training goes on with nothing lost or applied twice, on
// the rejoined server too.
TEST_F(ChainExactlyOnceTest, PausedServerRoutedAroundThenFencedAndRejoins) {
  constexpr float kInit = 1000.0f;
  StartSgdWorkers(kInit);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  std::vector<ChainRange> ranges = Chains(cluster_.get(), "w");
  ASSERT_FALSE(ranges.empty());
  const ChainRange headed = ranges[0];  // Headed by server 0.
  ASSERT_EQ(headed.chain[0], 0);
  // A connection to server 0 made before the pause, so that what is sent on
  // it during the pause waits in its socket and is read first thing when it
  // resumes (before its next heartbeat can tell it that it was fenced).
  RpcClient late;
  const int late_peer = late.Connect(cluster_->server_endpoint(0));
  Message ping;
  ping.header.set_type(wire::PING);
  ASSERT_OK(late.CallSync(late_peer, std::move(ping), 5000).status());
  cluster_->server(0)->Kill(SIGSTOP);
  const int64_t stopped = RealClock()->NowMs();
  // A push queued at the paused head, by no real worker (its gradient is in
  // no sum: applying it on any live replica breaks the final check), with
  // worker 0's id and member token, which servers require of its pushes.
  Message push;
  push.header.set_type(wire::PUSH);
  push.header.set_table("w");
  push.header.set_sender(workers_[0]->job().worker_id);
  SetMemberToken(MemberTokenOf(*workers_[0]), &push.header);
  push.header.set_incarnation(424242);
  push.header.set_push_id(1);
  push.header.set_key_begin(headed.begin);
  push.header.set_key_count(headed.end - headed.begin);
  FloatBuffer ones(headed.end - headed.begin);
  std::fill(ones.data(), ones.data() + ones.size(), 1.0f);
  push.frames.push_back(Frame::Share(ones));
  std::promise<Status> late_push;
  late.Call(late_peer, std::move(push), 9000,
            [&late_push](const Status& st, Message) { late_push.set_value(st); });
  ASSERT_TRUE(WaitForChains(cluster_.get(), "w", 0, 0, 5000)) << "paused server not routed around";
  const int64_t routed_ms = RealClock()->NowMs() - stopped;
  const int64_t before = Pushes();
  std::this_thread::sleep_for(std::chrono::milliseconds(std::max<int64_t>(0, 5000 - routed_ms)));
  const int64_t during = Pushes() - before;
  const uint64_t refused_before = FencedRefused(cluster_.get(), {1, 2});
  // Server 0 learns that it was fenced from its next heartbeat's reply,
  // which would race with reading the late push: the coordinator waits.
  cluster_->coordinator()->Kill(SIGSTOP);
  cluster_->server(0)->Kill(SIGCONT);
  uint64_t refused = 0;
  const int64_t give_up = RealClock()->NowMs() + 10000;
  while ((refused = FencedRefused(cluster_.get(), {1, 2}) - refused_before) == 0 &&
         RealClock()->NowMs() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  cluster_->coordinator()->Kill(SIGCONT);
  EXPECT_GT(refused, 0u) << "no late update of the fenced server was refused; its log ends:\n"
                        << TailOf(cluster_->server(0)->Log(), 6000);
  // Fenced, then back in every chain of its home placement, in process.
  ASSERT_TRUE(WaitForChains(cluster_.get(), "w", -1, 2, 10000))
      << "fenced server did not rejoin; its log ends:\n"
      << TailOf(cluster_->server(0)->Log(), 3000);
  EXPECT_TRUE(cluster_->server(0)->IsRunning());
  // The late push was applied and forwarded by the fenced head at its old
  // epoch: refused by its old successor, never acknowledged.
  std::future<Status> late_result = late_push.get_future();
  ASSERT_EQ(late_result.wait_for(std::chrono::seconds(15)), std::future_status::ready);
  const Status late_status = late_result.get();
  EXPECT_FALSE(late_status.ok()) << "a push the fenced server took was acknowledged";
  ASSERT_OK_AND_ASSIGN(std::string log0, ReadFile(cluster_->server(0)->log_path()));
  EXPECT_FALSE(GrepLines(log0, "fenced at epoch").empty()) << log0;
  EXPECT_FALSE(GrepLines(log0, "registered again after being fenced").empty()) << log0;
  LOG(INFO) << "paused server routed around after " << routed_ms << " ms; " << during
            << " pushes acknowledged during the pause; " << refused
            << " late message(s) refused (old epoch or revoked token); the late push got: " << late_status;
  EXPECT_GT(during, 0) << "training stalled during the pause";
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  FinishSgd(kInit);  // Server 0's replicas included.
}

// A coordinator paused for three heartbeat timeouts heard nobody meanwhile:
// when it resumes it declares no one dead (it would otherwise remove every
// server from every chain at once), and training goes on with nothing lost.
TEST_F(ChainExactlyOnceTest, PausedCoordinatorDeclaresNobodyDeadWhenItResumes) {
  constexpr float kInit = 1000.0f;
  // The heartbeat timeout stretches with the sanitizers' slowdown (the
  // binaries do not scale a flag given on their command line). Under TSan,
  // with 1000 ms, the workers' heartbeats, starved on 2 cores, sometimes
  // went missing for a timeout before the pause began (4 runs in 10 of the
  // chain tests two at a time): not what this test is about.
  const int timeout_ms = 1000 * TimeScale();
  if (TimeScale() > 1) {
    ASSERT_NO_FATAL_FAILURE(
        StartCluster({"--heartbeat_timeout_ms=" + std::to_string(timeout_ms)}));
  }
  StartSgdWorkers(kInit);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  cluster_->coordinator()->Kill(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * timeout_ms));  // 3 timeouts.
  cluster_->coordinator()->Kill(SIGCONT);
  // Several liveness checks (every 200 ms) after the pause.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500 * TimeScale()));
  ASSERT_OK_AND_ASSIGN(std::string log, ReadFile(cluster_->dir() + "/coordinator.log"));
  EXPECT_TRUE(GrepLines(log, "missed heartbeats").empty()) << log;
  EXPECT_EQ(GrepLines(log, "the coordinator did not run for [0-9]+ ms").size(), 1u) << log;
  ASSERT_TRUE(WaitForChains(cluster_.get(), "w", -1, 2, 1000)) << log;
  FinishSgd(kInit);
}

TEST_F(ChainExactlyOnceTest, AdamSlotsIdenticalToOneProcessAfterFailover) {
  ASSERT_OK_AND_ASSIGN(auto worker, cluster_->Connect("worker"));
  const TableOptions table = Table("adam", 0.5f);
  ASSERT_OK(worker->CreateTable(table));
  AdamPushesThroughAFailover(worker.get(), table, {});
}

// Issue 41: under chain replication a large push is split like under any
// policy: here every range of more than 2048 keys goes as parts of 1024 keys
// (13 requests per push of the table, not 3), each with its own key. The
// head of range 0 dies mid-stream: the parts it had not acknowledged are
// resent to the new head, those it had applied are duplicates there, and
// every replica ends bit for bit as one process applying each push once, one
// Adam step per push (a later part takes none, on the head and replicas).
TEST_F(ChainExactlyOnceTest, SplitPushesAppliedOnceWithOneAdamStepEachAfterFailover) {
  ASSERT_OK_AND_ASSIGN(auto worker, cluster_->Connect("worker", [](ClientOptions* o) {
    o->dense_split_bytes = 2048 * sizeof(float);
    o->dense_part_bytes = 1024 * sizeof(float);
  }));
  const TableOptions table = Table("adam", 0.5f);
  ASSERT_OK(worker->CreateTable(table));
  std::vector<FloatBuffer> applied;  // Acknowledged pushes, in order.
  ASSERT_OK_AND_ASSIGN(const uint64_t requests_before, ClientRequests(cluster_.get(), {0, 1, 2}));
  applied.push_back(Gradient(0, 0));
  ASSERT_OK(worker->Push("w", 0, applied.back()).get());
  ASSERT_OK_AND_ASSIGN(const uint64_t requests_after, ClientRequests(cluster_.get(), {0, 1, 2}));
  // Ranges [0, 8192), [8192, 12288), [12288, 13288): 8 + 4 + 1 parts (and
  // the SERVER_STATS requests that read `requests_before`, one per server).
  EXPECT_EQ(requests_after - requests_before, 13u + 3) << "the push was not split";
  EXPECT_EQ(worker->stats().acked_updates, 3u);  // One per range, however many parts.
  const size_t pushes = AdamPushesThroughAFailover(worker.get(), table, std::move(applied));
  EXPECT_EQ(worker->stats().acked_updates, 3 * pushes);
}

// A server rejoins as tail while the only other replica of a range is paused
// (so the state transfer cannot arrive); that replica then dies. The range
// would be left on a server that holds none of its state: the job fails with
// an error naming the range and the waiting server, instead of training on
// silently lost parameters.
TEST_F(ChainExactlyOnceTest, LastSyncedReplicaDyingBeforeTheStateTransferFailsTheJob) {
  // A heartbeat timeout long enough that the paused server is only found
  // dead when it is killed.
  ASSERT_NO_FATAL_FAILURE(StartCluster({"--heartbeat_timeout_ms=10000"}));
  ASSERT_OK_AND_ASSIGN(auto worker, cluster_->Connect("worker"));
  ASSERT_OK(worker->CreateTable(Table("sgd", 1.0f)));
  ASSERT_OK(worker->Push("w", 0, Gradient(0, 0)).get());
  cluster_->server(1)->Kill(SIGKILL);
  ASSERT_TRUE(WaitForChains(cluster_.get(), "w", 1, 0, 10000));
  // Range 0 is on server 0 alone now; with server 0 paused, server 1 rejoins
  // its chain (0 -> 1) but cannot get its state.
  cluster_->server(0)->Kill(SIGSTOP);
  ASSERT_OK(cluster_->StartServer(1, ServerFlags()));
  ASSERT_TRUE(WaitForChains(cluster_.get(), "w", -1, 2, 10000)) << "server 1 did not rejoin";
  StatusOr<CommandResult> before = cluster_->Ctl({"status"});
  ASSERT_OK(before.status());
  EXPECT_EQ(before->output.find("job_error"), std::string::npos) << before->output;
  cluster_->server(0)->Kill(SIGKILL);
  std::string error;
  const int64_t until = RealClock()->NowMs() + 10000;
  while (error.empty() && RealClock()->NowMs() < until) {
    StatusOr<CommandResult> st = cluster_->Ctl({"status"});
    if (st.ok()) {
      for (const std::string& l : GrepLines(st->output, "job_error")) error += l;
    }
    if (error.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(error.find("server 0 holds the last replica with state of keys [0, 8192) of table "
                       "'w': server(s) 1 joined its chain but had not received the state "
                       "transfer"),
            std::string::npos)
      << error;
  // The worker learns it too (from its next heartbeat), instead of training
  // on: until then a push may be told Unavailable (the rejoined server has no
  // state), never OK.
  Status pushed = UnavailableError("not pushed");
  const int64_t learn_by = RealClock()->NowMs() + 10000;
  while (pushed.code() == StatusCode::kUnavailable && RealClock()->NowMs() < learn_by) {
    pushed = worker->Push("w", 0, Gradient(0, 1)).get();
    if (pushed.code() == StatusCode::kUnavailable) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  EXPECT_EQ(pushed.code(), StatusCode::kAborted) << pushed;
}

}  // namespace
}  // namespace test
}  // namespace relaxps
