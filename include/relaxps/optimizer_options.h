// OptimizerOptions: the server-side update rule of a table, as configured by
// the user. Plain data shared by the client, coordinator and servers; the
// rule itself is kernels::Optimizer.
#ifndef RELAXPS_OPTIMIZER_OPTIONS_H_
#define RELAXPS_OPTIMIZER_OPTIONS_H_

#include <string>

#include "relaxps/status.h"

namespace relaxps {

struct OptimizerOptions {
  // "sgd", "momentum", "adam" or "adagrad".
  std::string name = "sgd";
  float lr = 0.01f;
  // Momentum coefficient (momentum).
  float momentum = 0.9f;
  // Adam moments decay.
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  // Denominator guard (adam, adagrad).
  float eps = 1e-8f;
};

// The one check of an optimizer configuration (tables at creation, servers
// and trainers building a kernels::Optimizer): a known name, a positive
// finite lr, and, for the fields the named rule uses, momentum / beta1 /
// beta2 in [0, 1) and a positive finite eps. InvalidArgument naming the
// field and its value otherwise.
Status ValidateOptimizerOptions(const OptimizerOptions& options);

}  // namespace relaxps

#endif  // RELAXPS_OPTIMIZER_OPTIONS_H_
