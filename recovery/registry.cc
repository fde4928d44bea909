#include "recovery/registry.h"

#include <cstdio>

namespace relaxps {
namespace recovery {

// Each registered folder's definition (recovery/<name>/<name>.cc).
#define RELAXPS_RECOVERY_POLICY(Name) const PolicyDefinition& Name##Policy();
#include "recovery/policies.inc"
#undef RELAXPS_RECOVERY_POLICY

}  // namespace recovery

namespace {

using recovery::PolicyDefinition;

// The registered policies (RELAXPS_RECOVERY_POLICIES in
// recovery/CMakeLists.txt), in the order --recovery=help lists them.
constexpr const PolicyDefinition& (*kPolicies[])() = {
#define RELAXPS_RECOVERY_POLICY(Name) &recovery::Name##Policy,
#include "recovery/policies.inc"
#undef RELAXPS_RECOVERY_POLICY
};

// A registered definition seen through the public interface.
class DefinedPolicy final : public RecoveryPolicy {
 public:
  explicit DefinedPolicy(const PolicyDefinition& def) : def_(def) {}
  const char* Name() const override { return def_.name; }
  const char* Description() const override { return def_.description; }
  const RecoveryNeeds& needs() const override { return def_.needs; }
  std::unique_ptr<recovery::CoordinatorRecovery> NewCoordinatorRecovery() const override {
    return def_.new_coordinator();
  }
  std::unique_ptr<recovery::ServerRecovery> NewServerRecovery() const override {
    return def_.new_server();
  }
  std::unique_ptr<recovery::ClientRecovery> NewClientRecovery(
      const recovery::ClientRecoveryOptions& options) const override {
    return def_.new_client(options);
  }

 private:
  const PolicyDefinition& def_;
};

std::string KnownNames() {
  std::string names;
  for (const auto& def : kPolicies) names += (names.empty() ? "" : ", ") + std::string(def().name);
  return names;
}

const PolicyDefinition* Find(const std::string& name) {
  for (const auto& def : kPolicies) {
    if (name == def().name) return &def();
  }
  return nullptr;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

const char* Bool(bool b) { return b ? "true" : "false"; }

}  // namespace

const char* RestartRuleName(RestartRule rule) {
  switch (rule) {
    case RestartRule::kNever: return "never";
    case RestartRule::kSameIdFromCheckpoint: return "same-id-from-checkpoint";
    case RestartRule::kSameIdReseeded: return "same-id-reseeded";
    case RestartRule::kSameIdRejoinsAsTail: return "same-id-rejoins-as-tail";
  }
  return "unknown";
}

Status CheckRecoveryPolicyName(const std::string& name) {
  if (Find(name) != nullptr) return Status::OK();
  return InvalidArgumentError("unknown recovery policy '" + name + "' (expected one of " +
                              KnownNames() + "; --recovery=help lists them)");
}

StatusOr<std::unique_ptr<RecoveryPolicy>> NewRecoveryPolicy(const std::string& name) {
  RETURN_IF_ERROR(CheckRecoveryPolicyName(name));
  return std::unique_ptr<RecoveryPolicy>(new DefinedPolicy(*Find(name)));
}

std::vector<std::string> RecoveryPolicyNames() {
  std::vector<std::string> names;
  for (const auto& def : kPolicies) names.push_back(def().name);
  return names;
}

std::string DescribeRecoveryPolicies(bool json) {
  std::string out = json ? "[" : "";
  bool first = true;
  for (const auto& get : kPolicies) {
    const PolicyDefinition& def = get();
    const RecoveryNeeds& n = def.needs;
    char line[1024];
    if (json) {
      std::snprintf(line, sizeof(line),
                    "%s\n {\"name\": %s, \"description\": %s, \"needs\": {\"min_servers\": %d, "
                    "\"experiment_servers\": %d, \"min_replicas\": %d, \"store_kind\": %s, "
                    "\"restart\": \"%s\", \"restart_flags\": %s, \"tolerates_server_loss\": %s, "
                    "\"tolerates_chain_loss\": %s, \"tolerates_pause\": %s, "
                    "\"rolls_back\": %s}}",
                    first ? "" : ",", JsonString(def.name).c_str(),
                    JsonString(def.description).c_str(), n.min_servers, n.experiment_servers,
                    n.min_replicas, JsonString(n.store_kind).c_str(), RestartRuleName(n.restart),
                    JsonString(n.restart_flags).c_str(), Bool(n.tolerates_server_loss),
                    Bool(n.tolerates_chain_loss), Bool(n.tolerates_pause), Bool(n.rolls_back));
    } else {
      std::snprintf(line, sizeof(line),
                    "%-11s %s\n            needs: servers>=%d (experiments: %d), replicas>=%d, "
                    "store=%s; a lost server: %s%s%s\n",
                    def.name, def.description, n.min_servers, n.experiment_servers,
                    n.min_replicas, n.store_kind.c_str(), RestartRuleName(n.restart),
                    n.restart_flags.empty() ? "" : " ", n.restart_flags.c_str());
    }
    out += line;
    first = false;
  }
  return json ? out + "\n]\n" : out;
}

}  // namespace relaxps
