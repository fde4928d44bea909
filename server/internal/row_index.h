// RowIndex: a reusable map from row id to a position, for finding the
// duplicate ids of one sparse request without allocating per row (open
// addressing with linear probing in one array that only grows; Reset is O(1)
// through an epoch stamp per slot).
//
// Thread-safety: not synchronized; one owner.
#ifndef RELAXPS_SERVER_INTERNAL_ROW_INDEX_H_
#define RELAXPS_SERVER_INTERNAL_ROW_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace relaxps {
namespace server_internal {

class RowIndex {
 public:
  // Empties the index and makes room for up to n ids.
  void Reset(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    if (cap > slots_.size()) {
      slots_.assign(cap, Slot{});
      epoch_ = 0;
    }
    mask_ = slots_.size() - 1;
    if (++epoch_ == 0) {  // Wrapped: stale stamps could match again.
      slots_.assign(slots_.size(), Slot{});
      epoch_ = 1;
    }
  }

  // The position of `id`: its earlier one if it was inserted since Reset
  // (second: false), else `pos`, now recorded (second: true).
  // REQUIRES: fewer than n ids inserted since Reset(n).
  std::pair<uint32_t, bool> Insert(uint64_t id, uint32_t pos) {
    for (size_t i = (id * 0x9E3779B97F4A7C15ull) >> 20 & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.epoch != epoch_) {
        s = Slot{id, pos, epoch_};
        return {pos, true};
      }
      if (s.id == id) return {s.pos, false};
    }
  }

 private:
  struct Slot {
    uint64_t id = 0;
    uint32_t pos = 0;
    uint32_t epoch = 0;  // Valid only when equal to epoch_.
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  uint32_t epoch_ = 0;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_ROW_INDEX_H_
