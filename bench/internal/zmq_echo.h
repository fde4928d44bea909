// The bare-ZeroMQ yardstick of the relaxps benchmarks: W client threads, each
// with one DEALER per server, and S server threads, each a ROUTER that
// answers every message, over tcp://127.0.0.1:* (OS-chosen ports) in one
// process. It is what the parameter server's data path would cost with no
// protocol, no store and no optimizer: relaxps figures are reported as a
// ratio to the matching EchoOptions.
//
// One operation sends request_bytes split evenly over the S servers (like a
// dense request split over S shards) and completes when all S replies of
// reply_bytes / S are in. With reply_bytes == request_bytes the server sends
// the received message back (a true echo); otherwise it answers from a
// preallocated buffer without copying.
//
// Thread-safety: RunEcho() may be called from any thread; each call owns its
// sockets and threads.
#ifndef RELAXPS_BENCH_INTERNAL_ZMQ_ECHO_H_
#define RELAXPS_BENCH_INTERNAL_ZMQ_ECHO_H_

#include <cstddef>
#include <string>

#include "bench/internal/bench_util.h"

namespace relaxps {
namespace bench {

struct EchoOptions {
  // Bytes a client sends per operation (over all servers).
  size_t request_bytes = 4096;
  // Bytes a client receives per operation (over all servers).
  size_t reply_bytes = 4096;
  // false: the client copies its payload into each outgoing zmq::message_t
  // and copies every reply out into its own buffer (what a naive client
  // does). true: outgoing messages wrap the client's buffer with a free
  // function, replies are read in place.
  bool zero_copy = true;
  // Operations each client keeps outstanding.
  int in_flight = 1;
  int clients = 1;
  int servers = 1;
  // Timed window per measurement; at least min_ops operations run per client.
  double seconds = 1.0;
  int min_ops = 3;
  // Untimed operations per client before the window opens.
  int warmup_ops = 2;
  // Record one latency sample per operation (send to last reply).
  bool record_latency = false;
};

// Runs one time-boxed measurement. Measurement::bytes counts payload bytes
// sent + received by all clients; items == ops.
Measurement RunEcho(const EchoOptions& options);

// "copy" / "zerocopy".
inline const char* EchoVariantName(bool zero_copy) { return zero_copy ? "zerocopy" : "copy"; }

}  // namespace bench
}  // namespace relaxps

#endif  // RELAXPS_BENCH_INTERNAL_ZMQ_ECHO_H_
