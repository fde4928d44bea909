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
#include <new>
#include <type_traits>
#include <vector>

namespace relaxps {

// Where large payload buffers start: half a 4 KiB page past a page boundary.
// ZeroMQ hands a large frame to the kernel from inside the frame (its first
// few KiB go out in ZeroMQ's 8 KiB batch, after the frames before it), and
// the kernel copies it into socket pages that start on a page boundary. When
// the frame starts on a page boundary too, as glibc's mmapped allocations and
// any page-aligned buffer do, the copy reads each byte a few dozen bytes
// below the 4 KiB offset it last wrote, and the CPU takes those loads for
// dependent on the stores (4K aliasing): the kernel's copy of a 1 MiB frame
// took 800 us instead of 300 (docs/benchmarks.md, ninth stop). Half a page
// in, the copy is clear of that window whatever precedes the frame. Buffers
// from Buffer(n) / Uninitialized(n) of at least kLargeBufferBytes, and the
// server's and client's pooled payloads (common/buffer_pool.h), start there.
inline constexpr size_t kLargeBufferBytes = size_t{64} << 10;
inline constexpr size_t kAliasingPeriodBytes = 4096;  // Loads and stores alias mod this.
inline constexpr size_t kLargeBufferPageOffset = kAliasingPeriodBytes / 2;

template <typename T>
class Buffer {
 public:
  // An empty buffer.
  Buffer() = default;

  // n value-initialized (zeroed) elements.
  explicit Buffer(size_t n) : Buffer(Allocate(n, /*zeroed=*/true)) {}

  // n elements left uninitialized, for buffers about to be overwritten
  // (saves a pass of zeroing over large payloads).
  static Buffer Uninitialized(size_t n) { return Allocate(n, /*zeroed=*/false); }

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
  static Buffer Allocate(size_t n, bool zeroed) {
    Buffer b;
    if (n == 0) return b;
    if constexpr (std::is_trivially_default_constructible_v<T> &&
                  std::is_trivially_destructible_v<T> && alignof(T) <= 64) {
      constexpr size_t kPage = kAliasingPeriodBytes;
      if (n >= kLargeBufferBytes / sizeof(T) && n <= (SIZE_MAX - 2 * kPage) / sizeof(T)) {
        // Whole pages with room for the offset; the data starts that far in.
        const size_t bytes = (n * sizeof(T) + kLargeBufferPageOffset + kPage - 1) / kPage * kPage;
        void* base = std::aligned_alloc(kPage, bytes);
        if (base == nullptr) throw std::bad_alloc();
        b.data_ = reinterpret_cast<T*>(static_cast<char*>(base) + kLargeBufferPageOffset);
        b.owner_ = std::shared_ptr<T[]>(b.data_, [base](T*) { std::free(base); });
        b.size_ = n;
        if (zeroed) std::memset(static_cast<void*>(b.data_), 0, n * sizeof(T));
        return b;
      }
    }
    b.owner_ = zeroed ? std::shared_ptr<T[]>(new T[n]()) : std::shared_ptr<T[]>(new T[n]);
    b.data_ = b.owner_.get();
    b.size_ = n;
    return b;
  }

  std::shared_ptr<T[]> owner_;
  T* data_ = nullptr;
  size_t size_ = 0;
};

using FloatBuffer = Buffer<float>;
using KeyBuffer = Buffer<uint64_t>;

}  // namespace relaxps

#endif  // RELAXPS_BUFFER_H_
