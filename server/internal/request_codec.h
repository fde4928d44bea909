// Decoding and encoding of the payload frames of data requests: float
// values (fp32 or fp16 on the wire) and sparse row ids. Every decoder checks
// sizes against the header's counts without overflow, so a malformed request
// gets InvalidArgument, never an out-of-bounds read.
//
// Pure functions; safe to call from any thread with distinct scratch vectors.
#ifndef RELAXPS_SERVER_INTERNAL_REQUEST_CODEC_H_
#define RELAXPS_SERVER_INTERNAL_REQUEST_CODEC_H_

#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "common/wire.h"
#include "kernels/device.h"

namespace relaxps {
namespace server_internal {

// Validates that `frame` holds exactly n values in `encoding`; returns a
// pointer to n fp32 values (the frame itself for fp32, `scratch` after
// conversion for fp16 or a copy of a misaligned frame). InvalidArgument
// otherwise. Values are not checked for NaN/Inf here (the caller does, and
// counts it).
StatusOr<const float*> DecodeFloats(const Frame& frame, uint64_t n, wire::Encoding encoding,
                                    kernels::Device* device, std::vector<float>* scratch);

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

// A payload frame for `values` in `encoding` (zero-copy for fp32).
Frame EncodeFloats(const FloatBuffer& values, wire::Encoding encoding, kernels::Device* device);

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_REQUEST_CODEC_H_
