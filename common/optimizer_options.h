// OptimizerOptions: the server-side update rule of a table, as configured by
// the user. Plain data shared by the client, coordinator and servers; the
// rule itself is kernels::Optimizer.
#ifndef RELAXPS_COMMON_OPTIMIZER_OPTIONS_H_
#define RELAXPS_COMMON_OPTIMIZER_OPTIONS_H_

#include <string>

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

}  // namespace relaxps

#endif  // RELAXPS_COMMON_OPTIMIZER_OPTIONS_H_
