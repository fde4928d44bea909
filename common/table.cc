#include "common/table.h"

#include <cctype>
#include <cmath>

namespace relaxps {

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
  const OptimizerOptions& o = optimizer;
  if (o.name != "sgd" && o.name != "momentum" && o.name != "adam" && o.name != "adagrad") {
    return InvalidArgumentError("unknown optimizer '" + o.name +
                                "' (expected sgd, momentum, adam or adagrad)");
  }
  if (!(std::isfinite(o.lr) && o.lr > 0)) {
    return InvalidArgumentError("learning rate must be a positive finite number");
  }
  if (!(o.momentum >= 0 && o.momentum < 1) || !(o.beta1 >= 0 && o.beta1 < 1) ||
      !(o.beta2 >= 0 && o.beta2 < 1) || !(o.eps > 0 && std::isfinite(o.eps))) {
    return InvalidArgumentError("optimizer hyper-parameters out of range");
  }
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
