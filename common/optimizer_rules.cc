#include "common/optimizer_rules.h"

namespace relaxps {

const std::vector<OptimizerRule>& OptimizerRules() {
  static const std::vector<OptimizerRule>* const rules = new std::vector<OptimizerRule>{
      {"sgd", 0, false},
      {"momentum", 1, true},
      {"adam", 2, false},
      {"adagrad", 1, false},
  };
  return *rules;
}

const OptimizerRule* FindOptimizerRule(const std::string& name) {
  for (const OptimizerRule& rule : OptimizerRules()) {
    if (name == rule.name) return &rule;
  }
  return nullptr;
}

}  // namespace relaxps
