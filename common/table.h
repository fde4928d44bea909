// Table descriptions shared by the coordinator, servers and clients.
#ifndef RELAXPS_COMMON_TABLE_H_
#define RELAXPS_COMMON_TABLE_H_

#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/initializer.h"
#include "common/optimizer_options.h"

namespace relaxps {

enum class TableType { kDense = 0, kSparse = 1 };

struct TableOptions {
  std::string name;
  TableType type = TableType::kDense;
  // Dense: number of float parameters. Sparse: ignored (ids are 64-bit).
  uint64_t size = 0;
  // Sparse: floats per row. Dense: ignored.
  uint32_t row_width = 0;
  // Server-side update rule.
  OptimizerOptions optimizer;
  // Initial values (dense: keys; sparse: columns of each row).
  Initializer init;

  // Checks name, sizes, optimizer and initializer.
  Status Validate() const;
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_TABLE_H_
