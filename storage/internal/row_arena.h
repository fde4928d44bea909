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
    if (slots_.empty()) return nullptr;
    for (size_t i = Home(id);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.row == 0) return nullptr;
      if (s.id == id) return RowAt(s.row - 1);
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
  float* RowAt(uint64_t row) {
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

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_ROW_ARENA_H_
