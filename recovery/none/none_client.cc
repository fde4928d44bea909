// --recovery=none, client side: every hook keeps its default. A part whose
// server failed fails with its error (the coordinator fails the job, and
// every request after it fails with Aborted naming why).
#include "recovery/none/none.h"

namespace relaxps {
namespace recovery {
namespace {

class NoneClientRecovery final : public ClientRecovery {
 public:
  const ClientFeatures& features() const override { return features_; }

 private:
  const ClientFeatures features_{};  // No mechanism beyond routing by the map.
};

}  // namespace

std::unique_ptr<ClientRecovery> NewNoneClientRecovery(const ClientRecoveryOptions& /*options*/) {
  return std::make_unique<NoneClientRecovery>();
}

}  // namespace recovery
}  // namespace relaxps
