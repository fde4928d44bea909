// WriteTracker: which fixed-size chunks of a span of a dense range were
// written since it was last taken (a range move's copy phase,
// docs/elastic.md "One move"): the source copies the span while it serves
// it, and then sends again only the chunks written meanwhile. One bit per
// chunk; marking a write is a few shifts per chunk it touches.
//
// Thread-safety: not synchronized; the server's loop thread only.
#ifndef RELAXPS_SERVER_INTERNAL_WRITE_TRACKER_H_
#define RELAXPS_SERVER_INTERNAL_WRITE_TRACKER_H_

#include <cstdint>
#include <vector>

namespace relaxps {
namespace server_internal {

class WriteTracker {
 public:
  // Offsets [offset, offset + count) of the tracked span.
  struct Run {
    uint64_t offset;
    uint64_t count;
  };

  // Tracks offsets [begin, end) (in the shard's keys) in chunks of
  // `chunk_keys` keys from `begin` (the last may be shorter), none written.
  // REQUIRES: begin < end, chunk_keys > 0.
  WriteTracker(uint64_t begin, uint64_t end, uint64_t chunk_keys);

  // Keys [offset, offset + n) of the shard were written (any part of them
  // outside the span is ignored).
  void Mark(uint64_t offset, uint64_t n);
  // Every key of the span was written.
  void MarkAll() { Mark(begin_, end_ - begin_); }

  // The written chunks, as runs of adjacent chunks in ascending order
  // (offsets relative to the span's begin), and forgets them.
  std::vector<Run> Take();
  // Keys in the written chunks now.
  uint64_t written_keys() const;

  uint64_t begin() const { return begin_; }
  uint64_t end() const { return end_; }

 private:
  uint64_t ChunkKeys(uint64_t chunk) const;

  // Constant after construction.
  const uint64_t begin_;
  const uint64_t end_;
  const uint64_t chunk_keys_;
  const uint64_t num_chunks_;

  std::vector<uint64_t> bits_;  // Bit c: chunk c written.
  uint64_t written_chunks_ = 0;
  bool last_written_ = false;  // The last (maybe shorter) chunk is written.
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_WRITE_TRACKER_H_
