#include "storage/internal/row_cache.h"

#include <glog/logging.h>

namespace relaxps {
namespace storage_internal {

RowCache::Entry* RowCache::Lookup(uint32_t table_id, uint64_t row) {
  auto it = index_.find({table_id, row});
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return &*it->second;
}

RowCache::Entry* RowCache::Insert(uint32_t table_id, uint64_t row, size_t floats) {
  Entry e;
  e.table_id = table_id;
  e.row = row;
  e.floats = floats;
  e.data.reset(new float[floats]);
  lru_.push_front(std::move(e));
  bool inserted = index_.emplace(std::make_pair(table_id, row), lru_.begin()).second;
  CHECK(inserted) << "RowCache::Insert of a cached row " << table_id << "/" << row;
  bytes_ += Charge(floats);
  return &lru_.front();
}

std::vector<const RowCache::Entry*> RowCache::Victims(size_t target_bytes) const {
  std::vector<const Entry*> victims;
  size_t bytes = bytes_;
  for (auto it = lru_.rbegin(); bytes > target_bytes && it != lru_.rend(); ++it) {
    if (std::next(it) == lru_.rend()) break;  // Keep the most recently used entry.
    victims.push_back(&*it);
    bytes -= Charge(it->floats);
  }
  return victims;
}

void RowCache::PopLru(size_t n) {
  for (size_t i = 0; i < n && !lru_.empty(); ++i) {
    Entry& e = lru_.back();
    bytes_ -= Charge(e.floats);
    index_.erase({e.table_id, e.row});
    lru_.pop_back();
    ++evictions_;
  }
}

void RowCache::Erase(uint32_t table_id, uint64_t row) {
  auto it = index_.find({table_id, row});
  if (it == index_.end()) return;
  bytes_ -= Charge(it->second->floats);
  lru_.erase(it->second);
  index_.erase(it);
}

void RowCache::ForEachDirty(const std::function<void(Entry&)>& fn) {
  for (Entry& e : lru_) {
    if (e.dirty) fn(e);
  }
}

void RowCache::ForEach(const std::function<void(const Entry&)>& fn) const {
  for (const Entry& e : lru_) fn(e);
}

void RowCache::Clear() {
  index_.clear();
  lru_.clear();
  bytes_ = 0;
}

}  // namespace storage_internal
}  // namespace relaxps
