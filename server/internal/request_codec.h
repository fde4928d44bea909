// Server-side checks of data requests that are not float payloads (those are
// common/payload_codec's): the row-id frame of sparse requests and the clock
// field. Every check compares sizes against the header's counts without
// overflow, so a malformed request gets InvalidArgument, never an
// out-of-bounds read or a signed overflow later.
//
// Pure functions; safe to call from any thread with distinct scratch vectors.
#ifndef RELAXPS_SERVER_INTERNAL_REQUEST_CODEC_H_
#define RELAXPS_SERVER_INTERNAL_REQUEST_CODEC_H_

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "common/wire.h"

namespace relaxps {
namespace server_internal {

// Validates the row-id frame of a sparse request: exactly `key_count` > 0
// little-endian uint64 ids. Returns the ids (the frame itself, or `scratch`
// holding a copy of a misaligned frame). InvalidArgument otherwise.
StatusOr<const uint64_t*> DecodeRowIds(const Frame& frame, uint64_t key_count,
                                       std::vector<uint64_t>* scratch);

// Largest worker clock a request may carry: far beyond any training run,
// and far enough from INT64_MAX that clock + 1 and the consistency
// arithmetic on clocks cannot overflow.
inline constexpr int64_t kMaxRequestClock = int64_t{1} << 62;

// InvalidArgument unless 0 <= clock <= kMaxRequestClock.
Status CheckClock(int64_t clock);

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_REQUEST_CODEC_H_
