// Test seams of the client library (in-tree only; not installed).
//
// ConnectWithFaults: a Client whose requests to the servers and the
// coordinator are dropped / delayed / duplicated by a seeded generator
// (common/fault_injecting_transport.h), for failure tests.
#ifndef RELAXPS_CLIENT_TESTING_H_
#define RELAXPS_CLIENT_TESTING_H_

#include <memory>
#include <string>

#include "client/client.h"
#include "common/fault_options.h"

namespace relaxps {

// As Client::Connect, with `faults` injected into every request.
StatusOr<std::unique_ptr<Client>> ConnectWithFaults(const ClientOptions& options,
                                                    const FaultOptions& faults);

// The member token of `client`'s registration (docs/security.md), for tests
// that send hand-built requests as that worker. Empty for a Client of
// another implementation.
std::string MemberTokenOf(const Client& client);

}  // namespace relaxps

#endif  // RELAXPS_CLIENT_TESTING_H_
