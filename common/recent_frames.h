// RecentFrames: keeps the highest-addressed large received frame of each
// malloc heap alive, so that the memory ZeroMQ receives into stays mapped.
//
// ZeroMQ (libzmq 4.3, which has no allocator hook for received messages)
// mallocs every incoming frame on its I/O thread, from that thread's glibc
// arena, and the frame is freed where its reader drops it. A reply's frames
// are dropped together once their bytes are copied out: megabytes at once
// that coalesce into the free top of the arena's heap, which glibc then gives
// back to the kernel (heap_trim: madvise(MADV_DONTNEED) once the top exceeds
// the trim threshold, twice the largest mapped block freed so far). The next
// reply is received into the same addresses and faults every page in again:
// a client pulling 16 MiB took thousands of minor faults per GB where the
// servers, whose main() raises that threshold, took none (docs/benchmarks.md,
// issue 41). A library may not change malloc's settings for its host
// process; it can choose when it frees. malloc's top is the free end of a
// heap, above every block in use: while the highest-addressed frame of a heap
// is held, a frame freed below it cannot reach the top, goes to malloc's free
// lists, and the next frames of its size reuse its pages. Hold() keeps that
// frame (the pin) per 64 MiB region (glibc's heap size and alignment); a
// frame received above the pin replaces it (the heap grew), and the old pin
// is freed below the new one.
//
// Frames below min_bytes are not held (malloc serves them from its bins
// without trimming), nor frames of max_bytes or more (glibc maps those on
// their own whatever happens). At most `frames` pins are kept, the regions
// seen least recently dropped first (a mapped frame's region sees no other
// frame), and at most max_held_bytes (the newest pin is always kept).
//
// Thread-compatible: one reader thread at a time (RpcClient's io_mu_).
#ifndef RELAXPS_COMMON_RECENT_FRAMES_H_
#define RELAXPS_COMMON_RECENT_FRAMES_H_

#include <cstddef>
#include <deque>

#include "common/buffer.h"
#include "common/wire.h"

namespace relaxps {

class RecentFrames {
 public:
  struct Options {
    // Smaller frames are not held. 64 KiB is where glibc's free() looks at
    // trimming (FASTBIN_CONSOLIDATION_THRESHOLD).
    size_t min_bytes = size_t{64} << 10;
    // Frames this large or larger are not held: glibc maps every block of
    // 32 MiB or more on its own (the largest mmap threshold), so holding
    // one keeps nothing warm.
    size_t max_bytes = size_t{32} << 20;
    // Most pins (regions) held. One heap per receiving I/O thread needs one;
    // more keep a pin through a few frames mapped on their own at start-up
    // (before glibc's threshold rises to their size).
    size_t frames = 8;
    // Most bytes held (the newest pin excepted).
    size_t max_held_bytes = size_t{32} << 20;
  };

  RecentFrames() : RecentFrames(Options()) {}
  explicit RecentFrames(const Options& options) : options_(options) {}
  RecentFrames(const RecentFrames&) = delete;
  RecentFrames& operator=(const RecentFrames&) = delete;

  // For every received frame of `msg` in [min_bytes, max_bytes): shares it
  // (the frame stays valid: Frame::ShareBytes) as its region's pin if it
  // lies above that region's pin or the region has none, then drops the
  // pins of the regions seen least recently beyond the limits. Frames `msg`
  // did not receive (its own buffers) are left alone.
  void Hold(Message* msg);
  // Drops everything held.
  void Clear();

  size_t held_frames() const { return held_.size(); }
  size_t held_bytes() const { return held_bytes_; }

 private:
  const Options options_;
  std::deque<Buffer<uint8_t>> held_;  // One pin per region, seen least recently first.
  size_t held_bytes_ = 0;
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_RECENT_FRAMES_H_
