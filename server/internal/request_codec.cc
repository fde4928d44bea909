#include "server/internal/request_codec.h"

#include <cstring>

namespace relaxps {
namespace server_internal {

StatusOr<const float*> DecodeFloats(const Frame& frame, size_t n, wire::Encoding encoding,
                                    kernels::Device* device, std::vector<float>* scratch) {
  const size_t elem = encoding == wire::ENC_FP16 ? 2 : encoding == wire::ENC_FP32 ? 4 : 0;
  if (elem == 0) return InvalidArgumentError("unknown payload encoding " + std::to_string(encoding));
  if (frame.size() != n * elem) {
    return InvalidArgumentError("payload of " + std::to_string(frame.size()) +
                                " bytes, expected " + std::to_string(n * elem) + " (" +
                                std::to_string(n) + " values)");
  }
  const float* values;
  if (encoding == wire::ENC_FP16) {
    scratch->resize(n);
    device->HalfToFloat(frame.as<uint16_t>(), scratch->data(), n);
    values = scratch->data();
  } else if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(float) != 0) {
    scratch->resize(n);
    std::memcpy(scratch->data(), frame.data(), n * sizeof(float));
    values = scratch->data();
  } else {
    values = frame.as<float>();
  }
  return values;
}

Frame EncodeFloats(const FloatBuffer& values, wire::Encoding encoding, kernels::Device* device) {
  if (encoding != wire::ENC_FP16) return Frame::Share(values);
  Buffer<uint16_t> half = Buffer<uint16_t>::Uninitialized(values.size());
  device->FloatToHalf(values.data(), half.data(), values.size());
  return Frame::Share(half);
}

}  // namespace server_internal
}  // namespace relaxps
