#include "recovery/recovery_policy.h"

namespace relaxps {
namespace {

class NoRecovery final : public RecoveryPolicy {
 public:
  RecoveryMode mode() const override { return RecoveryMode::kNone; }
  OnServerLoss on_server_loss() const override { return OnServerLoss::kFailJob; }
  std::string RestartAdvice(int) const override { return ""; }
  bool ResendsAcrossRestarts() const override { return false; }
};

class CheckpointRestart final : public RecoveryPolicy {
 public:
  RecoveryMode mode() const override { return RecoveryMode::kCheckpoint; }
  OnServerLoss on_server_loss() const override { return OnServerLoss::kAwaitRestart; }
  std::string RestartAdvice(int id) const override {
    return "restart it with --server_id=" + std::to_string(id) +
           " --restore_from=latest to roll it back to the last complete checkpoint";
  }
  bool ResendsAcrossRestarts() const override { return true; }
};

class ChainReplication final : public RecoveryPolicy {
 public:
  RecoveryMode mode() const override { return RecoveryMode::kChain; }
  OnServerLoss on_server_loss() const override { return OnServerLoss::kReconfigure; }
  std::string RestartAdvice(int id) const override {
    return "restart it with --server_id=" + std::to_string(id) +
           " to copy its ranges from a live replica and rejoin its chains as tail";
  }
  bool ResendsAcrossRestarts() const override { return true; }
  bool ReplicatesServers() const override { return true; }
};

class StatelessServers final : public RecoveryPolicy {
 public:
  RecoveryMode mode() const override { return RecoveryMode::kStateless; }
  OnServerLoss on_server_loss() const override { return OnServerLoss::kAwaitRestart; }
  std::string RestartAdvice(int id) const override {
    return "workers train on their own copies meanwhile; start a server with --server_id=" +
           std::to_string(id) + " and it is seeded from them";
  }
  // Requests are served locally instead of waiting for the restart.
  bool ResendsAcrossRestarts() const override { return false; }
  bool TrainsThroughServerLoss() const override { return true; }
};

// Chains in normal times; a range whose every replica is lost falls back to
// the workers' copies (stateless re-seeding), and a range no worker holds to
// the latest checkpoint (docs/stateless.md, "Hybrid").
class HybridRecovery final : public RecoveryPolicy {
 public:
  RecoveryMode mode() const override { return RecoveryMode::kHybrid; }
  OnServerLoss on_server_loss() const override { return OnServerLoss::kReconfigure; }
  std::string RestartAdvice(int id) const override {
    return "restart it with --server_id=" + std::to_string(id) +
           " to rejoin its chains as tail; a range it held last is seeded from the workers' "
           "copies (or its latest checkpoint) first";
  }
  bool ResendsAcrossRestarts() const override { return true; }
  bool ReplicatesServers() const override { return true; }
  bool TrainsThroughServerLoss() const override { return true; }
};

constexpr RecoveryMode kAllModes[] = {RecoveryMode::kNone, RecoveryMode::kCheckpoint,
                                      RecoveryMode::kChain, RecoveryMode::kStateless,
                                      RecoveryMode::kHybrid};

}  // namespace

const char* RecoveryModeName(RecoveryMode mode) {
  switch (mode) {
    case RecoveryMode::kNone: return "none";
    case RecoveryMode::kCheckpoint: return "checkpoint";
    case RecoveryMode::kChain: return "chain";
    case RecoveryMode::kStateless: return "stateless";
    case RecoveryMode::kHybrid: return "hybrid";
  }
  return "unknown";
}

StatusOr<RecoveryMode> ParseRecoveryMode(const std::string& name) {
  for (RecoveryMode m : kAllModes) {
    if (name == RecoveryModeName(m)) return m;
  }
  return InvalidArgumentError("unknown recovery policy '" + name +
                              "' (expected none, checkpoint, chain, stateless or hybrid)");
}

StatusOr<std::unique_ptr<RecoveryPolicy>> NewRecoveryPolicy(RecoveryMode mode) {
  switch (mode) {
    case RecoveryMode::kNone: return std::unique_ptr<RecoveryPolicy>(new NoRecovery());
    case RecoveryMode::kCheckpoint: return std::unique_ptr<RecoveryPolicy>(new CheckpointRestart());
    case RecoveryMode::kChain: return std::unique_ptr<RecoveryPolicy>(new ChainReplication());
    case RecoveryMode::kStateless: return std::unique_ptr<RecoveryPolicy>(new StatelessServers());
    case RecoveryMode::kHybrid: return std::unique_ptr<RecoveryPolicy>(new HybridRecovery());
  }
  return InvalidArgumentError("unknown recovery mode " + std::to_string(static_cast<int>(mode)));
}

}  // namespace relaxps
