// --recovery=checkpoint, coordinator side: the job waits for a lost server
// to restart with its id from the latest complete checkpoint (the server
// restores it: what was acknowledged after it is lost; workers keep their
// clocks). The coordinator's periodic checkpoints are the flags' (--checkpoint_every_clocks / _s).
#include <memory>
#include <string>

#include "recovery/checkpoint/checkpoint.h"
#include "recovery/coordinator_await_restart.h"

namespace relaxps {
namespace recovery {
namespace {

class CheckpointCoordinator final : public AwaitRestartCoordinator {
 public:
  // A checkpoint taken after a move restores: store shards are named by the
  // range they hold. One taken before a move is refused by a server that
  // restores it, naming the table (docs/elastic.md, "Not yet").
  Status AdmitRangeMoves() const override { return Status::OK(); }

 protected:
  std::string RestartAdvice(int server) const override {
    return "restart it with --server_id=" + std::to_string(server) +
           " --restore_from=latest to roll it back to the last complete checkpoint";
  }
};

}  // namespace

std::unique_ptr<CoordinatorRecovery> NewCheckpointCoordinatorRecovery() {
  return std::make_unique<CheckpointCoordinator>();
}

}  // namespace recovery
}  // namespace relaxps
