// --recovery=replay, server side: as checkpoint (writes applied locally; a
// server declared dead restarts in place from its latest checkpoint). What a
// restored server needs for the replay is mostly a mechanism every server
// has: its applied ledger, saved with each checkpoint, acknowledges a
// replayed push its state already reflects without applying it again. On
// top, a restored server re-forms BSP rounds from the replayed pushes
// (RebuildsRoundsFromReplay), so that a BSP job ends as it would have
// without the failure.
#include <memory>

#include "recovery/checkpoint/checkpoint_server.h"
#include "recovery/replay/replay.h"

namespace relaxps {
namespace recovery {
namespace {

class ReplayServer final : public CheckpointServerRecovery {
 public:
  ReplayServer() : CheckpointServerRecovery(ReplayPolicy()) {}

  bool RebuildsRoundsFromReplay(const ServerJobInfo& job) const override { return job.restored; }
};

}  // namespace

std::unique_ptr<ServerRecovery> NewReplayServerRecovery() {
  return std::make_unique<ReplayServer>();
}

}  // namespace recovery
}  // namespace relaxps
