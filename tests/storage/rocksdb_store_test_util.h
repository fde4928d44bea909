// Fixtures shared by the RocksDbStore tests: table specs, deterministic
// values, and a store opened (optionally) through a given file system.
#ifndef RELAXPS_TESTS_STORAGE_ROCKSDB_STORE_TEST_UTIL_H_
#define RELAXPS_TESTS_STORAGE_ROCKSDB_STORE_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "storage/param_store.h"

namespace relaxps {
namespace testing_storage {

inline Initializer Uniform(uint64_t seed, uint64_t end) {
  Initializer init;
  init.seed = seed;
  init.segments.push_back({0, end, InitKind::kUniform, -0.5f, 0.5f});
  return init;
}

inline DenseShardSpec DenseSpec(uint64_t begin = 0, uint64_t end = 40000, int slots = 3) {
  // 40000 keys: three 64 KiB chunks, the last one partial.
  return {"w", begin, end, slots, Uniform(11, 1 << 20), 0.125f};
}

inline SparseTableSpec SparseSpec(uint32_t width = 8, int slots = 2) {
  return {"emb", width, slots, Uniform(5, width), 0.0f};
}

inline std::unique_ptr<ParamStore> OpenStore(const std::string& dir, size_t cache_mb = 64,
                                      bool wal = false,
                                      std::shared_ptr<rocksdb::FileSystem> fs = nullptr) {
  ParamStoreOptions o;
  o.file_system = std::move(fs);
  o.kind = "rocksdb";
  o.data_dir = dir;
  o.cache_mb = cache_mb;
  o.wal_per_update = wal;
  StatusOr<std::unique_ptr<ParamStore>> store = NewParamStore(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

// A value that differs per (row, column) and per "version" of the data.
inline float RowValue(uint64_t row, size_t col, int version) {
  return static_cast<float>(row % 10007) * 0.25f + static_cast<float>(col) * 0.001f +
         static_cast<float>(version) * 1000.0f;
}

inline std::vector<float> MakeRows(const std::vector<uint64_t>& ids, size_t row_floats, int version) {
  std::vector<float> rows(ids.size() * row_floats);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (size_t c = 0; c < row_floats; ++c) rows[i * row_floats + c] = RowValue(ids[i], c, version);
  }
  return rows;
}

inline std::vector<float> InitialRow(const SparseTableSpec& spec, uint64_t id) {
  std::vector<float> row(spec.row_floats(), spec.slot_init);
  spec.init.FillRow(id, spec.width, row.data());
  return row;
}

// Writes every value, announcing the write first as a writer must.
inline void SetDense(ParamStore* store, DenseShard* shard, int version) {
  store->BeforeDenseWrite(shard);
  for (size_t s = 0; s < shard->slots.size(); ++s) {
    for (size_t i = 0; i < shard->size(); ++i) shard->slots[s][i] = RowValue(i, s, version);
  }
}

inline void ExpectDense(const DenseShard* shard, int version) {
  for (size_t s = 0; s < shard->slots.size(); ++s) {
    for (size_t i = 0; i < shard->size(); ++i) {
      ASSERT_EQ(shard->slots[s][i], RowValue(i, s, version)) << "slot " << s << " key " << i;
    }
  }
}

}  // namespace testing_storage
}  // namespace relaxps

#endif  // RELAXPS_TESTS_STORAGE_ROCKSDB_STORE_TEST_UTIL_H_
