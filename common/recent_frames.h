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
// The pin keeps pages from going back; the heap still grows whenever more
// frames are alive at once than ever before (the reader descheduled while a
// reply's parts arrive), one frame's pages at a time: 256 faults for a 1 MiB
// part, records of a random pile that kept coming for minutes (a 2x2 client
// pulling 16 MiB in 1 MiB parts: heap growths at 16, 17, 18 frames alive,
// the last after 9,700 frames), and a rare small block ZeroMQ's thread
// carves out of a free part's place costs one more. Warming ends that. A
// burst is the replies received while requests are outstanding (the caller
// says when none is: EndBurst()). A region whose heap was never grown to its
// largest burst plus a quarter (at least two frames more: the pin, a carved
// place) keeps the frames it receives, across bursts, until it has that
// many bytes kept at once; the burst that reaches it ends by giving them
// back to malloc below the pin, where later bursts find their pages. At most
// max_held_bytes are kept (a burst that never ends: pipelined requests);
// a region that cannot reach its target under that cap stops trying.
//
// Thread-compatible: one reader thread at a time (RpcClient's io_mu_).
#ifndef RELAXPS_COMMON_RECENT_FRAMES_H_
#define RELAXPS_COMMON_RECENT_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

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
    // Most bytes held by pins (the newest pin excepted), and most bytes of
    // a burst kept while it warms its region.
    size_t max_held_bytes = size_t{32} << 20;
    // Whether a burst larger than its region's warmth is kept until it ends.
    bool warm_to_burst = true;
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
  // No request is outstanding: the kept frames of each region that reached
  // its target (or cannot) go back to malloc, below the region's pin.
  void EndBurst();
  // Drops everything held.
  void Clear();

  size_t held_frames() const { return held_.size(); }
  size_t held_bytes() const { return held_bytes_; }
  size_t warming_bytes() const { return warming_bytes_; }

 private:
  struct Region {
    uintptr_t id = 0;          // Address / 64 MiB.
    Buffer<uint8_t> pin;       // The highest-addressed frame seen in it.
    size_t burst = 0;          // Bytes the current burst brought into it.
    size_t max_burst = 0;      // The most bytes one burst brought into it.
    size_t largest_frame = 0;
    size_t kept = 0;           // Bytes kept in warming_ now.
    size_t warmth = 0;         // The most bytes it had kept at once, given back.
    bool capped = false;       // A frame could not be kept (max_held_bytes).

    size_t Target() const;
  };
  struct Kept {
    uintptr_t region;
    Buffer<uint8_t> bytes;
  };

  // Gives back region `id`'s kept frames.
  void Release(uintptr_t id);

  const Options options_;
  std::deque<Region> held_;  // One per region, seen least recently first.
  size_t held_bytes_ = 0;    // Bytes of the pins.
  std::vector<Kept> warming_;
  size_t warming_bytes_ = 0;
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_RECENT_FRAMES_H_
