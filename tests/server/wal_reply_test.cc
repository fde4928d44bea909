// --wal_reply (ServerOptions::wal_reply) of a server with --wal_per_update
// and group commit, on the store's FileSystem seam, which holds the log's
// syncs as a slow disk would: `applied` answers a push once it is written
// to the log file, while the disk still has its sync, and the loop goes on
// answering; `durable` answers only after the sync. Either way the update is
// in the state, the server durable once the sync ends, and SERVER_STATS
// counts the early answers. (What a crash keeps in each mode: the store's
// DenseLogStoreTest and tests/recovery/wal_durability_test.cc.)
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "client/client.h"
#include "coordinator/coordinator.h"
#include "server/server.h"
#include "storage/fault_injecting_fs.h"
#include "tests/coordinator/running_coordinator.h"
#include "tests/security/attack_util.h"
#include "tests/storage/storage_test_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

TEST(WalReplyFlagTest, ParsesBothValuesAndRefusesOthers) {
  EXPECT_EQ(*ParseWalReply("applied"), WalReply::kApplied);
  EXPECT_EQ(*ParseWalReply("durable"), WalReply::kDurable);
  StatusOr<WalReply> bad = ParseWalReply("synced");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("applied or durable"), std::string::npos);
}

// The job's coordinator, one server, on a thread of the test.
CoordinatorOptions OneServer() {
  CoordinatorOptions co;
  co.num_servers = 1;
  return co;
}

TableOptions Counters(size_t size) {
  TableOptions t;
  t.name = "w";
  t.type = TableType::kDense;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;
  t.size = size;
  return t;
}

class WalReplyTest : public ::testing::TestWithParam<WalReply> {};

TEST_P(WalReplyTest, AnswersOnceWrittenOrOnceSynced) {
  const bool applied = GetParam() == WalReply::kApplied;
  testing_storage::ScopedTempDir dir("wal_reply");
  test::RunningCoordinator job(OneServer());
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  ServerOptions so;
  so.coordinator = job.endpoint();
  so.server_id = 0;
  so.store.kind = "rocksdb";
  so.store.data_dir = dir.path() + "/data/server-0";
  so.store.file_system = fs;
  so.store.wal_per_update = true;
  so.store.wal_group_commit = true;
  so.wal_reply = GetParam();
  so.heartbeat_ms = 100;
  auto server = Server::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  std::thread serving([&] { (*server)->Run().IgnoreError(); });
  {
    ClientOptions cli;
    cli.coordinator = job.endpoint();
    auto client = Client::Connect(cli);
    ASSERT_TRUE(client.ok()) << client.status();
    constexpr size_t kSize = 100;
    ASSERT_TRUE((*client)->CreateTable(Counters(kSize)).ok());
    FloatBuffer grads(kSize);
    for (size_t i = 0; i < kSize; ++i) grads[i] = -1.0f;  // Adds 1 with SGD, lr 1.
    ASSERT_TRUE((*client)->Push("w", 0, grads).get().ok());

    fs->HoldSyncs(true, "RELAXPS_DENSE_LOG");
    std::future<Status> pushed = (*client)->Push("w", 0, grads);
    if (applied) {
      // Answered with the sync still at the disk, and the loop answers on.
      ASSERT_EQ(pushed.wait_for(std::chrono::seconds(20)), std::future_status::ready);
      EXPECT_TRUE(pushed.get().ok());
      for (int i = 0; fs->held_syncs() == 0; ++i) {
        ASSERT_LT(i, 20000) << "no background sync reached the disk";
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_GE(test::ServerStatsOf((*server)->endpoint()).replies_before_sync(), 1u);
    } else {
      // Not answered while the disk holds the sync.
      EXPECT_EQ(pushed.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
    }
    fs->HoldSyncs(false);
    if (!applied) {
      EXPECT_TRUE(pushed.get().ok());
    }

    // Both pushes are in the state.
    FloatBuffer out(kSize);
    ASSERT_TRUE((*client)->Pull("w", 0, out).get().ok());
    EXPECT_EQ(out[0], 2.0f);
    EXPECT_EQ(out[kSize - 1], 2.0f);
    const wire::ServerStats stats = test::ServerStatsOf((*server)->endpoint());
    EXPECT_TRUE(stats.durable());
    if (applied) {
      EXPECT_GE(stats.replies_before_sync(), 2u);
    } else {
      EXPECT_EQ(stats.replies_before_sync(), 0u);
    }
  }
  (*server)->Stop();
  serving.join();
}

INSTANTIATE_TEST_SUITE_P(Modes, WalReplyTest,
                         ::testing::Values(WalReply::kApplied, WalReply::kDurable),
                         [](const ::testing::TestParamInfo<WalReply>& info) {
                           return std::string(info.param == WalReply::kApplied ? "Applied"
                                                                                : "Durable");
                         });

}  // namespace
}  // namespace relaxps
