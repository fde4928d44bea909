// CurveOptions: what a process needs for --security=curve (see
// common/curve_auth.h). A value type; no ZeroMQ headers, so public headers
// (client.h) can carry it.
#ifndef RELAXPS_CURVE_OPTIONS_H_
#define RELAXPS_CURVE_OPTIONS_H_

#include <string>

namespace relaxps {

// Empty keys_dir: plain TCP.
struct CurveOptions {
  // Directory written by `relaxps-ctl keygen`.
  std::string keys_dir;
  // This process's principal ("coordinator", "server-0", "worker-1", "ctl").
  std::string name;

  bool enabled() const { return !keys_dir.empty(); }
};

}  // namespace relaxps

#endif  // RELAXPS_CURVE_OPTIONS_H_
