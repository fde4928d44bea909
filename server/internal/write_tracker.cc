#include "server/internal/write_tracker.h"

#include <algorithm>

namespace relaxps {
namespace server_internal {

WriteTracker::WriteTracker(uint64_t begin, uint64_t end, uint64_t chunk_keys)
    : begin_(begin),
      end_(end),
      chunk_keys_(chunk_keys),
      num_chunks_((end - begin + chunk_keys - 1) / chunk_keys),
      bits_((num_chunks_ + 63) / 64, 0) {}

void WriteTracker::Mark(uint64_t offset, uint64_t n) {
  const uint64_t from = std::max(offset, begin_);
  // min(offset + n, end_) without a sum that wraps.
  const uint64_t to = n >= end_ || offset > end_ - n ? end_ : offset + n;
  if (from >= to) return;
  const uint64_t last = (to - 1 - begin_) / chunk_keys_;
  for (uint64_t c = (from - begin_) / chunk_keys_; c <= last; ++c) {
    uint64_t& word = bits_[c / 64];
    const uint64_t bit = uint64_t{1} << (c % 64);
    if ((word & bit) == 0) {
      word |= bit;
      ++written_chunks_;
      if (c + 1 == num_chunks_) last_written_ = true;
    }
  }
}

uint64_t WriteTracker::ChunkKeys(uint64_t chunk) const {
  return chunk + 1 == num_chunks_ ? end_ - begin_ - chunk * chunk_keys_ : chunk_keys_;
}

uint64_t WriteTracker::written_keys() const {
  if (written_chunks_ == 0) return 0;
  return (written_chunks_ - (last_written_ ? 1 : 0)) * chunk_keys_ +
         (last_written_ ? ChunkKeys(num_chunks_ - 1) : 0);
}

std::vector<WriteTracker::Run> WriteTracker::Take() {
  std::vector<Run> runs;
  if (written_chunks_ == 0) return runs;
  for (uint64_t c = 0; c < num_chunks_; ++c) {
    if ((bits_[c / 64] >> (c % 64) & 1) == 0) continue;
    const uint64_t offset = c * chunk_keys_;
    if (!runs.empty() && runs.back().offset + runs.back().count == offset) {
      runs.back().count += ChunkKeys(c);
    } else {
      runs.push_back(Run{offset, ChunkKeys(c)});
    }
  }
  std::fill(bits_.begin(), bits_.end(), 0);
  written_chunks_ = 0;
  last_written_ = false;
  return runs;
}

}  // namespace server_internal
}  // namespace relaxps
