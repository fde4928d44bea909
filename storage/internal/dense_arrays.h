// DenseArrays: the slot arrays of one dense shard (param_store.h), shared by
// the MemoryStore and the RocksDbStore.
//
// The arrays are held through a shared_ptr so that a payload still in
// flight (a range move sends a shard's keys straight out of them:
// ParamStore::PinDense) keeps them allocated after the store let them go.
// A shard shrunk in place (ParamStore::ReshapeDense) keeps its memory until
// ReleaseBeyond gives the pages past its new end back to the system.
//
// Thread-safety: a value type; not synchronized (the store's caller
// serializes use). Pins may be dropped from any thread.
#ifndef RELAXPS_STORAGE_INTERNAL_DENSE_ARRAYS_H_
#define RELAXPS_STORAGE_INTERNAL_DENSE_ARRAYS_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "storage/internal/aligned_floats.h"

namespace relaxps {
namespace storage_internal {

class DenseArrays {
 public:
  DenseArrays() = default;
  // `num_slots` arrays of `n` uninitialized floats. Throws std::bad_alloc
  // (callers at the module edge turn it into a Status).
  DenseArrays(int num_slots, size_t n)
      : arrays_(std::make_shared<std::vector<AlignedFloats>>()), capacity_(n) {
    arrays_->reserve(static_cast<size_t>(num_slots));
    for (int s = 0; s < num_slots; ++s) arrays_->emplace_back(n);
  }

  // The slot pointers, for DenseShard::slots.
  std::vector<float*> slots() const {
    std::vector<float*> out;
    if (arrays_ != nullptr) {
      for (const AlignedFloats& a : *arrays_) out.push_back(a.data());
    }
    return out;
  }
  // Floats per slot the shard may use: its size at allocation, or less after
  // ReleaseBeyond.
  size_t capacity() const { return capacity_; }
  // Keeps the arrays allocated while the handle lives.
  std::shared_ptr<const void> Pin() const { return arrays_; }

  // Gives the whole pages of each slot past its first `n` floats back to the
  // system (the addresses stay valid and read as zeros); capacity() becomes
  // `n`. No-op when n >= capacity().
  void ReleaseBeyond(size_t n) {
    if (arrays_ == nullptr || n >= capacity_) return;
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    for (const AlignedFloats& a : *arrays_) {
      const uintptr_t from = reinterpret_cast<uintptr_t>(a.data() + n);
      const uintptr_t to = reinterpret_cast<uintptr_t>(a.data() + a.size());
      const uintptr_t first = (from + page - 1) / page * page;  // Whole pages only.
      const uintptr_t last = to / page * page;
      if (last > first) {
        // Advice on memory this array owns alone; it cannot fail but for
        // bad arguments, and then the pages stay (only memory is at stake).
        (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
      }
    }
    capacity_ = n;
  }

 private:
  std::shared_ptr<std::vector<AlignedFloats>> arrays_;
  size_t capacity_ = 0;
};

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_DENSE_ARRAYS_H_
