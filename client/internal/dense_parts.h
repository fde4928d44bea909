// How a dense request's slices become parts: the slices of adjacent ranges
// of one server merged into one (CoalesceByServer), and a large request cut
// into parts sent in flight at once: a dense request's slice for one server
// (client/internal/data_path.cc, SendDense) and a row pull's positions for
// one server.
//
// A part is a request of its own: the server checks and applies part k (and
// copies its reply) while part k + 1 is still on the wire, and the client
// copies reply k into the caller's buffer while reply k + 1 arrives; the
// request completes when every part has. Parts after the first of a push
// carry wire::Header.push_continues (one optimizer step for all of them).
//
// Dense parts start on multiples of kDensePartAlignKeys in the table's key
// space: shard ranges are whole 4096-key chunks, so every part then starts
// on a 4 KiB boundary of the shard's aligned arrays (the optimizer's vector
// loops and the reply copy run on aligned, page-aligned memory, and a part
// never shares a page with the next one) and at the same distance from a
// page boundary in the caller's buffers as the whole request.
//
// Pure functions; thread-compatible.
#ifndef RELAXPS_CLIENT_INTERNAL_DENSE_PARTS_H_
#define RELAXPS_CLIENT_INTERNAL_DENSE_PARTS_H_

#include <cstdint>
#include <vector>

#include "common/shard_map.h"

namespace relaxps {
namespace client_internal {

// At most this many parts per server and request: a server queues at most
// --max_queued_replies (128) replies per client and drops the rest, so
// splitting may multiply a client's requests in flight to one server only by
// a small factor (32 parts of 512 KiB per 16 MiB request, 8 requests in
// flight, hung the bench).
inline constexpr uint64_t kMaxSplitParts = 8;
// Dense part boundaries fall on multiples of this many keys (4 KiB).
inline constexpr uint64_t kDensePartAlignKeys = 1024;

// Merges each run of consecutive slices with the same server (adjacent
// ranges of one server: SplitDense gives them in key order) into one slice
// covering the run: one request per server and logical request, which the
// server applies range by range (docs/elastic.md, "One request per
// server"). A merged slice keeps the range_begin and range_end of the range
// its first key lies in: a slice spans several ranges iff
// begin + count > range_end. Only for unreplicated ranges: under chain
// routing each range goes to its own chain's head.
void CoalesceByServer(std::vector<DenseSlice>* slices);

// How many parts `count` items go as: 1 up to split_at (or with part 0),
// else about count / part, at most kMaxSplitParts.
uint64_t NumSplitParts(uint64_t count, uint64_t split_at, uint64_t part);

// Replaces every slice of more than split_keys keys by about part_keys-key
// parts (NumSplitParts), consecutive and covering it exactly, each boundary
// inside it rounded down to a multiple of kDensePartAlignKeys (a slice too
// small for that keeps unaligned boundaries: parts are never empty).
// (*continues)[i]: part i is a later part of a split slice; empty when
// nothing was split (the common case allocates nothing).
void SplitDenseParts(uint64_t split_keys, uint64_t part_keys, std::vector<DenseSlice>* slices,
                     std::vector<bool>* continues);

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_DENSE_PARTS_H_
