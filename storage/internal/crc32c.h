// CRC-32C (Castagnoli) of a byte string, for the checkpoint manifest.
#ifndef RELAXPS_STORAGE_INTERNAL_CRC32C_H_
#define RELAXPS_STORAGE_INTERNAL_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace relaxps {
namespace storage_internal {

// Extends `crc` (0 to start) with n bytes. Pure; safe from any thread.
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_CRC32C_H_
