#include "common/buffer_pool.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "common/thread_annotations.h"

namespace relaxps {
namespace {

size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Size classes: 4 per power of two (at most 25% slack), rounded to pages,
// so payloads of similar sizes share a free list.
size_t ClassBytes(size_t bytes) {
  size_t pow2 = PageBytes();
  while (pow2 * 2 <= bytes) pow2 *= 2;
  const size_t step = std::max(pow2 / 4, PageBytes());
  return (bytes + step - 1) / step * step;
}

// Classes below this come from malloc, above it from mmap. A small block
// gains nothing from its own mapping (its pages are in glibc's heap, already
// faulted in), and mappings of a few pages each would only add VMAs; what
// pooling it saves is the allocation itself (see min_pooled_bytes). The
// mapped ones are the large payloads, offset as a large Buffer<T> is.
constexpr size_t kMinMappedBytes = kLargeBufferBytes;
constexpr size_t kSmallBlockAlign = 64;  // A cache line.

// Every block keeps its class in the 8 bytes before it (a small block is
// allocated a cache line larger; a mapped one starts
// kLargeBufferPageOffset into its mapping), so that its release needs only
// the block's address.
size_t& ClassOf(void* block) { return static_cast<size_t*>(block)[-1]; }

void* NewBlock(size_t bytes, bool prefault) {
  if (bytes < kMinMappedBytes) {
    void* p = std::aligned_alloc(kSmallBlockAlign, kSmallBlockAlign + bytes);
    CHECK(p != nullptr) << "BufferPool: allocation of " << bytes << " bytes failed";
    return static_cast<char*>(p) + kSmallBlockAlign;
  }
  // A page more than the class, the buffer kLargeBufferPageOffset into it
  // (include/relaxps/buffer.h says why: a page-aligned payload is copied
  // into the socket at half speed).
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (prefault ? MAP_POPULATE : 0);
  void* p = mmap(nullptr, bytes + PageBytes(), PROT_READ | PROT_WRITE, flags, -1, 0);
  CHECK(p != MAP_FAILED) << "BufferPool: mmap of " << bytes << " bytes failed";
  return static_cast<char*>(p) + kLargeBufferPageOffset;
}

void DeleteBlock(void* p, size_t bytes) {
  if (bytes < kMinMappedBytes) {
    std::free(static_cast<char*>(p) - kSmallBlockAlign);
  } else {
    munmap(static_cast<char*>(p) - kLargeBufferPageOffset, bytes + PageBytes());
  }
}

}  // namespace

struct BufferPool::Core {
  explicit Core(const BufferPoolOptions& o) : options(o) {}
  ~Core() {
    for (auto& [bytes, list] : free_lists) {
      for (void* p : list.blocks) DeleteBlock(p, bytes);
    }
  }

  void* Take(size_t bytes) {
    {
      MutexLock l(&mu);
      ++stats.acquired;
      ++outstanding;
      auto it = free_lists.find(bytes);
      if (it != free_lists.end() && !it->second.blocks.empty()) {
        FreeList& list = it->second;
        void* p = list.blocks.back();
        list.blocks.pop_back();
        list.low_water = std::min(list.low_water, list.blocks.size());
        stats.cached_bytes -= bytes;
        ++stats.reused;
        return p;
      }
      ++stats.mapped;
    }
    void* p = NewBlock(bytes, options.prefault);
    ClassOf(p) = bytes;
    return p;
  }

  // Returns whether this Core is to be deleted now (its pool is gone and
  // this was its last block).
  bool Give(void* p) {
    const size_t bytes = ClassOf(p);
    bool last;
    {
      MutexLock l(&mu);
      --outstanding;
      if (!closed && stats.cached_bytes + bytes <= options.max_cached_bytes) {
        free_lists[bytes].blocks.push_back(p);
        stats.cached_bytes += bytes;
        return false;
      }
      ++stats.unmapped;
      last = closed && outstanding == 0;
    }
    DeleteBlock(p, bytes);
    return last;
  }

  const BufferPoolOptions options;
  mutable Mutex mu;
  bool closed GUARDED_BY(mu) = false;  // The BufferPool object is gone.
  size_t outstanding GUARDED_BY(mu) = 0;  // Blocks handed out, not given back.
  struct FreeList {
    std::vector<void*> blocks;  // Oldest released first (Take hands out the newest).
    // The fewest blocks held since the last TrimIdle (0 for a class that got
    // its first block since).
    size_t low_water = 0;
  };
  std::map<size_t, FreeList> free_lists GUARDED_BY(mu);  // By class.
  BufferPoolStats stats GUARDED_BY(mu);
};

BufferPool::BufferPool(const BufferPoolOptions& options)
    : options_(options), core_(new Core(options)) {}

BufferPool::~BufferPool() {
  std::map<size_t, Core::FreeList> lists;
  bool last;
  {
    MutexLock l(&core_->mu);
    core_->closed = true;
    lists.swap(core_->free_lists);
    core_->stats.cached_bytes = 0;
    last = core_->outstanding == 0;
  }
  for (auto& [bytes, list] : lists) {
    for (void* p : list.blocks) DeleteBlock(p, bytes);
  }
  if (last) delete core_;  // Otherwise the last block given back frees it.
}

void* BufferPool::Take(size_t bytes) { return core_->Take(ClassBytes(bytes)); }

void BufferPool::Give(Core* core, void* block) {
  if (core->Give(block)) delete core;
}

size_t BufferPool::TrimIdle() {
  std::vector<std::pair<size_t, std::vector<void*>>> idle;  // (class, blocks).
  size_t freed = 0;
  {
    MutexLock l(&core_->mu);
    for (auto& [bytes, list] : core_->free_lists) {
      std::vector<void*>& blocks = list.blocks;
      const size_t n = std::min(list.low_water, blocks.size());
      if (n > 0) {
        idle.emplace_back(bytes, std::vector<void*>(blocks.begin(), blocks.begin() + n));
        blocks.erase(blocks.begin(), blocks.begin() + n);
        freed += n * bytes;
        core_->stats.unmapped += n;
      }
      list.low_water = blocks.size();
    }
    core_->stats.cached_bytes -= freed;
    core_->stats.trimmed_bytes += freed;
  }
  for (auto& [bytes, blocks] : idle) {
    for (void* p : blocks) DeleteBlock(p, bytes);
  }
  return freed;
}

BufferPoolStats BufferPool::stats() const {
  MutexLock l(&core_->mu);
  return core_->stats;
}

void TuneMallocForLargeMessages() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer's allocator replaces glibc's and ignores mallopt: nothing
  // to tune, and nothing to warn about.
  return;
#endif
  // 32 MiB is glibc's largest mmap threshold on 64-bit (HEAP_MAX_SIZE / 2).
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1) LOG(WARNING) << "mallopt(M_MMAP_THRESHOLD) failed";
  // Keep up to 1 GiB of freed memory at the top of the heaps instead of
  // returning it to the kernel after every large message.
  if (mallopt(M_TRIM_THRESHOLD, 1 << 30) != 1) LOG(WARNING) << "mallopt(M_TRIM_THRESHOLD) failed";
}

void TrimFreeMemory() {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  malloc_trim(0);
#endif
}

}  // namespace relaxps
