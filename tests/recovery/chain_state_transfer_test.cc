// The state transfer to a replica rejoining its chains (--recovery=chain
// --replicas=2 on 3 servers) is streamed in pieces: with --max_message_mb=1
// and --state_transfer_chunk_kb=256, a dense range whose snapshot (Adam: 3
// slots of 800 KB) and a sparse bucket whose snapshot (about 1 MiB of rows)
// are each bigger than any message a server accepts still reach the
// restarted server, while a worker keeps pushing; afterwards every replica
// of every range and bucket holds the same values, slots included, bit for
// bit. (In one message, each snapshot would be over the limit: the joiner's
// socket drops it and the replica never gets its state.)
#include <signal.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/shard_map.h"
#include "tests/recovery/chain_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kRangeKeys = 200000;  // 800 KB a slot, one range per server.
constexpr uint64_t kSize = 3 * kRangeKeys;
constexpr uint64_t kRows = 4500;          // About 1500 rows a bucket...
constexpr uint32_t kWidth = 64;           // ... of 3 x 256 bytes (Adam): ~1.1 MiB.
constexpr int kRowsPerPush = 250;
constexpr int kBuckets = 3;

TableOptions Dense() {
  TableOptions t;
  t.name = "w";
  t.type = TableType::kDense;
  t.size = kSize;
  t.optimizer.name = "adam";
  t.optimizer.lr = 0.01f;
  t.init.seed = 5;
  t.init.segments.push_back(InitSegment{0, kSize, InitKind::kConstant, 0.5f, 0.0f});
  return t;
}

TableOptions Sparse() {
  TableOptions t;
  t.name = "e";
  t.type = TableType::kSparse;
  t.row_width = kWidth;
  t.optimizer.name = "adam";
  t.optimizer.lr = 0.01f;
  t.init.seed = 6;
  t.init.segments.push_back(InitSegment{0, kWidth, InitKind::kConstant, 0.25f, 0.0f});
  return t;
}

std::vector<std::string> ServerFlags() {
  return {"--store=memory", "--heartbeat_ms=100", "--max_message_mb=1",
          "--state_transfer_chunk_kb=256"};
}

// The most pieces any "received at seq ... in N piece(s)" line of `log` names.
int MostPieces(const std::string& log, const std::string& what) {
  StatusOr<std::string> text = ReadFile(log);
  if (!text.ok()) return 0;
  const std::regex line("state of table '" + what + R"(' [^\n]* in (\d+) piece\(s\))");
  int most = 0;
  for (std::sregex_iterator it(text->begin(), text->end(), line), end; it != end; ++it) {
    most = std::max(most, std::stoi((*it)[1].str()));
  }
  return most;
}

TEST(ChainStateTransferTest, SnapshotsBiggerThanAnyMessageStreamInPiecesWhileTrainingGoesOn) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster,
                       RecoveryCluster::Start(dir, 3,
                                              {"--recovery=chain", "--replicas=2",
                                               "--consistency=async", "--heartbeat_timeout_ms=1000",
                                               "--sparse_buckets=" + std::to_string(kBuckets)}));
  for (int id = 0; id < 3; ++id) ASSERT_OK(cluster->StartServer(id, ServerFlags()));
  ASSERT_OK_AND_ASSIGN(auto worker, cluster->Connect("worker"));
  ASSERT_OK(worker->CreateTable(Dense()));
  ASSERT_OK(worker->CreateTable(Sparse()));

  Status error;  // Written by the pusher before it sets `failed` and returns.
  std::atomic<bool> failed{false};
  std::atomic<int> pushes{0};
  Pushers pushers;
  pushers.threads.emplace_back([&] {
    for (int k = 0; !pushers.stop.load(); ++k) {
      FloatBuffer g(kSize);
      for (uint64_t i = 0; i < kSize; ++i) g[i] = static_cast<float>((i + k) % 7) - 3.0f;
      // Every row is touched within the first rounds.
      KeyBuffer ids(kRowsPerPush);
      FloatBuffer rows(kRowsPerPush * kWidth);
      for (int j = 0; j < kRowsPerPush; ++j) {
        ids[j] = (static_cast<uint64_t>(k) * kRowsPerPush + j) % kRows;
        for (uint32_t c = 0; c < kWidth; ++c) {
          rows[j * kWidth + c] = static_cast<float>((ids[j] + c + k) % 5) - 2.0f;
        }
      }
      Status s = worker->Push("w", 0, g).get();
      if (s.ok()) s = worker->PushRows("e", ids, rows).get();
      if (!s.ok()) {
        error = s;
        failed.store(true);
        return;
      }
      pushes.fetch_add(1);
    }
  });
  // Every row updated before the kill: the buckets' snapshots hold them all.
  const int touch_all = static_cast<int>(kRows / kRowsPerPush) + 2;
  for (int i = 0; i < 600 && pushes.load() < touch_all && !failed.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(pushes.load(), touch_all) << (failed.load() ? error.ToString() : "");

  cluster->server(1)->Kill(SIGKILL);
  ASSERT_TRUE(WaitForChains(cluster.get(), "w", 1, 0, 10000)) << "no failover";
  ASSERT_OK(cluster->StartServer(1, ServerFlags()));
  ASSERT_TRUE(WaitForChains(cluster.get(), "w", -1, 2, 10000)) << "server 1 did not rejoin";
  const int at_rejoin = pushes.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // Pushes during the transfer.
  pushers.Join();
  ASSERT_OK(error);
  LOG(INFO) << "pushes acknowledged: " << pushes.load() << " (" << at_rejoin << " at the rejoin)";
  EXPECT_GT(pushes.load(), at_rejoin);

  // Dense: every slot of every range, identical on every replica.
  const std::vector<ChainRange> ranges = Chains(cluster.get(), "w");
  ASSERT_EQ(ranges.size(), 3u);
  for (const ChainRange& r : ranges) {
    ASSERT_EQ(r.chain.size(), 2u);
    for (int slot = 0; slot < 3; ++slot) {
      std::vector<std::vector<float>> copies;
      for (int server : r.chain) {
        ASSERT_OK_AND_ASSIGN(std::vector<float> got, WhenInSync([&] {
                               return ReadDenseSlot(cluster->server_endpoint(server), "w", r.begin,
                                                    r.end - r.begin, slot);
                             }));
        copies.push_back(std::move(got));
      }
      ASSERT_EQ(copies[0].size(), r.end - r.begin);
      if (slot == 0) {
        ASSERT_NE(copies[0][0], 0.5f) << "no push reached range " << r.begin;
      }
      for (size_t i = 0; i < copies[0].size(); ++i) {
        ASSERT_EQ(copies[0][i], copies[1][i]) << "range " << r.begin << " slot " << slot
                                              << " key " << r.begin + i;
      }
    }
  }
  // Sparse: every row of every bucket (all slots), identical on every replica.
  const std::vector<ChainRange> buckets = BucketChains(cluster.get(), "e");
  ASSERT_EQ(buckets.size(), static_cast<size_t>(kBuckets));
  for (const ChainRange& b : buckets) {
    ASSERT_EQ(b.chain.size(), 2u);
    std::vector<uint64_t> ids;
    for (uint64_t r = 0; r < kRows; ++r) {
      if (SparseOwner(r, kBuckets) == static_cast<int>(b.begin)) ids.push_back(r);
    }
    for (int slot = 0; slot < 3; ++slot) {
      std::vector<std::vector<float>> copies;
      for (int server : b.chain) {
        ASSERT_OK_AND_ASSIGN(std::vector<float> got, WhenInSync([&] {
                               return ReadRowsSlot(cluster->server_endpoint(server), "e", ids,
                                                   slot, b.begin);
                             }));
        copies.push_back(std::move(got));
      }
      ASSERT_EQ(copies[0].size(), ids.size() * kWidth);
      if (slot == 0) {
        ASSERT_NE(copies[0][0], 0.25f) << "no push reached bucket " << b.begin;
      }
      for (size_t i = 0; i < copies[0].size(); ++i) {
        ASSERT_EQ(copies[0][i], copies[1][i]) << "bucket " << b.begin << " slot " << slot
                                              << " row " << ids[i / kWidth];
      }
    }
  }
  // The restarted server got its state in pieces (2.4 MB and ~1.1 MiB in
  // 256 KiB pieces).
  const std::string log = dir + "/server-1.1.log";
  EXPECT_GE(MostPieces(log, "w"), 9) << log;
  EXPECT_GE(MostPieces(log, "e"), 4) << log;
}

}  // namespace
}  // namespace test
}  // namespace relaxps
