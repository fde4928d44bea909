#include "common/table.h"

#include <cctype>
#include <cmath>

namespace relaxps {

double TableOptions::LrScaleAt(int64_t clock) const {
  double lr = optimizer.lr;
  for (const auto& [from_clock, changed] : lr_changes) {
    if (from_clock <= clock) lr = changed;
  }
  const double base = optimizer.lr > 0 ? lr / optimizer.lr : 1.0;
  return base * lr_schedule.Factor(clock);
}

Status TableOptions::Validate() const {
  if (name.empty() || name.size() > 128) {
    return InvalidArgumentError("table name must be 1..128 characters");
  }
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) {
      return InvalidArgumentError("table name '" + name +
                                  "' may only contain letters, digits, '_', '-' and '.'");
    }
  }
  RETURN_IF_ERROR(ValidateOptimizerOptions(optimizer).WithPrefix("table '" + name + "'"));
  RETURN_IF_ERROR(lr_schedule.Validate().WithPrefix("table '" + name + "'"));
  if (type == TableType::kDense) {
    if (size == 0 || size > (uint64_t{1} << 34)) {
      return InvalidArgumentError("dense table size must be in [1, 2^34]");
    }
    return init.Validate(size).WithPrefix("table '" + name + "'");
  }
  if (row_width == 0 || row_width > (1u << 20)) {
    return InvalidArgumentError("sparse row width must be in [1, 2^20]");
  }
  return init.Validate(row_width).WithPrefix("table '" + name + "'");
}

}  // namespace relaxps
