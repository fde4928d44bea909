#include "coordinator/recovery_policy.h"

namespace relaxps {
namespace {

class NoRecovery final : public RecoveryPolicy {
 public:
  const char* Name() const override { return "none"; }
  OnServerLoss on_server_loss() const override { return OnServerLoss::kFailJob; }
  std::string RestartAdvice(int) const override { return ""; }
};

class CheckpointRestart final : public RecoveryPolicy {
 public:
  const char* Name() const override { return "checkpoint"; }
  OnServerLoss on_server_loss() const override { return OnServerLoss::kAwaitRestart; }
  std::string RestartAdvice(int id) const override {
    return "restart it with --server_id=" + std::to_string(id) +
           " --restore_from=latest to roll it back to the last complete checkpoint";
  }
};

class ChainReplication final : public RecoveryPolicy {
 public:
  const char* Name() const override { return "chain"; }
  OnServerLoss on_server_loss() const override { return OnServerLoss::kReconfigure; }
  std::string RestartAdvice(int id) const override {
    return "restart it with --server_id=" + std::to_string(id) +
           " to copy its ranges from a live replica and rejoin its chains as tail";
  }
};

}  // namespace

StatusOr<std::unique_ptr<RecoveryPolicy>> NewRecoveryPolicy(const std::string& name) {
  if (name == "none") return std::unique_ptr<RecoveryPolicy>(new NoRecovery());
  if (name == "checkpoint") return std::unique_ptr<RecoveryPolicy>(new CheckpointRestart());
  if (name == "chain") return std::unique_ptr<RecoveryPolicy>(new ChainReplication());
  if (name == "stateless" || name == "hybrid") {
    return InvalidArgumentError("recovery policy '" + name +
                                "' is not available in this version (use none, checkpoint or chain)");
  }
  return InvalidArgumentError("unknown recovery policy '" + name +
                              "' (expected none, checkpoint or chain)");
}

}  // namespace relaxps
