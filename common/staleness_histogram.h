// StalenessHistogram: how many clocks behind the worker's clock updates were
// when a server finally applied them (updates applied late: replayed into a
// restarted server, or trained on a worker's own copy and handed back at the
// re-seed or rejoin). Events carry it (updates_replayed, client_rejoined;
// docs/events.md) so that the experiment report can show it.
//
// Buckets are powers of two: bucket 0 counts updates 0 clocks behind (or
// "ahead": a negative distance), bucket i >= 1 those [2^(i-1), 2^i - 1]
// clocks behind: 0 | 1 | 2-3 | 4-7 | 8-15 | ...
//
// Thread-safety: a value type; not synchronized (the owner's lock guards it).
#ifndef RELAXPS_COMMON_STALENESS_HISTOGRAM_H_
#define RELAXPS_COMMON_STALENESS_HISTOGRAM_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

namespace relaxps {

class StalenessHistogram {
 public:
  // Enough for any int64 distance.
  static constexpr int kBuckets = 64;

  // The bucket of an update `behind` clocks behind.
  static int BucketOf(int64_t behind) {
    if (behind <= 0) return 0;
    return 64 - __builtin_clzll(static_cast<unsigned long long>(behind));
  }

  // Counts `n` updates `behind` clocks behind.
  void Add(int64_t behind, uint64_t n = 1) {
    counts_[BucketOf(behind)] += n;
    total_ += n;
  }
  void Merge(const StalenessHistogram& other) {
    for (int i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    total_ += other.total_;
  }

  uint64_t total() const { return total_; }
  uint64_t count(int bucket) const { return counts_[bucket]; }
  // The counts of buckets 0 up to the last non-empty one (empty when nothing
  // was counted), each at most INT_MAX: the form events carry (EventValue
  // takes lists of int).
  std::vector<int> EventCounts() const {
    int n = kBuckets;
    while (n > 0 && counts_[n - 1] == 0) --n;
    std::vector<int> out(n);
    for (int i = 0; i < n; ++i) {
      out[i] = static_cast<int>(std::min<uint64_t>(counts_[i], std::numeric_limits<int>::max()));
    }
    return out;
  }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t total_ = 0;
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_STALENESS_HISTOGRAM_H_
