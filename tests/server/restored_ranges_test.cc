// AssembleRestoredRange (server/internal/restored_ranges.h): the range a map
// gives a server, built from the store shards of a checkpoint taken before a
// range move, or refused naming what is missing.
#include "server/internal/restored_ranges.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace server_internal {
namespace {

// A dense shard of "w" named `name` over [begin, end): slot s of key k holds
// 1000 * s + k (+ 0.5 in `bump`ed shards), with `step` and `clock`.
void AddShard(ParamStore* store, const std::string& name, uint64_t begin, uint64_t end,
              int64_t step, int64_t clock, int slots = 2, bool bump = false) {
  DenseShardSpec spec;
  spec.table = name;
  spec.begin = begin;
  spec.end = end;
  spec.num_slots = slots;
  ASSERT_OK_AND_ASSIGN(DenseShard * shard, store->CreateDense(spec));
  for (int s = 0; s < slots; ++s) {
    for (uint64_t k = begin; k < end; ++k) {
      shard->slots[s][k - begin] = 1000.0f * s + static_cast<float>(k) + (bump ? 0.5f : 0.0f);
    }
  }
  shard->step = step;
  shard->clock = clock;
}

DenseShardSpec Target(uint64_t begin, uint64_t end) {
  DenseShardSpec spec;
  spec.table = "w@" + std::to_string(begin) + "-" + std::to_string(end);
  spec.begin = begin;
  spec.end = end;
  spec.num_slots = 2;
  return spec;
}

TEST(RestoredRangesTest, ARangeSpanningPartsOfTwoShardsGetsEveryKeyAndSlot) {
  std::unique_ptr<ParamStore> store = NewMemoryStore();
  AddShard(store.get(), "w", 0, 100, /*step=*/7, /*clock=*/7);
  AddShard(store.get(), "w@100-200", 100, 200, 7, 7);
  ASSERT_OK(AssembleRestoredRange(store.get(), "w", Target(50, 150)));
  DenseShard* got = store->GetDense("w@50-150");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->step, 7);
  EXPECT_EQ(got->clock, 7);
  size_t wrong = 0;
  for (int s = 0; s < 2; ++s) {
    for (uint64_t k = 50; k < 150; ++k) wrong += got->slots[s][k - 50] != 1000.0f * s + k;
  }
  EXPECT_EQ(wrong, 0u);
}

TEST(RestoredRangesTest, TheNewestOfOverlappingShardsWins) {
  std::unique_ptr<ParamStore> store = NewMemoryStore();
  // A range split after an older checkpoint left its old shard behind.
  AddShard(store.get(), "w", 0, 200, /*step=*/3, /*clock=*/3);
  AddShard(store.get(), "w@0-100", 0, 100, 9, 9, 2, /*bump=*/true);
  ASSERT_OK(AssembleRestoredRange(store.get(), "w", Target(0, 50)));
  DenseShard* got = store->GetDense("w@0-50");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->step, 9);
  EXPECT_EQ(got->slots[1][10], 1010.5f);
}

TEST(RestoredRangesTest, KeysThatWereOnAnotherServerAreRefusedByName) {
  std::unique_ptr<ParamStore> store = NewMemoryStore();
  AddShard(store.get(), "w@100-200", 100, 200, 7, 7);
  Status s = AssembleRestoredRange(store.get(), "w", Target(0, 150));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("lacks keys [0, 100)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("taken before a range move"), std::string::npos) << s;
  EXPECT_EQ(store->GetDense("w@0-150"), nullptr);  // Nothing half made.
}

TEST(RestoredRangesTest, ShardsWithDifferentStepsOrSlotsAreNotJoined) {
  std::unique_ptr<ParamStore> store = NewMemoryStore();
  AddShard(store.get(), "w", 0, 100, 7, 7);
  AddShard(store.get(), "w@100-200", 100, 200, 8, 8);
  Status s = AssembleRestoredRange(store.get(), "w", Target(50, 150));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("step 8"), std::string::npos) << s;

  std::unique_ptr<ParamStore> other = NewMemoryStore();
  AddShard(other.get(), "w", 0, 100, 7, 7, /*slots=*/3);
  s = AssembleRestoredRange(other.get(), "w", Target(0, 50));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("3 slot(s)"), std::string::npos) << s;
}

TEST(RestoredRangesTest, ATableTheCheckpointLacksIsLeftToItsInitializer) {
  std::unique_ptr<ParamStore> store = NewMemoryStore();
  AddShard(store.get(), "other", 0, 100, 1, 1);
  AddShard(store.get(), "wide", 0, 100, 1, 1);  // Shares a prefix, not the table.
  ASSERT_OK(AssembleRestoredRange(store.get(), "w", Target(0, 50)));
  EXPECT_EQ(store->GetDense("w@0-50"), nullptr);
}

}  // namespace
}  // namespace server_internal
}  // namespace relaxps
