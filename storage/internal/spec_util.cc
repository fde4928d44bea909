#include "storage/internal/spec_util.h"

#include <algorithm>
#include <limits>

namespace relaxps {
namespace storage_internal {

Status ValidateDenseSpec(const DenseShardSpec& spec) {
  if (spec.table.empty()) return InvalidArgumentError("dense shard needs a table name");
  if (spec.end <= spec.begin) {
    return InvalidArgumentError("dense shard " + DescribeDense(spec) + " has an empty range");
  }
  if (spec.num_slots < 1 || spec.num_slots > kMaxSlots) {
    return InvalidArgumentError("dense shard " + DescribeDense(spec) + ": num_slots must be in [1, " +
                                std::to_string(kMaxSlots) + "]");
  }
  // Segments address global keys, and the global table size is not known
  // here, so only kinds, parameters and overlaps are checked.
  Status s = spec.init.Validate(std::numeric_limits<uint64_t>::max());
  if (!s.ok()) return s.WithPrefix("dense shard " + DescribeDense(spec));
  return Status::OK();
}

Status ValidateSparseSpec(const SparseTableSpec& spec) {
  if (spec.table.empty()) return InvalidArgumentError("sparse table needs a table name");
  if (spec.width == 0) {
    return InvalidArgumentError("sparse table " + DescribeSparse(spec) + ": width must be > 0");
  }
  if (spec.num_slots < 1 || spec.num_slots > kMaxSlots) {
    return InvalidArgumentError("sparse table " + DescribeSparse(spec) +
                                ": num_slots must be in [1, " + std::to_string(kMaxSlots) + "]");
  }
  Status s = spec.init.Validate(spec.width);
  if (!s.ok()) return s.WithPrefix("sparse table " + DescribeSparse(spec));
  return Status::OK();
}

bool SameDenseShape(const DenseShardSpec& a, const DenseShardSpec& b) {
  return a.table == b.table && a.begin == b.begin && a.end == b.end &&
         a.num_slots == b.num_slots;
}

bool SameInitializer(const Initializer& a, const Initializer& b) {
  if (a.seed != b.seed || a.segments.size() != b.segments.size()) return false;
  for (size_t i = 0; i < a.segments.size(); ++i) {
    const InitSegment& x = a.segments[i];
    const InitSegment& y = b.segments[i];
    if (x.begin != y.begin || x.end != y.end || x.kind != y.kind || x.a != y.a || x.b != y.b) {
      return false;
    }
  }
  return true;
}

bool SameSparseSpec(const SparseTableSpec& a, const SparseTableSpec& b) {
  return a.table == b.table && a.width == b.width && a.num_slots == b.num_slots &&
         a.slot_init == b.slot_init && SameInitializer(a.init, b.init);
}

Status CheckReshape(const DenseShard& shard, size_t capacity, const std::string& name,
                    uint64_t end) {
  const uint64_t begin = shard.spec.begin;
  if (name.empty() || end <= begin || end - begin > capacity) {
    return InvalidArgumentError("cannot reshape dense shard " + DescribeDense(shard.spec) +
                                " into '" + name + "' [" + std::to_string(begin) + ", " +
                                std::to_string(end) + "): it has memory for " +
                                std::to_string(capacity) + " keys");
  }
  return Status::OK();
}

std::string DescribeDense(const DenseShardSpec& spec) {
  return "'" + spec.table + "' [" + std::to_string(spec.begin) + ", " + std::to_string(spec.end) +
         ") x " + std::to_string(spec.num_slots) + " slots";
}

std::string DescribeSparse(const SparseTableSpec& spec) {
  return "'" + spec.table + "' width " + std::to_string(spec.width) + " x " +
         std::to_string(spec.num_slots) + " slots";
}

void InitDenseRange(const DenseShardSpec& spec, int slot, uint64_t offset, size_t n,
                    float* out) {
  if (slot == 0) {
    spec.init.Fill(spec.begin + offset, n, out);
  } else {
    std::fill(out, out + n, spec.slot_init);
  }
}

void InitRow(const SparseTableSpec& spec, uint64_t id, float* out) {
  spec.init.FillRow(id, spec.width, out);
  std::fill(out + spec.width, out + spec.row_floats(), spec.slot_init);
}

}  // namespace storage_internal
}  // namespace relaxps
