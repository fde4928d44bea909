// A sparse table whose rows total 4x --cache_mb trains and reads back
// correctly through a real server process, whose peak RSS (VmHWM) stays under
// 2x the cache budget + 150 MB and below the size of the table itself.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/recovery/recovery_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr int kCacheMb = 16;
constexpr uint32_t kWidth = 128;  // 512 bytes of parameters per row.
constexpr uint64_t kRows = 200000;  // 98 MiB of parameters: > 4 x 16 MiB.
constexpr uint64_t kBatch = 2000;

float Gradient(uint64_t id, int pass) { return -static_cast<float>((id % 13 + 1) * (pass + 1)); }

TEST(SparseRssTest, TableFourTimesTheCacheTrainsWithBoundedRss) {
  ASSERT_GE(kRows * kWidth * sizeof(float), 4ull * kCacheMb << 20);
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, RecoveryCluster::Start(dir, 1, {}));
  ASSERT_OK(cluster->StartServer(0, {"--store=rocksdb", "--cache_mb=" + std::to_string(kCacheMb)}));
  ASSERT_OK_AND_ASSIGN(auto client, cluster->Connect("worker"));
  TableOptions t;
  t.name = "big";
  t.type = TableType::kSparse;
  t.row_width = kWidth;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;
  ASSERT_OK(client->CreateTable(t));

  // Two passes over every row (scattered order), then read everything back.
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t b = 0; b < kRows; b += kBatch) {
      KeyBuffer ids(kBatch);
      FloatBuffer g(kBatch * kWidth);
      for (uint64_t i = 0; i < kBatch; ++i) {
        const uint64_t id = ((b + i) * 7919) % kRows;  // 7919 is prime, coprime with kRows.
        ids[i] = id;
        for (uint32_t k = 0; k < kWidth; ++k) g[i * kWidth + k] = Gradient(id, pass);
      }
      ASSERT_OK(client->PushRows("big", ids, g).get());
    }
    ASSERT_OK(client->Clock());
  }
  uint64_t wrong = 0;
  for (uint64_t b = 0; b < kRows; b += kBatch) {
    KeyBuffer ids(kBatch);
    for (uint64_t i = 0; i < kBatch; ++i) ids[i] = b + i;
    FloatBuffer out(kBatch * kWidth);
    ASSERT_OK(client->PullRows("big", ids, out).get());
    for (uint64_t i = 0; i < kBatch; ++i) {
      const float expect = -(Gradient(b + i, 0) + Gradient(b + i, 1));
      for (uint32_t k = 0; k < kWidth; ++k) {
        if (out[i * kWidth + k] != expect && ++wrong <= 5) {
          ADD_FAILURE() << "row " << b + i << " col " << k << " = " << out[i * kWidth + k]
                        << ", expected " << expect;
        }
      }
    }
  }
  EXPECT_EQ(wrong, 0u);
  const int64_t hwm_kb = PeakRssKb(cluster->server(0)->pid());
  const int64_t budget_kb = (2 * kCacheMb + 150) * 1024;
  std::printf("sparse table: %llu rows x %u floats = %.1f MiB of parameters, cache_mb=%d; "
              "server VmHWM = %.1f MiB (budget %.0f MiB)\n",
              static_cast<unsigned long long>(kRows), kWidth,
              kRows * kWidth * 4.0 / (1 << 20), kCacheMb, hwm_kb / 1024.0, budget_kb / 1024.0);
  ASSERT_GT(hwm_kb, 0);
  if (!kSanitizerInflatesMemory) {
    EXPECT_LT(hwm_kb, budget_kb);
    // The rows cannot all have been held in memory at once.
    EXPECT_LT(hwm_kb * 1024.0, kRows * kWidth * 4.0);
  }
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
