#include "apps/internal/network_flags.h"

#include <gflags/gflags.h>

#include "common/advertise.h"

DEFINE_string(source_address, "",
              "Numeric IP address of this host that outgoing connections leave from (a "
              "multi-homed host: usually the address it binds and advertises); empty: the "
              "kernel's choice");

namespace relaxps {

StatusOr<std::string> SourceAddressFromFlags() {
  if (Status s = CheckSourceAddress(FLAGS_source_address); !s.ok()) {
    return InvalidArgumentError("--source_address: " + s.message());
  }
  return FLAGS_source_address;
}

}  // namespace relaxps
