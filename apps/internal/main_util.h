// Small helpers shared by the relaxps binaries' main() functions.
#ifndef RELAXPS_APPS_INTERNAL_MAIN_UTIL_H_
#define RELAXPS_APPS_INTERNAL_MAIN_UTIL_H_

#include <functional>
#include <string>

#include "common/status.h"

namespace relaxps {

// Initializes glog (to stderr) for a binary.
void InitLogging(const char* argv0);

// Runs `stop` (which must be async-signal-safe) on SIGINT and SIGTERM.
// REQUIRES: called once per process.
void StopOnSignals(void (*stop)());

// Atomically writes `content` + "\n" to `path` (write to a temp file, rename),
// so a script polling for the file never reads half of it. No-op for "".
Status WriteFileAtomically(const std::string& path, const std::string& content);

// Prints "<binary>: <status>" to stderr and returns `code` (for main()).
int Fail(const char* binary, const Status& status, int code);

}  // namespace relaxps

#endif  // RELAXPS_APPS_INTERNAL_MAIN_UTIL_H_
