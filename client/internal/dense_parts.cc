#include "client/internal/dense_parts.h"

#include <algorithm>

namespace relaxps {
namespace client_internal {

void CoalesceByServer(std::vector<DenseSlice>* slices) {
  if (slices->size() < 2) return;
  size_t out = 0;
  for (size_t i = 1; i < slices->size(); ++i) {
    DenseSlice& last = (*slices)[out];
    const DenseSlice& s = (*slices)[i];
    if (s.server == last.server && s.begin == last.begin + last.count) {
      last.count += s.count;
    } else {
      (*slices)[++out] = s;
    }
  }
  slices->resize(out + 1);
}

uint64_t NumSplitParts(uint64_t count, uint64_t split_at, uint64_t part) {
  if (part == 0 || count <= split_at) return 1;
  return std::min<uint64_t>(kMaxSplitParts, (count + part - 1) / part);
}

void SplitDenseParts(uint64_t split_keys, uint64_t part_keys, std::vector<DenseSlice>* slices,
                     std::vector<bool>* continues) {
  continues->clear();
  if (std::none_of(slices->begin(), slices->end(),
                   [split_keys](const DenseSlice& s) { return s.count > split_keys; })) {
    return;
  }
  std::vector<DenseSlice> parts;
  std::vector<bool> later;
  for (const DenseSlice& s : *slices) {
    const uint64_t n = NumSplitParts(s.count, split_keys, part_keys);
    // Boundaries as offsets within the slice: even shares, each rounded
    // down so that the key it starts at is aligned, unless that would not
    // leave every part at least one key.
    std::vector<uint64_t> at(n + 1);
    at[0] = 0;
    at[n] = s.count;
    for (uint64_t i = 1; i < n; ++i) {
      const uint64_t even = s.count * i / n;
      const uint64_t key = s.begin + even;
      const uint64_t down = key - key % kDensePartAlignKeys;
      at[i] = down > s.begin + at[i - 1] ? down - s.begin : even;
    }
    // Strictly increasing: the even shares are (n <= count), and a rounded
    // boundary is taken only above the one before.
    for (uint64_t i = 0; i < n; ++i) {
      DenseSlice p = s;
      p.begin = s.begin + at[i];
      p.offset = s.offset + at[i];
      p.count = at[i + 1] - at[i];
      parts.push_back(p);
      later.push_back(i > 0);
    }
  }
  slices->swap(parts);
  continues->swap(later);
}

}  // namespace client_internal
}  // namespace relaxps
