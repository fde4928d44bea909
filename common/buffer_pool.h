// BufferPool: reusable, pre-faulted memory for large payloads.
//
// A parameter server moves the same large tensors again and again: every
// pull reply is a fresh snapshot of a shard, handed to ZeroMQ zero-copy and
// released on ZeroMQ's I/O thread when the bytes are on the wire. Taking
// each snapshot from malloc costs an mmap, a page fault per 4 KiB page while
// the snapshot is written, and an munmap when it is freed (glibc returns
// large blocks to the kernel): with two workers this dominated the server's
// profile. The pool keeps released buffers on per-size free lists and hands
// them out again, so a buffer's pages are faulted in once (at creation, with
// MAP_POPULATE) and then reused.
//
// Buffers are Buffer<T>s (common/buffer.h) whose release returns the memory
// to the pool; the pool's state is shared with every buffer it handed out,
// so a buffer may outlive the BufferPool object (it is then freed when
// released). Requests below `min_pooled_bytes` come from new[] as before:
// glibc keeps small blocks in its bins without faulting.
//
// Thread-safety: all methods are safe from any thread; a buffer may be
// released on any thread (ZeroMQ's I/O thread does).
#ifndef RELAXPS_COMMON_BUFFER_POOL_H_
#define RELAXPS_COMMON_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/buffer.h"

namespace relaxps {

struct BufferPoolOptions {
  // Smaller requests bypass the pool (plain new[]). Lower: more requests
  // pooled, more size classes kept; higher: more faults for mid-size payloads,
  // and a malloc per payload. (Pooled classes below 64 KiB are malloc'd once
  // and then reused; from 64 KiB they are mapped.)
  size_t min_pooled_bytes = size_t{64} << 10;
  // Most bytes kept on the free lists; a buffer released beyond this is
  // unmapped. Higher: fewer faults under bursts, more resident memory.
  size_t max_cached_bytes = size_t{1} << 30;
  // Populate the pages of a new buffer at mmap time (MAP_POPULATE): one
  // kernel call instead of one fault per page when it is first written.
  bool prefault = true;
};

struct BufferPoolStats {
  uint64_t acquired = 0;       // Pooled buffers handed out.
  uint64_t reused = 0;         // ...of which came from a free list.
  uint64_t mapped = 0;         // ...of which were allocated fresh.
  uint64_t unmapped = 0;       // Buffers freed (over the cap, or by TrimIdle).
  uint64_t trimmed_bytes = 0;  // Bytes TrimIdle freed, in all.
  uint64_t cached_bytes = 0;   // Bytes on the free lists now.
};

class BufferPool {
 public:
  explicit BufferPool(const BufferPoolOptions& options = BufferPoolOptions());
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;
  // Frees the free lists; buffers still in use are freed when released.
  ~BufferPool();

  // `n` uninitialized elements: kLargeBufferPageOffset (half a 4 KiB page)
  // past a page boundary when pooled in a class of at least 64 KiB, as a
  // large Buffer<T> is (include/relaxps/buffer.h), cache-line aligned in a
  // smaller one. Never fails short
  // of the process running out of memory (then it aborts, like new[]).
  template <typename T>
  Buffer<T> Acquire(size_t n) {
    if (n == 0) return Buffer<T>();
    if (n * sizeof(T) < options_.min_pooled_bytes) return Buffer<T>::Uninitialized(n);
    void* block = Take(n * sizeof(T));
    // Two pointers, trivially copied: std::function keeps them in place, so
    // the buffer's reference count is the only allocation (a 4 KiB reply
    // made three: the block's shared_ptr, this closure, the buffer's count).
    return Buffer<T>::Wrap(static_cast<T*>(block), n,
                           [core = core_, block] { Give(core, block); });
  }

  // Frees the cached buffers that went unused since the previous call: per
  // size class, as many as its free list held throughout (the least it held
  // at any time in between), oldest first. What a burst left behind goes
  // back to the kernel by the second call after it; a class in steady use
  // keeps the buffers it hands out again. Returns the bytes freed. Call it
  // every few seconds (the server: from its timer, then TrimFreeMemory()
  // when much was freed: small classes come from malloc).
  size_t TrimIdle();

  BufferPoolStats stats() const;

 private:
  struct Core;
  // A pooled block of at least `bytes` (its class is stored in front of it);
  // Give(core_, block) returns it.
  void* Take(size_t bytes);
  // Returns a block to `core`'s free lists, or frees it; frees `core` with
  // its last block once the BufferPool object is gone. Any thread.
  static void Give(Core* core, void* block);

  const BufferPoolOptions options_;
  // Owned by this object and by every block handed out (Core::outstanding):
  // freed by the last of them.
  Core* const core_;
};

// Tunes glibc's malloc for a process that receives large messages: ZeroMQ
// allocates every received message with malloc, and with glibc's defaults a
// multi-MiB block is mmapped and unmapped per message (a page fault per 4 KiB
// received). Raises the mmap threshold to its maximum (32 MiB) and keeps
// freed memory instead of trimming it. Process-wide: call from main() only.
// A no-op under ASan and TSan, whose allocators ignore mallopt.
void TuneMallocForLargeMessages();

// Gives the free memory at the top of malloc's heaps back to the kernel
// (malloc_trim(0)): after TuneMallocForLargeMessages glibc keeps up to 1 GiB
// of it, so a process calls this where a peer's memory was just freed (a
// member removed, a peer's waiting requests answered). Costs a walk of the
// heap: for rare events, not per message. A no-op under ASan and TSan.
void TrimFreeMemory();

}  // namespace relaxps

#endif  // RELAXPS_COMMON_BUFFER_POOL_H_
