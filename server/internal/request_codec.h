// Decoding and encoding of float payload frames (fp32 or fp16 on the wire).
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
// conversion for fp16). InvalidArgument otherwise. Values are not checked
// for NaN/Inf here (the caller does, and counts it).
StatusOr<const float*> DecodeFloats(const Frame& frame, size_t n, wire::Encoding encoding,
                                    kernels::Device* device, std::vector<float>* scratch);

// A payload frame for `values` in `encoding` (zero-copy for fp32).
Frame EncodeFloats(const FloatBuffer& values, wire::Encoding encoding, kernels::Device* device);

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_REQUEST_CODEC_H_
