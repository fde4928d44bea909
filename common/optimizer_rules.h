// OptimizerRule: what each built-in update rule declares about its state,
// for code that links no kernels/: the client (stateless recovery trains a
// range on a local copy), and the servers' seeding from workers' copies.
//
// One entry per rule. The rule itself is kernels::Optimizer (built by
// kernels::NewOptimizer from OptimizerOptions::name); its
// num_state_slots() agrees with state_slots here (tests/kernels/
// optimizer_test.cc checks every rule). A caller asks a property (does slot
// 0 hold a velocity?) instead of comparing rule names.
//
// Thread-safety: immutable data, safe from any thread.
#ifndef RELAXPS_COMMON_OPTIMIZER_RULES_H_
#define RELAXPS_COMMON_OPTIMIZER_RULES_H_

#include <string>
#include <vector>

namespace relaxps {

struct OptimizerRule {
  const char* name;  // OptimizerOptions::name.
  // Float state arrays per parameter array (kernels::Optimizer::
  // num_state_slots()).
  int state_slots;
  // State slot 0 is a heavy-ball velocity decayed by OptimizerOptions::
  // momentum (v = momentum * v + g; w -= lr * v): a local copy can take the
  // same kind of step, and a worker's copy of the velocity can seed a
  // server's.
  bool velocity_slot;
};

// Every built-in rule.
const std::vector<OptimizerRule>& OptimizerRules();
// The rule named `name`; nullptr if there is none.
const OptimizerRule* FindOptimizerRule(const std::string& name);

}  // namespace relaxps

#endif  // RELAXPS_COMMON_OPTIMIZER_RULES_H_
