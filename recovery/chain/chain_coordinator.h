// ChainCoordinatorBase: the coordinator side shared by policies that place
// every dense range and sparse bucket on a chain of replicas (chain, and
// hybrid, which builds on it).
//
// Configure checks 2 <= replicas <= num_servers; the map holds `replicas`
// servers per range; a server whose connection closed is probed and, if it
// does not answer, lost at once. Subclasses decide what a loss and a
// registration do to the chains.
//
// Thread-safety: as CoordinatorRecovery (the coordinator's loop thread).
#ifndef RELAXPS_RECOVERY_CHAIN_CHAIN_COORDINATOR_H_
#define RELAXPS_RECOVERY_CHAIN_CHAIN_COORDINATOR_H_

#include <string>

#include "recovery/coordinator_recovery.h"

namespace relaxps {
namespace recovery {

class ChainCoordinatorBase : public CoordinatorRecovery {
 public:
  // `policy`: the policy's name, for error messages ("chain").
  explicit ChainCoordinatorBase(const char* policy) : policy_(policy) {}

  Status Configure(const CoordinatorJob& job) override;
  int ReplicasPerRange() const override { return job_.replicas; }
  bool ProbesClosedConnections() const override { return true; }
  Status AdmitRangeMoves() const override {
    return FailedPreconditionError(
        std::string("recovery policy '") + policy_ +
        "' does not say yet how its state follows a move of a chain's replica (chain "
        "admits them: docs/elastic.md)");
  }

 protected:
  // How to bring server `server` back, for the log line of its loss.
  virtual std::string RestartAdvice(int server) const = 0;

  const char* const policy_;
  CoordinatorJob job_;  // Set by Configure.
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_CHAIN_CHAIN_COORDINATOR_H_
