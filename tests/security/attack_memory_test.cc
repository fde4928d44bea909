// Memory under attack (issue 13), measured where it matters: the peak
// resident set (VmHWM) of a real relaxps-server process with its default
// limits, while a peer that knows its endpoint sends well-formed requests.
// The figures before the limits: 1,000 unread 400 KB pulls held
// 396 MB; 500 BSP pushes at distinct future clocks cost 202 MB; sparse reads
// of random ids created rows (+28 MB per 400 requests).
//
// Each attack's growth of the peak must stay under what the server's limits
// allow (--max_queued_replies replies queued per peer, --max_clocks_ahead
// rounds, no rows created by reads) plus a fixed allowance for allocator
// and socket buffers; the figures are printed for the record.
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "client/testing.h"
#include "common/member_token.h"
#include "common/rpc_client.h"
#include "tests/recovery/recovery_util.h"
#include "tests/security/attack_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

constexpr uint64_t kKeys = 100000;           // A 400 KB dense table.
constexpr int64_t kAllowanceKb = 24 * 1024;  // Allocator arenas, socket buffers.

// Waits until the server has taken `n` more requests than `before`.
void WaitForRequests(const std::string& server, uint64_t before, uint64_t n) {
  test::WaitForServerRequests(server, before + n, test::Scaled(test::Millis(60000)));
}

class AttackMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::MakeTempDir();
    // BSP with no slack: the future-clock attack needs a gate.
    auto c = test::RecoveryCluster::Start(dir_, 1, {"--consistency=bsp", "--staleness=0"});
    ASSERT_OK(c.status());
    cluster_ = std::move(c).value();
    ASSERT_OK(cluster_->StartServer(0, {}));
    server_ = cluster_->server_endpoint(0);
    auto w = cluster_->Connect();
    ASSERT_OK(w.status());
    worker_ = std::move(w).value();
    TableOptions dense;
    dense.name = "w";
    dense.size = kKeys;
    dense.optimizer.name = "sgd";
    dense.optimizer.lr = 0.1f;
    ASSERT_OK(worker_->CreateTable(dense));
    TableOptions sparse;
    sparse.name = "emb";
    sparse.type = TableType::kSparse;
    sparse.row_width = 16;
    sparse.optimizer.name = "sgd";
    sparse.optimizer.lr = 0.1f;
    sparse.init.seed = 1;
    sparse.init.segments.push_back(InitSegment{0, 16, InitKind::kUniform, -0.1f, 0.1f});
    ASSERT_OK(worker_->CreateTable(sparse));
    // One honest step, so every lazily built structure exists before the
    // baseline is taken.
    FloatBuffer g(kKeys), out(kKeys);
    ASSERT_OK(worker_->PushPull("w", 0, g, out).get());
  }
  void TearDown() override {
    worker_.reset();
    cluster_.reset();
    if (!HasFailure()) test::RemoveTree(dir_);
  }
  int64_t PeakKb() { return test::PeakRssKb(cluster_->server(0)->pid()); }

  std::string dir_;
  std::unique_ptr<test::RecoveryCluster> cluster_;
  std::string server_;
  std::unique_ptr<Client> worker_;
};

TEST_F(AttackMemoryTest, ServerPeakMemoryStaysWithinItsLimits) {
  int64_t before = PeakKb();
  ASSERT_GT(before, 0);
  std::printf("server peak RSS after start: %.1f MB\n", before / 1024.0);

  // 1. 1,000 pulls of the whole table whose replies are never read.
  {
    test::RawPeer peer(server_, /*rcvhwm=*/1);
    wire::Header pull;
    pull.set_type(wire::PULL);
    pull.set_table("w");
    pull.set_key_begin(0);
    pull.set_key_count(kKeys);
    pull.set_sender(-1);
    const uint64_t seen = test::ServerStatsOf(server_).requests();
    for (int i = 1; i <= 1000; ++i) {
      pull.set_request_id(i);
      peer.Send(pull);
    }
    WaitForRequests(server_, seen, 1000);
    const int64_t after = PeakKb();
    // --max_queued_replies=128 replies of 400 KB may be queued.
    const int64_t bound = 128 * static_cast<int64_t>(kKeys) * 4 / 1024 + kAllowanceKb;
    std::printf("1000 unread 400 KB pulls: peak +%.1f MB (bound %.1f MB; 396 MB before limits)\n",
                (after - before) / 1024.0, bound / 1024.0);
    if (!test::kSanitizerInflatesMemory) {  // test_util.h.
      EXPECT_LT(after - before, bound);
    }
    before = after;
  }

  // 2. 500 BSP pushes of one float at distinct future clocks.
  {
    test::RawPeer peer(server_);
    wire::Header push;
    push.set_type(wire::PUSH);
    push.set_table("w");
    push.set_key_begin(0);
    push.set_key_count(1);
    push.set_sender(worker_->worker_id());
    SetMemberToken(MemberTokenOf(*worker_), &push);
    const float one = 1.0f;
    const std::string payload(reinterpret_cast<const char*>(&one), sizeof(one));
    const uint64_t seen = test::ServerStatsOf(server_).requests();
    for (int c = 2; c <= 501; ++c) {
      push.set_request_id(c);
      push.set_clock(c);
      peer.Send(push, payload);
    }
    WaitForRequests(server_, seen, 500);
    const int64_t after = PeakKb();
    // --max_clocks_ahead=4 rounds of the 400 KB shard at most.
    const int64_t bound = 4 * static_cast<int64_t>(kKeys) * 4 / 1024 + kAllowanceKb;
    std::printf("500 future-clock pushes: peak +%.1f MB (bound %.1f MB; 202 MB before limits)\n",
                (after - before) / 1024.0, bound / 1024.0);
    if (!test::kSanitizerInflatesMemory) {  // test_util.h.
      EXPECT_LT(after - before, bound);
    }
    before = after;
  }

  // 3. Sparse reads of 400,000 random row ids (400 requests of 1,000).
  {
    std::mt19937_64 rng(7);
    KeyBuffer ids(1000);
    FloatBuffer rows(1000 * 16);
    for (int r = 0; r < 400; ++r) {
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = rng();
      ASSERT_OK(worker_->PullRows("emb", ids, rows).get());
    }
    const int64_t after = PeakKb();
    // Rows a read would have created: 400,000 x 64 B = 25.6 MB of values
    // alone; reads may only cost their request and reply buffers.
    const int64_t bound = 8 * 1024;
    std::printf("400,000 random sparse reads: peak +%.1f MB (bound %.1f MB; the rows would be "
                "25.6 MB)\n",
                (after - before) / 1024.0, bound / 1024.0);
    if (!test::kSanitizerInflatesMemory) {  // test_util.h.
      EXPECT_LT(after - before, bound);
    }
  }

  // The server still serves the honest worker.
  FloatBuffer out(kKeys);
  ASSERT_OK(worker_->Pull("w", 0, out).get());
  EXPECT_TRUE(cluster_->server(0)->IsRunning());
}

}  // namespace
}  // namespace relaxps
