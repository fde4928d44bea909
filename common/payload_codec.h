// Payload codec: float tensors on the wire, as fp32 or fp16 frames.
//
// The one copy of the rules for payload frames, used by the client (requests
// it sends, replies it reads) and the server (requests it reads, replies it
// sends): sizes are checked against the expected element count, fp16 is
// converted on the host (F16C when the CPU has it, an exact portable loop
// otherwise; both round to nearest even and agree bit for bit with the
// kernels' conversion), and a frame whose bytes are not float-aligned is
// copied instead of read in place. The codec needs no kernels/ (no BLAS).
//
// Thread-safety: pure functions; safe from any thread.
#ifndef RELAXPS_COMMON_PAYLOAD_CODEC_H_
#define RELAXPS_COMMON_PAYLOAD_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "common/wire.h"

namespace relaxps {

// Host fp16 conversion of n values (round to nearest even).
void FloatToHalf(const float* in, uint16_t* out, size_t n);
void HalfToFloat(const uint16_t* in, float* out, size_t n);

// True when none of the n values is NaN or +-Inf (a branch-free scan that
// vectorizes, with an AVX2 copy; the CPU device's AllFinite).
bool AllFinite(const float* x, size_t n);

// Validates that `frame` holds exactly n values in `encoding` and returns a
// pointer to n fp32 values: the frame itself for aligned fp32, `scratch`
// (resized) after conversion or an unaligned copy. InvalidArgument for an
// unknown encoding or a wrong size. Values are not checked for NaN/Inf.
StatusOr<const float*> DecodeFloats(const Frame& frame, size_t n, wire::Encoding encoding,
                                    std::vector<float>* scratch);

// Like DecodeFloats, but writes the n values to `out`.
Status DecodeFloatsInto(const Frame& frame, wire::Encoding encoding, float* out, size_t n);

// A payload frame for `values` in `encoding` (zero-copy for fp32).
Frame EncodeFloats(const FloatBuffer& values, wire::Encoding encoding);

}  // namespace relaxps

#endif  // RELAXPS_COMMON_PAYLOAD_CODEC_H_
