// RowCache: the byte-bounded LRU cache of sparse rows in front of RocksDB.
//
// Each entry holds one row record (all slots) of one table plus a dirty bit.
// The cache only accounts and orders; the store decides what to do with an
// evicted dirty row (write it back). Charged bytes per entry are the row
// data plus kEntryOverheadBytes for the list node, hash node and allocator
// headers, so bytes() tracks the real heap footprint.
//
// Thread-safety: not synchronized; owned by one store.
#ifndef RELAXPS_STORAGE_INTERNAL_ROW_CACHE_H_
#define RELAXPS_STORAGE_INTERNAL_ROW_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

namespace relaxps {
namespace storage_internal {

class RowCache {
 public:
  // Measured on x86-64 glibc: list node (16 + 48) + hash node (~48) + bucket
  // (8) + three malloc headers (48), rounded up.
  static constexpr size_t kEntryOverheadBytes = 176;

  struct Entry {
    uint32_t table_id = 0;
    uint64_t row = 0;
    bool dirty = false;
    size_t floats = 0;
    std::unique_ptr<float[]> data;
  };

  explicit RowCache(size_t budget_bytes) : budget_bytes_(budget_bytes) {}
  RowCache(const RowCache&) = delete;
  RowCache& operator=(const RowCache&) = delete;

  // The entry for (table, row), made most recently used; nullptr on a miss.
  Entry* Lookup(uint32_t table_id, uint64_t row);
  // Inserts an entry with `floats` uninitialized floats as most recently used.
  // REQUIRES: (table, row) is not cached.
  Entry* Insert(uint32_t table_id, uint64_t row, size_t floats);

  bool OverBudget() const { return bytes_ > budget_bytes_; }
  // The least recently used entries whose removal brings bytes() down to
  // target_bytes, oldest first; never the most recently used one. Nothing
  // is removed: the caller writes the dirty ones back, then calls PopLru.
  std::vector<const Entry*> Victims(size_t target_bytes) const;
  // Removes the n least recently used entries.
  void PopLru(size_t n);
  // Removes one entry if cached.
  void Erase(uint32_t table_id, uint64_t row);
  // Calls fn on every dirty entry (which it may mark clean).
  void ForEachDirty(const std::function<void(Entry&)>& fn);
  // Calls fn for every entry.
  void ForEach(const std::function<void(const Entry&)>& fn) const;
  // Drops every entry without callbacks.
  void Clear();

  size_t budget_bytes() const { return budget_bytes_; }
  size_t bytes() const { return bytes_; }
  size_t size() const { return index_.size(); }
  uint64_t evictions() const { return evictions_; }

 private:
  struct KeyHash {
    size_t operator()(const std::pair<uint32_t, uint64_t>& k) const {
      uint64_t h = k.second * 0x9e3779b97f4a7c15ULL ^ (uint64_t{k.first} << 32 | k.first);
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  static size_t Charge(size_t floats) { return floats * sizeof(float) + kEntryOverheadBytes; }

  // Constant after construction.
  const size_t budget_bytes_;
  // Front = most recently used.
  std::list<Entry> lru_;
  std::unordered_map<std::pair<uint32_t, uint64_t>, std::list<Entry>::iterator, KeyHash> index_;
  size_t bytes_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_ROW_CACHE_H_
