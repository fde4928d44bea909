#include "common/recent_frames.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace relaxps {
namespace {

// glibc gives each thread arena heaps of 64 MiB (HEAP_MAX_SIZE on 64-bit),
// aligned to their size: frames in one such region came from one heap.
constexpr int kRegionBits = 26;

uintptr_t RegionOf(const void* p) { return reinterpret_cast<uintptr_t>(p) >> kRegionBits; }

}  // namespace

size_t RecentFrames::Region::Target() const {
  return max_burst + std::max(max_burst / 4, 2 * largest_frame);
}

void RecentFrames::Hold(Message* msg) {
  for (Frame& f : msg->frames) {
    if (!f.OwnsReceivedMessage() || f.size() < options_.min_bytes ||
        f.size() >= options_.max_bytes) {
      continue;
    }
    const void* data = f.data();
    const uintptr_t id = RegionOf(data);
    auto it = std::find_if(held_.begin(), held_.end(),
                           [id](const Region& r) { return r.id == id; });
    Region region;
    if (it == held_.end()) {
      held_bytes_ += f.size();
      region.id = id;
      region.pin = f.ShareBytes();
    } else {
      // The region moves to the back (seen most recently); a frame above
      // its pin replaces it, and the old pin goes back to malloc below the
      // new one (unless it is kept).
      region = std::move(*it);
      held_.erase(it);
      if (data > static_cast<const void*>(region.pin.data())) {
        held_bytes_ += f.size();
        held_bytes_ -= region.pin.bytes();
        region.pin = f.ShareBytes();
      }
    }
    region.burst += f.size();
    region.max_burst = std::max(region.max_burst, region.burst);
    region.largest_frame = std::max(region.largest_frame, f.size());
    if (options_.warm_to_burst && !region.capped && region.warmth < region.Target() &&
        region.kept < region.Target()) {
      if (warming_bytes_ + f.size() <= options_.max_held_bytes) {
        warming_bytes_ += f.size();
        region.kept += f.size();
        warming_.push_back(Kept{id, f.ShareBytes()});
      } else {
        region.capped = true;
      }
    }
    held_.push_back(std::move(region));
  }
  while (held_.size() > 1 &&
         (held_.size() > options_.frames || held_bytes_ > options_.max_held_bytes)) {
    held_bytes_ -= held_.front().pin.bytes();
    Release(held_.front().id);
    held_.pop_front();
  }
}

void RecentFrames::EndBurst() {
  for (Region& r : held_) {
    r.burst = 0;
    if (r.kept > 0 && (r.kept >= r.Target() || r.capped)) {
      r.warmth = std::max(r.warmth, r.kept);
      Release(r.id);
      r.kept = 0;
    }
  }
}

void RecentFrames::Release(uintptr_t id) {
  auto gone = std::remove_if(warming_.begin(), warming_.end(),
                             [id](const Kept& k) { return k.region == id; });
  for (auto k = gone; k != warming_.end(); ++k) warming_bytes_ -= k->bytes.bytes();
  warming_.erase(gone, warming_.end());
}

void RecentFrames::Clear() {
  held_.clear();
  held_bytes_ = 0;
  warming_.clear();
  warming_bytes_ = 0;
}

}  // namespace relaxps
