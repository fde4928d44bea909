#include <algorithm>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "storage/param_store.h"

namespace relaxps {
namespace {


Initializer UniformInit(uint64_t seed, uint64_t size) {
  Initializer init;
  init.seed = seed;
  init.segments.push_back({0, size, InitKind::kUniform, -1.0f, 1.0f});
  return init;
}

TEST(MemoryStoreTest, DenseInitializedFromInitializerAndSlotInit) {
  auto store = NewMemoryStore();
  EXPECT_STREQ(store->Name(), "memory");
  DenseShardSpec spec{"w", 10, 110, 3, UniformInit(7, 1000), 0.5f};
  StatusOr<DenseShard*> shard = store->CreateDense(spec);
  ASSERT_TRUE(shard.ok()) << shard.status();
  ASSERT_EQ((*shard)->size(), 100u);
  ASSERT_EQ((*shard)->slots.size(), 3u);
  std::vector<float> expect(100);
  spec.init.Fill(10, 100, expect.data());
  for (size_t i = 0; i < 100; ++i) {
    EXPECT_EQ((*shard)->slots[0][i], expect[i]) << i;
    EXPECT_EQ((*shard)->slots[1][i], 0.5f);
    EXPECT_EQ((*shard)->slots[2][i], 0.5f);
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*shard)->slots[0]) % 64, 0u);
  // Values vary (really from the uniform initializer, not zeros).
  EXPECT_NE((*shard)->slots[0][0], (*shard)->slots[0][1]);
  EXPECT_EQ(store->GetDense("w"), *shard);
  EXPECT_EQ(store->GetDense("nope"), nullptr);
}

TEST(MemoryStoreTest, CreateDenseIsIdempotentAndRejectsOtherShapes) {
  auto store = NewMemoryStore();
  DenseShardSpec spec{"w", 0, 8, 2, UniformInit(1, 8), 0.0f};
  StatusOr<DenseShard*> a = store->CreateDense(spec);
  ASSERT_TRUE(a.ok()) << a.status();
  (*a)->slots[0][3] = 42.0f;
  StatusOr<DenseShard*> b = store->CreateDense(spec);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ((*b)->slots[0][3], 42.0f);
  DenseShardSpec other = spec;
  other.end = 9;
  EXPECT_EQ(store->CreateDense(other).status().code(), StatusCode::kInvalidArgument);
  other = spec;
  other.num_slots = 3;
  EXPECT_EQ(store->CreateDense(other).status().code(), StatusCode::kInvalidArgument);
  DenseShardSpec empty{"e", 5, 5, 1, {}, 0.0f};
  EXPECT_EQ(store->CreateDense(empty).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->DenseUpdated(*a, 4, 5).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(store->DenseUpdated(*a, 4, 4).ok());
}

// Enough rows to grow the id index many times and fill several row blocks:
// every row keeps its own values, and peeks of absent ids create nothing.
TEST(MemoryStoreTest, ManySparseRowsKeepTheirValues) {
  auto store = NewMemoryStore();
  SparseTableSpec spec{"emb", 3, 1, UniformInit(3, 3), 0.0f};
  ASSERT_TRUE(store->CreateSparse(spec).ok());
  constexpr size_t kRows = 20000;
  std::vector<uint64_t> ids(kRows);
  std::vector<float> rows(kRows * 3);
  for (size_t i = 0; i < kRows; ++i) {
    ids[i] = (i * 2654435761ull) << 16;  // Spread ids whose low bits are all zero.
    for (int c = 0; c < 3; ++c) rows[i * 3 + c] = static_cast<float>(i) + 0.25f * c;
  }
  ASSERT_TRUE(store->WriteRows("emb", ids.data(), kRows, rows.data()).ok());
  EXPECT_EQ(*store->NumRows("emb"), kRows);
  std::vector<float> back(kRows * 3);
  ASSERT_TRUE(store->PeekRows("emb", ids.data(), kRows, back.data()).ok());
  EXPECT_EQ(back, rows);
  const uint64_t absent = 7;
  std::vector<float> peeked(3), expect(3);
  ASSERT_TRUE(store->PeekRows("emb", &absent, 1, peeked.data()).ok());
  spec.init.FillRow(absent, 3, expect.data());
  EXPECT_EQ(peeked, expect);
  EXPECT_EQ(*store->NumRows("emb"), kRows);
}

TEST(MemoryStoreTest, SparseRowIdsListsTheRowsThatExist) {
  auto store = NewMemoryStore();
  SparseTableSpec spec{"emb", 2, 1, UniformInit(3, 2), 0.0f};
  ASSERT_TRUE(store->CreateSparse(spec).ok());
  std::vector<uint64_t> ids;
  ASSERT_TRUE(store->SparseRowIds("emb", &ids).ok());
  EXPECT_TRUE(ids.empty());
  const uint64_t written[] = {9, 1ull << 50, 3};
  std::vector<float> rows(3 * 2, 1.0f);
  ASSERT_TRUE(store->WriteRows("emb", written, 3, rows.data()).ok());
  const uint64_t peeked = 11;  // A peek creates nothing.
  ASSERT_TRUE(store->PeekRows("emb", &peeked, 1, rows.data()).ok());
  ASSERT_TRUE(store->SparseRowIds("emb", &ids).ok());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<uint64_t>{3, 9, 1ull << 50}));
  EXPECT_EQ(store->SparseRowIds("nope", &ids).code(), StatusCode::kNotFound);
}

TEST(MemoryStoreTest, SparseRowsCreatedOnFirstTouchAndWritable) {
  auto store = NewMemoryStore();
  SparseTableSpec spec{"emb", 4, 2, UniformInit(3, 4), 0.25f};
  ASSERT_TRUE(store->CreateSparse(spec).ok());
  ASSERT_TRUE(store->CreateSparse(spec).ok());  // Idempotent.
  SparseTableSpec other = spec;
  other.width = 5;
  EXPECT_EQ(store->CreateSparse(other).code(), StatusCode::kInvalidArgument);
  ASSERT_NE(store->GetSparse("emb"), nullptr);
  EXPECT_EQ(store->GetSparse("emb")->width, 4u);

  const uint64_t ids[] = {5, 1ull << 40};
  std::vector<float> rows(2 * 8);
  ASSERT_TRUE(store->ReadRows("emb", ids, 2, rows.data()).ok());
  EXPECT_EQ(*store->NumRows("emb"), 2u);
  std::vector<float> expect(4);
  spec.init.FillRow(ids[1], 4, expect.data());
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(rows[8 + c], expect[c]);
    EXPECT_EQ(rows[8 + 4 + c], 0.25f);
  }
  for (float& v : rows) v += 1.0f;
  ASSERT_TRUE(store->WriteRows("emb", ids, 2, rows.data()).ok());
  std::vector<float> back(16);
  ASSERT_TRUE(store->ReadRows("emb", ids, 2, back.data()).ok());
  EXPECT_EQ(back, rows);
  EXPECT_EQ(*store->NumRows("emb"), 2u);

  EXPECT_EQ(store->ReadRows("nope", ids, 1, back.data()).code(), StatusCode::kNotFound);
  EXPECT_EQ(store->WriteRows("nope", ids, 1, back.data()).code(), StatusCode::kNotFound);
  EXPECT_EQ(store->NumRows("nope").status().code(), StatusCode::kNotFound);
}

// UpdateRowsInPlace hands out each row (a missing one initialized first)
// and leaves the store as ReadRows + the same changes + WriteRows does.
TEST(MemoryStoreTest, RowsUpdatedInPlaceMatchReadThenWrite) {
  auto in_place = NewMemoryStore();
  auto copied = NewMemoryStore();
  SparseTableSpec spec{"emb", 4, 2, UniformInit(3, 4), 0.25f};
  ASSERT_TRUE(in_place->CreateSparse(spec).ok());
  ASSERT_TRUE(copied->CreateSparse(spec).ok());
  ASSERT_TRUE(in_place->UpdatesRowsInPlace());
  const uint64_t first[] = {5, 1ull << 40};
  const uint64_t second[] = {7, 5};  // One new row, one already there.
  for (const uint64_t* ids : {first, second}) {
    auto change = [](size_t i, float* row) {
      for (int c = 0; c < 8; ++c) row[c] = row[c] * 0.5f + static_cast<float>(i + c);
    };
    std::vector<uint64_t> visited;
    ASSERT_TRUE(in_place
                    ->UpdateRowsInPlace("emb", ids, 2,
                                        [&](size_t i, float* row) {
                                          visited.push_back(i);
                                          change(i, row);
                                        })
                    .ok());
    EXPECT_EQ(visited, (std::vector<uint64_t>{0, 1}));
    std::vector<float> rows(2 * 8);
    ASSERT_TRUE(copied->ReadRows("emb", ids, 2, rows.data()).ok());
    for (size_t i = 0; i < 2; ++i) change(i, rows.data() + i * 8);
    ASSERT_TRUE(copied->WriteRows("emb", ids, 2, rows.data()).ok());
  }
  const uint64_t all[] = {5, 1ull << 40, 7};
  std::vector<float> a(3 * 8), b(3 * 8);
  ASSERT_TRUE(in_place->PeekRows("emb", all, 3, a.data()).ok());
  ASSERT_TRUE(copied->PeekRows("emb", all, 3, b.data()).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(*in_place->NumRows("emb"), 3u);
  EXPECT_EQ(in_place->UpdateRowsInPlace("nope", all, 1, [](size_t, float*) {}).code(),
            StatusCode::kNotFound);
}

TEST(MemoryStoreTest, FlushIsNoOpAndCheckpointUnavailable) {
  auto store = NewMemoryStore();
  ASSERT_TRUE(store->CreateSparse({"emb", 2, 1, {}, 0.0f}).ok());
  ASSERT_TRUE(store->CreateDense({"w", 0, 4, 1, {}, 0.0f}).ok());
  EXPECT_TRUE(store->Flush(3).ok());
  Status s = store->Checkpoint(::testing::TempDir() + "/memckpt", 3);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("no durable state"), std::string::npos);
  EXPECT_EQ(store->Tables(), (std::vector<std::string>{"emb", "w"}));
}

TEST(MemoryStoreTest, FactoryPicksKind) {
  ParamStoreOptions options;
  options.kind = "memory";
  auto store = NewParamStore(options);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_STREQ((*store)->Name(), "memory");
  options.kind = "floppy";
  EXPECT_EQ(NewParamStore(options).status().code(), StatusCode::kInvalidArgument);
  options.kind = "rocksdb";  // Without a data_dir.
  EXPECT_EQ(NewParamStore(options).status().code(), StatusCode::kInvalidArgument);
  // The default kind follows data_dir, as relaxps-server's --store does.
  ParamStoreOptions defaults;
  auto by_default = NewParamStore(defaults);
  ASSERT_TRUE(by_default.ok()) << by_default.status();
  EXPECT_STREQ((*by_default)->Name(), "memory");
  defaults.data_dir = "/some/dir";
  EXPECT_EQ(defaults.ResolvedKind(), "rocksdb");
}

}  // namespace
}  // namespace relaxps
