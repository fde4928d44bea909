// --recovery=chain, client side: requests go to the head of their range's
// (or sparse bucket's) chain in the current shard map, with the job epoch
// and, for pushes, an exactly-once key; a part whose head was lost (or
// refused it for now) is re-routed to the new head with its key as soon as a
// newer map names one (workers keep a map watch so that it arrives within a
// message delay of the coordinator's decision), else retried every
// heartbeat, and fails after ClientOptions::recovery_timeout_ms. Under
// --replication=async it counts the acknowledged pushes a head failure lost
// (async_loss_counter.h): event chain_async_lost, counter
// "chain_async_lost".
//
// A base for policies built on chain replication (hybrid). Only recovery/
// includes this header.
//
// Thread-safety: as ClientRecovery (no mutable state of its own).
#ifndef RELAXPS_RECOVERY_CHAIN_CHAIN_CLIENT_H_
#define RELAXPS_RECOVERY_CHAIN_CHAIN_CLIENT_H_

#include <map>
#include <memory>
#include <string>

#include "recovery/chain/async_loss_counter.h"
#include "recovery/client_recovery.h"

namespace relaxps {
namespace recovery {

class ChainClientRecovery : public ClientRecovery {
 public:
  explicit ChainClientRecovery(const ClientRecoveryOptions& options);

  const ClientFeatures& features() const override { return features_; }
  // Workers: arms the map watch.
  void OnStarted() override;
  // PartAction::kReroute.
  PartAction OnServerFailed(const FailedPart& part) const override;
  // Re-arms the map watch and retries the parts parked for longer than a
  // heartbeat period.
  void OnHeartbeat() override;
  // --replication=async: counts what a new head lacks.
  void OnPushAcked(const AckedPush& push) override;
  void AddCounters(std::map<std::string, uint64_t>* counters) const override;

 protected:
  // Constant after construction; a subclass may add to features_ in its
  // constructor.
  const ClientRecoveryOptions options_;
  ClientFeatures features_;
  // --replication=async (null under sync).
  std::unique_ptr<AsyncLossCounter> async_losses_;
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_CHAIN_CHAIN_CLIENT_H_
