// Range moves under --recovery=replay (docs/elastic.md "Replay") on real
// processes: a one-server job checkpoints, trains on, gets a second server
// (--join) that takes the tail of the table, trains on, and then loses a
// server, which restarts from its latest complete checkpoint. The workers'
// logs follow the moved keys (UpdateLog::Reroute), so each restarted server
// is replayed exactly what its keys' state lacks: its state equals the state
// before the kill bit for bit, the servers' applied parts equal the parts
// the worker was acknowledged (0 lost, the counter check of replay_test),
// and no replay is refused.
#include <signal.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/shard_map.h"
#include "tests/elastic/joined_server.h"
#include "tests/recovery/recovery_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

// The joined server's share is the tail [2 chunks, kSize).
constexpr uint64_t kSize = 3 * kDenseChunk + 1000;
constexpr uint64_t kCut = 2 * kDenseChunk;
constexpr int kJoined = 1;
const std::vector<std::string> kServerFlags = {"--store=rocksdb", "--heartbeat_ms=100"};

FloatBuffer Grad(int round) {
  FloatBuffer g(kSize);
  for (uint64_t i = 0; i < kSize; ++i) {
    g[i] = 0.001f * static_cast<float>((i * 7 + round * 3) % 23) - 0.01f;
  }
  return g;
}

// Parameters and both Adam slots of keys [begin, end) of "w" on `endpoint`.
std::vector<std::vector<float>> ReadSlots(const std::string& endpoint, uint64_t begin,
                                          uint64_t end) {
  std::vector<std::vector<float>> slots;
  for (int slot = 0; slot < 3; ++slot) {
    auto v = ReadDenseSlot(endpoint, "w", begin, end - begin, slot);
    EXPECT_TRUE(v.ok()) << v.status();
    slots.push_back(v.ok() ? *v : std::vector<float>());
  }
  return slots;
}

void ExpectSameBits(const std::vector<std::vector<float>>& a,
                    const std::vector<std::vector<float>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t s = 0; s < a.size(); ++s) {
    ASSERT_EQ(a[s].size(), b[s].size()) << what << " slot " << s;
    EXPECT_EQ(std::memcmp(a[s].data(), b[s].data(), a[s].size() * sizeof(float)), 0)
        << what << ": slot " << s << " differs from before the kill";
  }
}

class ReplayMoveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    events_ = dir_ + "/events.jsonl";
    // Checkpoints only when the test takes them (a scheduled one could
    // trim what the test wants replayed).
    ASSERT_OK_AND_ASSIGN(cluster_, RecoveryCluster::Start(dir_, 1,
                                                          {"--recovery=replay",
                                                           "--heartbeat_timeout_ms=1000",
                                                           "--checkpoint_every_s=100000",
                                                           "--events_file=" + events_}));
    ASSERT_OK(cluster_->StartServer(0, kServerFlags));
    ASSERT_OK_AND_ASSIGN(client_, cluster_->Connect("worker"));
    ASSERT_OK(client_->CreateTable(DenseAdamTable("w", kSize)));
  }

  void TearDown() override {
    if (joined_ != nullptr) joined_->Kill(SIGKILL);
  }

  void Rounds(int from, int to) {
    for (int round = from; round < to; ++round) {
      ASSERT_OK(client_->Push("w", 0, Grad(round)).get());
      ASSERT_OK(client_->Clock());
    }
  }

  void Checkpoint() {
    ASSERT_OK_AND_ASSIGN(CommandResult ck, cluster_->Ctl({"checkpoint"}));
    ASSERT_EQ(ck.exit_status, 0) << ck.output;
  }

  void Join() {
    ASSERT_OK(JoinServer(cluster_.get(), kJoined, kServerFlags, events_, kCut, &joined_,
                         &joined_endpoint_));
  }

  // SIGKILLs server `id` and restarts it from its latest checkpoint.
  void KillAndRestart(int id) {
    Subprocess* s = id == kJoined && joined_ != nullptr ? joined_.get() : cluster_->server(id);
    s->Kill(SIGKILL);
    ASSERT_OK(s->Wait(Millis(10000)).status());
    std::vector<std::string> flags = kServerFlags;
    flags.push_back("--restore_from=latest");
    ASSERT_OK(cluster_->StartServer(id, flags));
  }

  // What the worker was acknowledged equals what the servers applied.
  void ExpectNothingLost(const char* when) {
    const ClientStats stats = client_->stats();
    ASSERT_OK_AND_ASSIGN(uint64_t applied, cluster_->AppliedParts(0, stats.incarnation));
    EXPECT_EQ(applied, stats.acked_updates) << when << ": acknowledged updates lost or doubled";
    std::printf("replay move check (%s): acked=%llu applied=%llu replayed=%llu rerouted=%llu "
                "replay_failed=%llu\n",
                when, static_cast<unsigned long long>(stats.acked_updates),
                static_cast<unsigned long long>(applied),
                static_cast<unsigned long long>(stats.recovery_counters.at("replayed")),
                static_cast<unsigned long long>(stats.recovery_counters.at("replay_rerouted")),
                static_cast<unsigned long long>(stats.recovery_counters.at("replay_failed")));
    EXPECT_EQ(stats.recovery_counters.at("replay_failed"), 0u);
    EXPECT_EQ(stats.recovery_counters.at("replay_lost"), 0u);
  }

  std::string dir_, events_, joined_endpoint_;
  std::unique_ptr<RecoveryCluster> cluster_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Subprocess> joined_;
};

// The source restarts from a checkpoint taken before the move: the updates
// it acknowledged for the whole table since then are replayed to it only
// for the keys it still holds (the tail's are the joined server's, whose
// state reflects them), then the parts it acknowledged after the move.
TEST_F(ReplayMoveTest, TheSourceRestartedFromACheckpointBeforeTheMoveGetsOnlyItsKeysReplayed) {
  Rounds(0, 3);
  Checkpoint();
  Rounds(3, 6);  // Logged whole, acknowledged by server 0.
  Join();
  Rounds(6, 9);  // Two parts each.
  const auto head = ReadSlots(cluster_->server_endpoint(0), 0, kCut);
  const auto tail = ReadSlots(joined_endpoint_, kCut, kSize);
  ExpectNothingLost("before the kill");
  EXPECT_GT(client_->stats().recovery_counters.at("replay_rerouted"), 0u);

  KillAndRestart(0);
  FloatBuffer probe(kSize);  // Waits for the restart and the replay.
  ASSERT_OK(client_->Pull("w", 0, probe).get());
  ExpectSameBits(ReadSlots(cluster_->server_endpoint(0), 0, kCut), head, "source's head");
  ExpectSameBits(ReadSlots(joined_endpoint_, kCut, kSize), tail, "moved tail");
  ExpectNothingLost("after the source's restart");
  EXPECT_GE(client_->stats().recovery_counters.at("replayed"), 6u);
  Rounds(9, 10);  // Training goes on.
  ExpectNothingLost("after training on");
}

// Server 0 is drained (its head moves to the joined server too, and it
// exits); then the destination, holding the whole table, is killed and
// restarts from the checkpoint taken after the drain: the worker replays
// to it what it acknowledged since, and the model is as before the kill.
TEST_F(ReplayMoveTest, TheDestinationOfAJoinAndADrainRestartsWithEverythingReplayed) {
  Rounds(0, 3);
  Checkpoint();
  Rounds(3, 5);
  Join();
  Rounds(5, 7);
  ASSERT_OK_AND_ASSIGN(CommandResult drain, cluster_->Ctl({"drain-server", "0"}));
  ASSERT_EQ(drain.exit_status, 0) << drain.output;
  ASSERT_OK(cluster_->server(0)->Wait(Millis(30000)).status()) << "server 0 never left";
  Rounds(7, 9);
  Checkpoint();
  Rounds(9, 12);
  // It holds [0, kCut) and [kCut, kSize) as two ranges.
  const auto head = ReadSlots(joined_endpoint_, 0, kCut);
  const auto tail = ReadSlots(joined_endpoint_, kCut, kSize);
  ExpectNothingLost("after the drain");

  KillAndRestart(kJoined);
  FloatBuffer probe(kSize);
  ASSERT_OK(client_->Pull("w", 0, probe).get());
  ExpectSameBits(ReadSlots(cluster_->server_endpoint(kJoined), 0, kCut), head,
                 "the destination's first range");
  ExpectSameBits(ReadSlots(cluster_->server_endpoint(kJoined), kCut, kSize), tail,
                 "the destination's second range");
  ExpectNothingLost("after the destination's restart");
  EXPECT_GE(client_->stats().recovery_counters.at("replayed"), 3u);
  Rounds(12, 13);
  ExpectNothingLost("after training on");
}

}  // namespace
}  // namespace test
}  // namespace relaxps
