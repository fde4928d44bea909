// Buffer<T>: a shared, reference-counted, sliceable array for tensor payloads.
//
// Tensor data travels between the client library, the transport and ZeroMQ
// without copies: a Buffer (or a slice of one) handed to the transport keeps
// the memory alive until ZeroMQ has sent it, through the refcount (the
// ps-lite SArray idea). Slices share ownership with their parent.
//
// Thread-safety: copying and destroying Buffers from several threads is safe
// (shared_ptr refcount); writing the same elements concurrently is not.
#ifndef RELAXPS_BUFFER_H_
#define RELAXPS_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

namespace relaxps {

template <typename T>
class Buffer {
 public:
  // An empty buffer.
  Buffer() = default;

  // n value-initialized (zeroed) elements.
  explicit Buffer(size_t n)
      : owner_(n ? std::shared_ptr<T[]>(new T[n]()) : nullptr), data_(owner_.get()), size_(n) {}

  // n elements left uninitialized, for buffers about to be overwritten
  // (saves a pass of zeroing over large payloads).
  static Buffer Uninitialized(size_t n) {
    Buffer b;
    if (n) {
      b.owner_ = std::shared_ptr<T[]>(new T[n]);
      b.data_ = b.owner_.get();
      b.size_ = n;
    }
    return b;
  }

  // Copies `n` elements from `src`.
  static Buffer CopyOf(const T* src, size_t n) {
    Buffer b = Uninitialized(n);
    if (n) std::memcpy(b.data_, src, n * sizeof(T));
    return b;
  }
  static Buffer CopyOf(const std::vector<T>& v) { return CopyOf(v.data(), v.size()); }

  // Wraps memory owned elsewhere; `release` runs when the last reference
  // (including any in flight in the transport) is gone.
  static Buffer Wrap(T* data, size_t n, std::function<void()> release) {
    Buffer b;
    b.owner_ = std::shared_ptr<T[]>(data, [release = std::move(release)](T*) {
      if (release) release();
    });
    b.data_ = data;
    b.size_ = n;
    return b;
  }

  // A view of [offset, offset + n) sharing ownership.
  // REQUIRES: offset + n <= size().
  Buffer Slice(size_t offset, size_t n) const {
    if (offset > size_ || n > size_ - offset) {
      std::fprintf(stderr, "relaxps: Buffer::Slice(%zu, %zu) out of range (size %zu)\n", offset,
                   n, size_);
      std::abort();
    }
    Buffer b = *this;
    b.data_ = data_ + offset;
    b.size_ = n;
    return b;
  }

  T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) const { return data_[i]; }
  T* begin() const { return data_; }
  T* end() const { return data_ + size_; }

  // The shared owner, for transports that must keep the memory alive.
  const std::shared_ptr<T[]>& owner() const { return owner_; }

 private:
  std::shared_ptr<T[]> owner_;
  T* data_ = nullptr;
  size_t size_ = 0;
};

using FloatBuffer = Buffer<float>;
using KeyBuffer = Buffer<uint64_t>;

}  // namespace relaxps

#endif  // RELAXPS_BUFFER_H_
