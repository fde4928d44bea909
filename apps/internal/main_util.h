// Small helpers shared by the relaxps binaries' main() functions.
#ifndef RELAXPS_APPS_INTERNAL_MAIN_UTIL_H_
#define RELAXPS_APPS_INTERNAL_MAIN_UTIL_H_

#include <functional>
#include <string>

#include "common/curve_auth.h"
#include "common/status.h"

namespace relaxps {

// Initializes glog (to stderr) for a binary.
void InitLogging(const char* argv0);

// Runs `stop` (which must be async-signal-safe) on SIGINT and SIGTERM. With
// `second_signal_kills`, the handler is reset after the first signal, so a
// second one gets the default action (ends the process at once).
// REQUIRES: called once per process.
void StopOnSignals(void (*stop)(), bool second_signal_kills = false);

// Atomically writes `content` + "\n" to `path` (write to a temp file, rename),
// so a script polling for the file never reads half of it. No-op for "".
Status WriteFileAtomically(const std::string& path, const std::string& content);

// gflags exits with status 1 on an unknown flag or an unparsable value;
// binaries call this before gflags::ParseCommandLineFlags so that those are
// usage errors (exit 2) with a one-line reason. Returns InvalidArgument
// naming the flag. Also rejects positional arguments unless
// `allow_positional`.
Status CheckCommandLine(int argc, char** argv, bool allow_positional = false);

// --security=plain|curve and --keys_dir of a binary whose principal is
// `name` (curve_auth.h): the CurveOptions to use (keys_dir empty for plain).
// InvalidArgument for another mode, or curve without --keys_dir; NotFound if
// the principal's key is missing.
StatusOr<CurveOptions> SecurityFromFlags(const std::string& security, const std::string& keys_dir,
                                         const std::string& name);

// Prints "<binary>: <status>" to stderr and returns `code` (for main()).
int Fail(const char* binary, const Status& status, int code);

}  // namespace relaxps

#endif  // RELAXPS_APPS_INTERNAL_MAIN_UTIL_H_
