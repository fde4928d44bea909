// FaultOptions: seeded network faults for failure tests (see
// common/fault_injecting_transport.h). Plain data with no dependencies, so
// the public client header can carry it.
#ifndef RELAXPS_COMMON_FAULT_OPTIONS_H_
#define RELAXPS_COMMON_FAULT_OPTIONS_H_

#include <cstdint>

namespace relaxps {

struct FaultOptions {
  // Probability of silently dropping an outgoing request (it then fails with
  // DeadlineExceeded at its deadline, as a lost packet would).
  double drop_prob = 0.0;
  // Probability of sending an outgoing request twice (the peer sees both;
  // the caller gets one reply).
  double duplicate_prob = 0.0;
  // Extra delay before every outgoing request is sent.
  int delay_ms = 0;
  // Seed of the fault generator (never time-based).
  uint64_t seed = 1;

  bool any() const { return drop_prob > 0 || duplicate_prob > 0 || delay_ms > 0; }
};

}  // namespace relaxps

#endif  // RELAXPS_COMMON_FAULT_OPTIONS_H_
