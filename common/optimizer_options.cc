#include "common/optimizer_options.h"

#include <cmath>
#include <sstream>

#include "common/optimizer_rules.h"

namespace relaxps {
namespace {

// InvalidArgument naming the field unless lo <= value < hi and finite.
Status CheckRange(const char* field, float value, float lo, float hi) {
  if (std::isfinite(value) && value >= lo && value < hi) return Status::OK();
  std::ostringstream msg;
  msg << "optimizer option " << field << "=" << value << " is outside [" << lo << ", " << hi << ")";
  return InvalidArgumentError(msg.str());
}

// eps guards a division by sqrt(state), which is 0 for a zero gradient.
Status CheckPositive(const char* field, float value) {
  if (std::isfinite(value) && value > 0.0f) return Status::OK();
  std::ostringstream msg;
  msg << "optimizer option " << field << "=" << value << " must be positive and finite";
  return InvalidArgumentError(msg.str());
}

}  // namespace

Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  if (FindOptimizerRule(o.name) == nullptr) {
    return InvalidArgumentError("unknown optimizer '" + o.name +
                                "' (expected sgd, momentum, adam or adagrad)");
  }
  RETURN_IF_ERROR(CheckPositive("lr", o.lr));
  if (o.name == "momentum") RETURN_IF_ERROR(CheckRange("momentum", o.momentum, 0.0f, 1.0f));
  if (o.name == "adam") {
    RETURN_IF_ERROR(CheckRange("beta1", o.beta1, 0.0f, 1.0f));
    RETURN_IF_ERROR(CheckRange("beta2", o.beta2, 0.0f, 1.0f));
  }
  if (o.name == "adam" || o.name == "adagrad") RETURN_IF_ERROR(CheckPositive("eps", o.eps));
  return Status::OK();
}

}  // namespace relaxps
