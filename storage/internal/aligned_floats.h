// AlignedFloats: a fixed-size, 64-byte aligned float array with sole
// ownership. Used for the in-memory arrays of dense shards so that vectorized
// optimizer kernels see cache-line aligned slots.
//
// An array of at least kHugeBytes is aligned to 2 MiB and advised to use
// transparent huge pages (madvise MADV_HUGEPAGE, where the kernel has them
// in "madvise" or "always" mode; nothing changes otherwise): a page fault
// or a TLB (or a VM's shadow page table) entry then covers 2 MiB instead of
// 4 KiB. Measured on the 2-core VM (docs/elastic.md "Benchmark"): the kernel
// sending 256 MiB straight out of such an array the first time took 160 ms
// instead of 803 ms with 4 KiB pages (a range move's pieces leave so).
//
// Thread-safety: a plain value type; not synchronized.
#ifndef RELAXPS_STORAGE_INTERNAL_ALIGNED_FLOATS_H_
#define RELAXPS_STORAGE_INTERNAL_ALIGNED_FLOATS_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace relaxps {
namespace storage_internal {

class AlignedFloats {
 public:
  static constexpr size_t kAlignment = 64;

  AlignedFloats() = default;
  // n uninitialized floats. Throws std::bad_alloc on failure (callers at the
  // module edge turn it into a Status).
  static constexpr size_t kHugeBytes = size_t{4} << 20;
  static constexpr size_t kHugePage = size_t{2} << 20;

  explicit AlignedFloats(size_t n) : size_(n) {
    const size_t align = n * sizeof(float) >= kHugeBytes ? kHugePage : kAlignment;
    size_t bytes = (n * sizeof(float) + align - 1) / align * align;
    if (bytes == 0) bytes = kAlignment;
    void* p = std::aligned_alloc(align, bytes);
    if (p == nullptr) throw std::bad_alloc();
    // Advice only: an error (no THP in this kernel) leaves 4 KiB pages.
    if (align == kHugePage) (void)madvise(p, bytes, MADV_HUGEPAGE);
    data_.reset(static_cast<float*>(p));
  }

  float* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, FreeDeleter> data_;
  size_t size_ = 0;
};

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_ALIGNED_FLOATS_H_
