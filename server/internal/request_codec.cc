#include "server/internal/request_codec.h"

#include <cstring>

namespace relaxps {
namespace server_internal {

StatusOr<const float*> DecodeFloats(const Frame& frame, uint64_t n, wire::Encoding encoding,
                                    kernels::Device* device, std::vector<float>* scratch) {
  const size_t elem = encoding == wire::ENC_FP16 ? 2 : encoding == wire::ENC_FP32 ? 4 : 0;
  if (elem == 0) return InvalidArgumentError("unknown payload encoding " + std::to_string(encoding));
  // n * elem can overflow for a hostile n: compare by division.
  if (frame.size() % elem != 0 || frame.size() / elem != n) {
    return InvalidArgumentError("payload of " + std::to_string(frame.size()) + " bytes, expected " +
                                std::to_string(n) + " values of " + std::to_string(elem) +
                                " bytes");
  }
  const float* values;
  if (encoding == wire::ENC_FP16) {
    const uint16_t* half = frame.as<uint16_t>();
    std::vector<uint16_t> aligned;
    if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(uint16_t) != 0) {
      aligned.resize(n);
      std::memcpy(aligned.data(), frame.data(), n * sizeof(uint16_t));
      half = aligned.data();
    }
    scratch->resize(n);
    device->HalfToFloat(half, scratch->data(), n);
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

StatusOr<const uint64_t*> DecodeRowIds(const Frame& frame, uint64_t key_count,
                                       std::vector<uint64_t>* scratch) {
  if (frame.size() % sizeof(uint64_t) != 0 || frame.size() == 0 ||
      frame.size() / sizeof(uint64_t) != key_count) {
    return InvalidArgumentError("row-id frame of " + std::to_string(frame.size()) +
                                " bytes does not hold " + std::to_string(key_count) +
                                " uint64 ids");
  }
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(uint64_t) == 0) {
    return frame.as<uint64_t>();
  }
  scratch->resize(key_count);
  std::memcpy(scratch->data(), frame.data(), frame.size());
  return scratch->data();
}

Status CheckClock(int64_t clock) {
  if (clock < 0 || clock > kMaxRequestClock) {
    return InvalidArgumentError("clock " + std::to_string(clock) + " is outside [0, 2^62]");
  }
  return Status::OK();
}

Frame EncodeFloats(const FloatBuffer& values, wire::Encoding encoding, kernels::Device* device) {
  if (encoding != wire::ENC_FP16) return Frame::Share(values);
  Buffer<uint16_t> half = Buffer<uint16_t>::Uninitialized(values.size());
  device->FloatToHalf(values.data(), half.data(), values.size());
  return Frame::Share(half);
}

}  // namespace server_internal
}  // namespace relaxps
