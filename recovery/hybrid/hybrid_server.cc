// The server side of --recovery=hybrid (recovery/server_recovery.h): chains
// as under --recovery=chain (recovery/chain/chain_server.h). A server that
// held ranges alone when it was declared dead rejoins too; the coordinator
// tells it at registration to wait for the workers' seed of those ranges
// (SEED), which it adds on top of what its store loaded (a restored
// checkpoint, the last flush or the initializer's values).
#include "recovery/chain/chain_server.h"
#include "recovery/hybrid/hybrid.h"

namespace relaxps {
namespace recovery {

std::unique_ptr<ServerRecovery> NewHybridServerRecovery() {
  return std::make_unique<ChainServerRecovery>(HybridPolicy());
}

}  // namespace recovery
}  // namespace relaxps
