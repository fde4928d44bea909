// Small helpers shared by the relaxps binaries' main() functions.
#ifndef RELAXPS_APPS_INTERNAL_MAIN_UTIL_H_
#define RELAXPS_APPS_INTERNAL_MAIN_UTIL_H_

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "apps/internal/flag_groups.h"  // ParseFlagsWithHelp and each binary's groups.
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

// Replaces this process with a fresh run of its own binary (/proc/self/exe)
// with `args` (args[0] is the program name): same pid, so whoever started
// it (a script, a supervisor, a test) keeps watching the same process.
// The caller must have released what the new run will open (the store's
// lock, bound ports); descriptors opened with O_CLOEXEC close themselves.
// Returns only on failure (IOError naming errno).
Status ReExecSelf(const std::vector<std::string>& args);

// `args` without the flags `names` (non-boolean flags, in any form gflags
// takes: --NAME=V, -NAME=V, --NAME V, -NAME V), then `extra` appended: the
// command line of a re-execution that overrides those flags.
std::vector<std::string> ReplaceFlags(std::vector<std::string> args,
                                      const std::vector<std::string>& names,
                                      const std::vector<std::string>& extra);

// The factor by which this build's binaries stretch their timeouts: the
// sanitizer time scale of cmake/Sanitizers.cmake (TSan 5, ASan 3; the one the
// test suite applies to its own waits) in a sanitized build, 1 otherwise.
// Instrumented code runs several times slower, and a job should not time out
// only because it is being checked.
int SanitizerTimeScale();

// Multiplies each of the named int32 flags (timeouts in milliseconds) that
// still has its default value by `factor`, saturating at INT32_MAX (logged
// with --v=1). A value given on the command line or in a flagfile is kept: a
// test that sets a short timeout also bounds what it measures by it. Binaries call it after parsing their flags with
// SanitizerTimeScale(). REQUIRES: each name is a defined int32 flag.
void ScaleTimeoutFlags(int factor, std::initializer_list<const char*> names);

// Prints "<binary>: <status>" to stderr and returns `code` (for main()).
int Fail(const char* binary, const Status& status, int code);

}  // namespace relaxps

#endif  // RELAXPS_APPS_INTERNAL_MAIN_UTIL_H_
