#include "server/internal/request_codec.h"

#include <cstring>
#include <string>

namespace relaxps {
namespace server_internal {

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
  return static_cast<const uint64_t*>(scratch->data());
}

Status CheckClock(int64_t clock) {
  if (clock < 0 || clock > kMaxRequestClock) {
    return InvalidArgumentError("clock " + std::to_string(clock) + " is outside [0, 2^62]");
  }
  return Status::OK();
}

}  // namespace server_internal
}  // namespace relaxps
