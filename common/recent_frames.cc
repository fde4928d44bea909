#include "common/recent_frames.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace relaxps {
namespace {

// glibc gives each thread arena heaps of 64 MiB (HEAP_MAX_SIZE on 64-bit),
// aligned to their size: frames in one such region came from one heap.
constexpr int kRegionBits = 26;

uintptr_t Region(const void* p) { return reinterpret_cast<uintptr_t>(p) >> kRegionBits; }

}  // namespace

void RecentFrames::Hold(Message* msg) {
  for (Frame& f : msg->frames) {
    if (!f.OwnsReceivedMessage() || f.size() < options_.min_bytes ||
        f.size() >= options_.max_bytes) {
      continue;
    }
    const void* data = f.data();
    auto it = std::find_if(held_.begin(), held_.end(), [data](const Buffer<uint8_t>& h) {
      return Region(h.data()) == Region(data);
    });
    if (it == held_.end()) {
      held_bytes_ += f.size();
      held_.push_back(f.ShareBytes());
      continue;
    }
    // The region's pin moves to the back (seen most recently); a frame
    // above it replaces it, and the old pin goes back to malloc below the
    // new one.
    Buffer<uint8_t> pin = std::move(*it);
    held_.erase(it);
    if (data > static_cast<const void*>(pin.data())) {
      held_bytes_ += f.size();
      held_bytes_ -= pin.bytes();
      pin = f.ShareBytes();
    }
    held_.push_back(std::move(pin));
  }
  while (held_.size() > 1 &&
         (held_.size() > options_.frames || held_bytes_ > options_.max_held_bytes)) {
    held_bytes_ -= held_.front().bytes();
    held_.pop_front();
  }
}

void RecentFrames::Clear() {
  held_.clear();
  held_bytes_ = 0;
}

}  // namespace relaxps
