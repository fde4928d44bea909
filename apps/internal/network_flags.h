// --source_address, shared by relaxps-coordinator, relaxps-server and
// relaxps-worker (both roles): the address a process's outgoing connections
// leave from. On a multi-homed host (or hosts sharing one network namespace,
// as in scripts/selftest/ssh.sh) it is the address the process binds and
// advertises, so that a firewall rule on that address cuts the process off in
// both directions.
#ifndef RELAXPS_APPS_INTERNAL_NETWORK_FLAGS_H_
#define RELAXPS_APPS_INTERNAL_NETWORK_FLAGS_H_

#include <string>

#include "common/status.h"

namespace relaxps {

// --source_address as given ("" when unset: the kernel's choice), or
// InvalidArgument naming the flag when it is not a numeric address of this
// host (common/advertise.h CheckSourceAddress).
StatusOr<std::string> SourceAddressFromFlags();

}  // namespace relaxps

#endif  // RELAXPS_APPS_INTERNAL_NETWORK_FLAGS_H_
