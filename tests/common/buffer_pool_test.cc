#include "common/buffer_pool.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(BufferPoolTest, ReleasedBufferIsHandedOutAgain) {
  BufferPool pool;
  float* first = nullptr;
  {
    FloatBuffer b = pool.Acquire<float>(kMiB / sizeof(float));
    ASSERT_EQ(b.size(), kMiB / sizeof(float));
    first = b.data();
    b[0] = 1.0f;
    b[b.size() - 1] = 2.0f;  // Every element is addressable.
  }
  FloatBuffer again = pool.Acquire<float>(kMiB / sizeof(float));
  EXPECT_EQ(again.data(), first);
  const BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.acquired, 2u);
  EXPECT_EQ(s.mapped, 1u);
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.cached_bytes, 0u);
}

TEST(BufferPoolTest, MappedBuffersStartHalfAPagePastAPageBoundary) {
  // Not on the boundary: the kernel copies a page-aligned ZeroMQ frame into
  // its socket at half speed (include/relaxps/buffer.h).
  BufferPool pool;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  std::vector<Buffer<uint8_t>> held;  // Each from a block of its own.
  for (size_t bytes : {size_t{64} << 10, kMiB + 12, 3 * kMiB + 4, size_t{64} << 10}) {
    held.push_back(pool.Acquire<uint8_t>(bytes));
    const auto at = reinterpret_cast<uintptr_t>(held.back().data());
    EXPECT_EQ(at % page, kLargeBufferPageOffset) << bytes;
    held.back()[0] = 1;
    held.back()[bytes - 1] = 2;  // The whole class is mapped behind the offset.
  }
}

TEST(BufferTest, LargeBuffersStartHalfAPagePastAPageBoundary) {
  const size_t large = kLargeBufferBytes / sizeof(float);
  for (size_t n : {large, 4 * kMiB + 3}) {
    FloatBuffer zeroed(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(zeroed.data()) % 4096, kLargeBufferPageOffset) << n;
    EXPECT_TRUE(std::all_of(zeroed.begin(), zeroed.end(), [](float v) { return v == 0.0f; }));
    FloatBuffer raw = FloatBuffer::Uninitialized(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(raw.data()) % 4096, kLargeBufferPageOffset) << n;
    std::fill(raw.begin(), raw.end(), 1.0f);  // Every element is addressable.
    FloatBuffer tail = raw.Slice(n - 2, 2);
    raw = FloatBuffer();
    EXPECT_EQ(tail[1], 1.0f) << "a slice keeps the allocation alive";
  }
  // Small buffers and element types that need construction keep new[].
  FloatBuffer small(large - 1);
  EXPECT_EQ(small.size(), large - 1);
  Buffer<std::string> names(kLargeBufferBytes);
  EXPECT_TRUE(names[kLargeBufferBytes - 1].empty());
}

TEST(BufferPoolTest, SimilarSizesShareAClassAndSlicesKeepTheBufferAlive) {
  BufferPool pool;
  FloatBuffer slice;
  {
    FloatBuffer b = pool.Acquire<float>(kMiB / sizeof(float) + 3);
    slice = b.Slice(10, 5);
  }
  EXPECT_EQ(pool.stats().cached_bytes, 0u) << "a live slice must keep its buffer out of the pool";
  slice = FloatBuffer();
  EXPECT_GT(pool.stats().cached_bytes, 0u);
  FloatBuffer b = pool.Acquire<float>(kMiB / sizeof(float) + 100);  // Same size class.
  EXPECT_EQ(pool.stats().reused, 1u);
}

TEST(BufferPoolTest, SmallRequestsBypassThePool) {
  BufferPoolOptions o;
  o.min_pooled_bytes = 64 << 10;
  BufferPool pool(o);
  { FloatBuffer b = pool.Acquire<float>(100); ASSERT_EQ(b.size(), 100u); }
  EXPECT_EQ(pool.stats().acquired, 0u);
  EXPECT_TRUE(pool.Acquire<float>(0).empty());
}

TEST(BufferPoolTest, SmallPooledClassesAreReusedAndAligned) {
  // A server pools replies from 4 KiB on (server_impl.h): below 64 KiB the
  // blocks come from malloc once, and are then handed out again.
  BufferPoolOptions o;
  o.min_pooled_bytes = 4096;
  BufferPool pool(o);
  std::vector<float*> first;
  {
    std::vector<FloatBuffer> held;
    for (size_t n : {size_t{1024}, size_t{1500}, size_t{4096}}) {
      held.push_back(pool.Acquire<float>(n));
      first.push_back(held.back().data());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(first.back()) % 64, 0u) << n;
      std::fill(held.back().data(), held.back().data() + n, 1.0f);  // All addressable.
    }
  }
  EXPECT_EQ(pool.stats().mapped, 3u);
  EXPECT_EQ(pool.stats().cached_bytes, size_t{4096} + 8192 + 16384);
  for (int round = 0; round < 3; ++round) {
    FloatBuffer a = pool.Acquire<float>(1024);
    FloatBuffer b = pool.Acquire<float>(4096);
    EXPECT_EQ(a.data(), first[0]);
    EXPECT_EQ(b.data(), first[2]);
  }
  const BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.mapped, 3u);
  EXPECT_EQ(s.reused, 6u);
}

TEST(BufferPoolTest, CachedBytesStayUnderTheCap) {
  BufferPoolOptions o;
  o.max_cached_bytes = 2 * kMiB;
  BufferPool pool(o);
  {
    std::vector<Buffer<uint8_t>> held;
    for (int i = 0; i < 4; ++i) held.push_back(pool.Acquire<uint8_t>(kMiB));
  }
  const BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.cached_bytes, 2 * kMiB);
  EXPECT_EQ(s.unmapped, 2u);
}

TEST(BufferPoolTest, BufferMayOutliveThePoolAndBeReleasedOnAnotherThread) {
  Buffer<uint8_t> survivor;
  {
    BufferPool pool;
    survivor = pool.Acquire<uint8_t>(kMiB);
    survivor[0] = 7;
  }
  EXPECT_EQ(survivor[0], 7);
  std::thread([b = std::move(survivor)]() mutable { b = Buffer<uint8_t>(); }).join();
}

// A burst: 8 replies of 1 MiB in flight at once, then none. The first trim
// only starts the count for a class that is new since; the second frees all
// eight (they sat unused through a whole period).
TEST(BufferPoolTest, TrimIdleFreesWhatABurstLeftBehind) {
  BufferPool pool;
  {
    std::vector<FloatBuffer> burst;
    for (int i = 0; i < 8; ++i) burst.push_back(pool.Acquire<float>(kMiB / sizeof(float)));
  }
  EXPECT_EQ(pool.stats().cached_bytes, 8 * kMiB);
  EXPECT_EQ(pool.TrimIdle(), 0u);
  EXPECT_EQ(pool.stats().cached_bytes, 8 * kMiB);
  EXPECT_EQ(pool.TrimIdle(), 8 * kMiB);
  const BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.trimmed_bytes, 8 * kMiB);
  EXPECT_EQ(s.unmapped, 8u);
  // The pool still works: a fresh buffer is mapped.
  FloatBuffer again = pool.Acquire<float>(kMiB / sizeof(float));
  EXPECT_EQ(pool.stats().mapped, 9u);
}

// Steady use of 2 buffers after a burst of 6: each trim frees only the
// buffers no Acquire needed since the previous one, oldest first, and the
// two in use are reused rather than mapped again.
TEST(BufferPoolTest, TrimIdleKeepsWhatSteadyUseReuses) {
  BufferPool pool;
  {
    std::vector<Buffer<uint8_t>> burst;
    for (int i = 0; i < 6; ++i) burst.push_back(pool.Acquire<uint8_t>(kMiB));
  }
  EXPECT_EQ(pool.TrimIdle(), 0u);
  auto step = [&pool] {  // Two replies in flight, then released.
    Buffer<uint8_t> a = pool.Acquire<uint8_t>(kMiB);
    Buffer<uint8_t> b = pool.Acquire<uint8_t>(kMiB);
    a[0] = b[0] = 1;
  };
  for (int i = 0; i < 10; ++i) step();
  EXPECT_EQ(pool.TrimIdle(), 4 * kMiB);  // 6 cached, never fewer than 4.
  EXPECT_EQ(pool.stats().cached_bytes, 2 * kMiB);
  for (int i = 0; i < 10; ++i) step();
  EXPECT_EQ(pool.TrimIdle(), 0u);  // Both were handed out in between.
  const BufferPoolStats s = pool.stats();
  EXPECT_EQ(s.cached_bytes, 2 * kMiB);
  EXPECT_EQ(s.mapped, 6u);
  EXPECT_EQ(s.reused, 40u);
  // Idle from now on: the last two go after one more period.
  EXPECT_EQ(pool.TrimIdle(), 2 * kMiB);
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
}

// Small pooled classes (malloc'd, below 64 KiB) are trimmed the same way.
TEST(BufferPoolTest, TrimIdleFreesSmallClassesToo) {
  BufferPoolOptions o;
  o.min_pooled_bytes = 4096;
  BufferPool pool(o);
  {
    std::vector<Buffer<uint8_t>> burst;
    for (int i = 0; i < 3; ++i) burst.push_back(pool.Acquire<uint8_t>(4096));
    for (int i = 0; i < 2; ++i) burst.push_back(pool.Acquire<uint8_t>(kMiB));
  }
  EXPECT_EQ(pool.TrimIdle(), 0u);
  EXPECT_EQ(pool.TrimIdle(), 3 * 4096 + 2 * kMiB);
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
}

}  // namespace
}  // namespace relaxps
