// RowArena: the rows of one in-memory sparse table, by 64-bit id. Rows live
// in blocks of kBlockRows rows (never moved, so pointers stay valid), and
// the id index is one open-addressing array (linear probing, grown at half
// load): a lookup is one probe sequence and no pointer chase, and a new row
// costs no allocation of its own.
//
// Thread-safety: not synchronized; one owner.
#ifndef RELAXPS_STORAGE_INTERNAL_ROW_ARENA_H_
#define RELAXPS_STORAGE_INTERNAL_ROW_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace relaxps {
namespace storage_internal {

class RowArena {
 public:
  explicit RowArena(size_t row_floats) : row_floats_(row_floats) {}

  size_t size() const { return num_rows_; }

  // The row's floats, or nullptr if it does not exist.
  float* Find(uint64_t id) {
    return const_cast<float*>(static_cast<const RowArena*>(this)->Find(id));
  }
  const float* Find(uint64_t id) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = Home(id);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.row == 0) return nullptr;
      if (s.id == id) return RowAt(s.row - 1);
    }
  }

  // Hints for a lookup of `id` coming soon: PrefetchSlot starts loading its
  // probe sequence's first slot; PrefetchRow, once that is in cache, the
  // row's floats (nothing for a missing row). Random ids over a large table
  // miss the cache twice per row (slot, then row), and one miss at a time
  // bounded the sparse path at about 160 ns a row.
  void PrefetchSlot(uint64_t id) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[Home(id)]);
  }
  void PrefetchRow(uint64_t id) const {
    const float* row = Find(id);
    if (row == nullptr) return;
    const char* bytes = reinterpret_cast<const char*>(row);
    for (size_t b = 0; b < row_floats_ * sizeof(float); b += 64) __builtin_prefetch(bytes + b);
  }

  // Calls fn(id) for every row (in no particular order).
  template <typename Fn>
  void ForEachId(Fn fn) const {
    for (const Slot& s : slots_) {
      if (s.row != 0) fn(s.id);
    }
  }

  // The row's floats and false, or a new row's (uninitialized) floats and
  // true.
  std::pair<float*, bool> FindOrInsert(uint64_t id) {
    if (2 * (num_rows_ + 1) > slots_.size()) Grow();
    for (size_t i = Home(id);; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.row == 0) {
        if (num_rows_ % kBlockRows == 0) {
          blocks_.push_back(std::make_unique<float[]>(kBlockRows * row_floats_));
        }
        s = Slot{id, ++num_rows_};
        return {RowAt(num_rows_ - 1), true};
      }
      if (s.id == id) return {RowAt(s.row - 1), false};
    }
  }

 private:
  static constexpr size_t kBlockRows = 4096;
  struct Slot {
    uint64_t id = 0;
    uint64_t row = 0;  // 1 + the row's number; 0: empty.
  };

  size_t Home(uint64_t id) const { return (id * 0x9E3779B97F4A7C15ull) >> 20 & mask_; }
  float* RowAt(uint64_t row) const {
    return blocks_[row / kBlockRows].get() + (row % kBlockRows) * row_floats_;
  }
  void Grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 64 : 2 * old.size(), Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.row == 0) continue;
      size_t i = Home(s.id);
      while (slots_[i].row != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  const size_t row_floats_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t num_rows_ = 0;
  std::vector<std::unique_ptr<float[]>> blocks_;
};

// Calls visit(i) for i in [0, n) with the rows of ids a few places ahead
// already on their way into the cache (RowArena::PrefetchSlot, PrefetchRow).
template <typename Visit>
void ForEachRowPrefetched(const RowArena& rows, const uint64_t* ids, size_t n, Visit visit) {
  constexpr size_t kSlotAhead = 16;
  constexpr size_t kRowAhead = 8;
  for (size_t i = 0; i < n; ++i) {
    if (i + kSlotAhead < n) rows.PrefetchSlot(ids[i + kSlotAhead]);
    if (i + kRowAhead < n) rows.PrefetchRow(ids[i + kRowAhead]);
    visit(i);
  }
}

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_ROW_ARENA_H_
