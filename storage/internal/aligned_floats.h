// AlignedFloats: a fixed-size, 64-byte aligned float array with sole
// ownership. Used for the in-memory arrays of dense shards so that vectorized
// optimizer kernels see cache-line aligned slots.
//
// Thread-safety: a plain value type; not synchronized.
#ifndef RELAXPS_STORAGE_INTERNAL_ALIGNED_FLOATS_H_
#define RELAXPS_STORAGE_INTERNAL_ALIGNED_FLOATS_H_

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
  explicit AlignedFloats(size_t n) : size_(n) {
    size_t bytes = (n * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
    if (bytes == 0) bytes = kAlignment;
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
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
