// --recovery=checkpoint, client side: a part whose server died waits for the
// coordinator to announce the restarted server (a new endpoint for the same
// id in the shard map) and is sent to it again, so that pushes are applied
// to the restored state instead of being lost with the dead server; it fails
// with its original error after ClientOptions::recovery_timeout_ms.
//
// A base for policies that restart servers from checkpoints (replay adds
// its log of acknowledged updates on top). Only recovery/ includes this
// header.
//
// Thread-safety: as ClientRecovery (the class has no mutable state).
#ifndef RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_CLIENT_H_
#define RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_CLIENT_H_

#include "recovery/client_recovery.h"

namespace relaxps {
namespace recovery {

class CheckpointClientRecovery : public ClientRecovery {
 public:
  explicit CheckpointClientRecovery(const ClientRecoveryOptions& options) : options_(options) {}

  const ClientFeatures& features() const override { return features_; }
  // Parks the part until its server restarts (PartAction::kPark).
  PartAction OnServerFailed(const FailedPart& part) const override;

 protected:
  // Constant after construction; a subclass may set features_ in its
  // constructor.
  const ClientRecoveryOptions options_;
  ClientFeatures features_;
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_CHECKPOINT_CHECKPOINT_CLIENT_H_
