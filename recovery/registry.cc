#include "recovery/registry.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <algorithm>

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

// `text` as a whole decimal integer; false if it is not one.
bool ParseInt(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *out = v;
  return true;
}

// "sync|async", or "an integer >= 1".
std::string Accepts(const RecoveryOption& o) {
  if (o.choices.empty()) return "an integer >= " + std::to_string(o.min_value);
  std::string out;
  for (const std::string& c : o.choices) out += (out.empty() ? "" : "|") + c;
  return out;
}

std::string OptionsJson(const std::vector<RecoveryOption>& options) {
  std::string out = "[";
  for (const RecoveryOption& o : options) {
    std::string choices = "[";
    for (const std::string& c : o.choices) choices += (choices.size() > 1 ? ", " : "") + JsonString(c);
    out += (out.size() > 1 ? ", " : "") + std::string("{\"flag\": ") + JsonString(o.flag) +
           ", \"choices\": " + choices + "], \"min_value\": " + std::to_string(o.min_value) +
           ", \"default\": " + JsonString(o.default_value) +
           ", \"description\": " + JsonString(o.description) + "}";
  }
  return out + "]";
}

// The policies that have option `flag`, for an error message.
std::string PoliciesWith(const std::string& flag) {
  std::string names;
  for (const auto& def : kPolicies) {
    for (const RecoveryOption& o : def().needs.options) {
      if (o.flag == flag) names += (names.empty() ? "" : ", ") + std::string(def().name);
    }
  }
  return names;
}

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

std::string RecoveryOptionValue(const RecoveryOptionValues& values, const std::string& flag,
                                const std::string& fallback) {
  auto it = values.find(flag);
  return it == values.end() ? fallback : it->second;
}

int64_t RecoveryOptionInt(const RecoveryOptionValues& values, const std::string& flag,
                          int64_t fallback) {
  int64_t v = 0;
  return ParseInt(RecoveryOptionValue(values, flag, ""), &v) ? v : fallback;
}

StatusOr<RecoveryOptionValues> ResolveRecoveryOptions(const std::string& policy,
                                                      const RecoveryOptionValues& given) {
  RETURN_IF_ERROR(CheckRecoveryPolicyName(policy));
  const std::vector<RecoveryOption>& options = Find(policy)->needs.options;
  for (const auto& [flag, value] : given) {
    auto o = std::find_if(options.begin(), options.end(),
                          [&flag = flag](const RecoveryOption& x) { return x.flag == flag; });
    if (o == options.end()) {
      const std::string with = PoliciesWith(flag);
      return InvalidArgumentError("--" + flag + " is not an option of --recovery=" + policy +
                                  (with.empty() ? std::string(" (no policy has it)")
                                                : " (it is one of --recovery=" + with + ")") +
                                  "; --recovery=help lists each policy's options");
    }
    int64_t n = 0;
    const bool ok = o->choices.empty()
                        ? ParseInt(value, &n) && n >= o->min_value
                        : std::find(o->choices.begin(), o->choices.end(), value) != o->choices.end();
    if (!ok) {
      return InvalidArgumentError("--" + flag + "='" + value + "' under --recovery=" + policy +
                                  ": expected " + Accepts(*o));
    }
  }
  RecoveryOptionValues out;
  for (const RecoveryOption& o : options) out[o.flag] = RecoveryOptionValue(given, o.flag, o.default_value);
  return out;
}

std::vector<std::string> RecoveryOptionFlags() {
  std::vector<std::string> flags;
  for (const auto& def : kPolicies) {
    for (const RecoveryOption& o : def().needs.options) {
      if (std::find(flags.begin(), flags.end(), o.flag) == flags.end()) flags.push_back(o.flag);
    }
  }
  return flags;
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
                    "\"rolls_back\": %s, \"options\": ",
                    first ? "" : ",", JsonString(def.name).c_str(),
                    JsonString(def.description).c_str(), n.min_servers, n.experiment_servers,
                    n.min_replicas, JsonString(n.store_kind).c_str(), RestartRuleName(n.restart),
                    JsonString(n.restart_flags).c_str(), Bool(n.tolerates_server_loss),
                    Bool(n.tolerates_chain_loss), Bool(n.tolerates_pause), Bool(n.rolls_back));
      out += line + OptionsJson(n.options) + "}}";
    } else {
      std::snprintf(line, sizeof(line),
                    "%-11s %s\n            needs: servers>=%d (experiments: %d), replicas>=%d, "
                    "store=%s; a lost server: %s%s%s\n",
                    def.name, def.description, n.min_servers, n.experiment_servers,
                    n.min_replicas, n.store_kind.c_str(), RestartRuleName(n.restart),
                    n.restart_flags.empty() ? "" : " ", n.restart_flags.c_str());
      out += line;
      for (const RecoveryOption& o : n.options) {
        out += "            --" + o.flag + "=" + Accepts(o) + " (default " + o.default_value +
               "): " + o.description + "\n";
      }
    }
    first = false;
  }
  return json ? out + "\n]\n" : out;
}

}  // namespace relaxps
