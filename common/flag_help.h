// --help of the relaxps binaries: the binary's own flags only, grouped, with
// their defaults; --helpfull keeps gflags' listing of every flag, those of
// the libraries (glog's logging flags, gflags' own, RocksDB's tools)
// included.
//
// A flag is the binary's own when it is defined in a file of this source
// tree (gflags records the defining file of each flag). Binaries replace
// gflags::ParseCommandLineFlags with ParseFlagsWithHelp; the grouping is
// data (FlagGroup lists) passed by the binary.
//
// Thread-safety: call from main() before any thread starts, like gflags'
// parsing itself.
#ifndef RELAXPS_COMMON_FLAG_HELP_H_
#define RELAXPS_COMMON_FLAG_HELP_H_

#include <string>
#include <vector>

#include <gflags/gflags.h>

namespace relaxps {

// A titled group of flags in --help, listed in the given order.
struct FlagGroup {
  std::string title;               // e.g. "Job", "Network and security"
  std::vector<std::string> flags;  // flag names without dashes
};

// True when `defining_file` (CommandLineFlagInfo::filename) is a file of
// this source tree, as opposed to a library's (glog, gflags, RocksDB).
bool IsOwnFlagFile(const std::string& defining_file);

// The --help text: `usage` (gflags::ProgramUsage()), then each group's
// flags as "--name=default  description" (wrapped at 100 columns), then
// the own flags no group names under "Other flags" (all of them under
// "Flags" when `groups` is empty), then a line pointing to --helpfull.
// Only flags of `all` whose file IsOwnFlagFile() are listed. REQUIRES
// (CHECK): every name in `groups` is an own flag of `all`, named once.
std::string OwnFlagsHelp(const std::string& usage,
                         const std::vector<gflags::CommandLineFlagInfo>& all,
                         const std::vector<FlagGroup>& groups);

// gflags::ParseCommandLineFlags(argc, argv, true), except that --help (and
// --helpshort) print OwnFlagsHelp() of this binary's flags to stdout and
// exit 0, and --helpfull prints every flag (gflags' listing) and exits 0.
// The other help flags of gflags (--helpmatch=S, --helpon=F, --helpxml,
// --version) keep their behaviour.
void ParseFlagsWithHelp(int* argc, char*** argv, const std::vector<FlagGroup>& groups = {});

}  // namespace relaxps

#endif  // RELAXPS_COMMON_FLAG_HELP_H_
