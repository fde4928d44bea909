// Validation, comparison and initialization of table specs, shared by the
// MemoryStore and the RocksDbStore so both create identical initial values.
//
// All functions are pure; safe to call from any thread.
#ifndef RELAXPS_STORAGE_INTERNAL_SPEC_UTIL_H_
#define RELAXPS_STORAGE_INTERNAL_SPEC_UTIL_H_

#include <cstdint>
#include <string>

#include "common/status.h"
#include "storage/param_store.h"

namespace relaxps {
namespace storage_internal {

// Upper bound on slots per table (params + optimizer state).
inline constexpr int kMaxSlots = 16;

// InvalidArgument for an empty name, an empty range, a bad slot count or an
// invalid initializer.
Status ValidateDenseSpec(const DenseShardSpec& spec);
Status ValidateSparseSpec(const SparseTableSpec& spec);

// Same table, range and slot count (what makes CreateDense return the existing
// shard).
bool SameDenseShape(const DenseShardSpec& a, const DenseShardSpec& b);
// Same width, slots, initializer and slot_init.
bool SameSparseSpec(const SparseTableSpec& a, const SparseTableSpec& b);
bool SameInitializer(const Initializer& a, const Initializer& b);

// Whether dense shard `shard`, with memory for `capacity` floats per slot,
// may become keys [begin, end) named `name` (ParamStore::ReshapeDense):
// InvalidArgument, naming the shard, if `end` is not past its begin or past
// its memory, or `name` is empty. Whether the name is free is the store's
// to check.
Status CheckReshape(const DenseShard& shard, size_t capacity, const std::string& name,
                    uint64_t end);

// Human-readable "[begin, end) x slots" for error messages.
std::string DescribeDense(const DenseShardSpec& spec);
std::string DescribeSparse(const SparseTableSpec& spec);

// Writes the initial values of slot `slot` of keys [spec.begin + offset,
// spec.begin + offset + n) into out.
void InitDenseRange(const DenseShardSpec& spec, int slot, uint64_t offset, size_t n,
                    float* out);
// Writes the initial record (all slots, spec.row_floats() floats) of row `id`.
void InitRow(const SparseTableSpec& spec, uint64_t id, float* out);

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_SPEC_UTIL_H_
