// FaultInjectingTransport: a forwarding Transport that drops, delays,
// duplicates or partitions the requests it forwards, driven by a seeded
// generator so that a failure test sees the same faults on every run.
//
// Thread-safety: as Transport. Delayed sends and the deadlines of dropped
// requests are run by one scheduler thread owned by the wrapper.
#ifndef RELAXPS_COMMON_FAULT_INJECTING_TRANSPORT_H_
#define RELAXPS_COMMON_FAULT_INJECTING_TRANSPORT_H_

#include <memory>

#include "common/transport.h"

namespace relaxps {

class FaultInjectingTransport : public Transport {
 public:
  // Forwards to `base` (owned) with `faults` applied.
  static std::unique_ptr<FaultInjectingTransport> Wrap(std::unique_ptr<Transport> base,
                                                       const FaultOptions& faults);

  // While partitioned, every request is dropped (and fails at its deadline),
  // as if the network between this process and its peers were cut.
  virtual void SetPartitioned(bool partitioned) = 0;
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_FAULT_INJECTING_TRANSPORT_H_
