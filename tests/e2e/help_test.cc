// End to end: `--help` of every binary lists exactly its own flags (those
// defined in this source tree), none of glog's, gflags' or RocksDB's, with
// its key flags among them, and exits 0; `--helpfull` still lists every
// flag, the libraries' included, and exits 0.
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

struct HelpCase {
  std::string binary;                  // in RELAXPS_BIN_DIR
  std::vector<std::string> key_flags;  // must be listed by --help
};

std::ostream& operator<<(std::ostream& os, const HelpCase& c) { return os << c.binary; }

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Whether a "Flags from FILE" section of --helpfull is a file of this tree.
bool InSourceTree(std::string file) {
  const std::string root = SourcePath("");
  if (file.rfind(root, 0) == 0) return Exists(file);
  if (!file.empty() && file[0] == '/') return false;
  while (file.rfind("./", 0) == 0 || file.rfind("../", 0) == 0) file = file.substr(file.find('/') + 1);
  return Exists(SourcePath(file));
}

class e2e_Help : public ::testing::TestWithParam<HelpCase> {
 protected:
  CommandResult Run(const std::string& flag) {
    const std::string dir = MakeTempDir();
    auto r = RunCommand({BinPath(GetParam().binary), flag}, dir + "/out.log", Millis(20000));
    RemoveTree(dir);
    EXPECT_OK(r);
    return r.ok() ? *r : CommandResult{};
  }
};

TEST_P(e2e_Help, HelpListsOnlyOwnFlagsAndHelpfullKeepsTheRest) {
  const CommandResult help = Run("--help");
  EXPECT_EQ(help.exit_status, 0) << help.output;
  EXPECT_EQ(help.output.find("Flags from"), std::string::npos) << help.output;
  std::set<std::string> listed;
  static const char kEntryRe[] = R"(^  --(\w+)=)";
  static const std::regex kEntry(kEntryRe);
  for (const std::string& line : GrepLines(help.output, kEntryRe)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, kEntry));
    EXPECT_TRUE(listed.insert(m[1]).second) << "--" << m[1] << " listed twice";
  }

  // --helpfull, gflags' listing by defining file: which flags are whose.
  const CommandResult full = Run("--helpfull");
  EXPECT_EQ(full.exit_status, 0) << full.output;
  std::set<std::string> own, foreign;
  static const std::regex kSection(R"(^  Flags from (.*):$)");
  static const std::regex kFlag(R"(^    -(\w+) )");
  bool in_tree = false;
  for (const std::string& line : GrepLines(full.output, ".")) {
    std::smatch m;
    if (std::regex_search(line, m, kSection)) {
      in_tree = InSourceTree(m[1]);
    } else if (std::regex_search(line, m, kFlag)) {
      (in_tree ? own : foreign).insert(m[1]);
    }
  }
  for (const char* library_flag : {"logtostderr", "v", "flagfile", "helpfull", "fromenv"}) {
    EXPECT_EQ(foreign.count(library_flag), 1u) << "--helpfull lacks --" << library_flag;
  }
  EXPECT_EQ(listed, own) << "--help must list exactly the flags defined in this tree";
  for (const std::string& f : listed) EXPECT_EQ(foreign.count(f), 0u) << "--" << f;
  for (const std::string& f : GetParam().key_flags) {
    EXPECT_EQ(listed.count(f), 1u) << "--help lacks --" << f << ":\n" << help.output;
  }
}

const HelpCase kCases[] = {
    {"relaxps-coordinator", {"bind", "num_servers", "consistency", "staleness", "recovery",
                             "checkpoint_every_s", "metrics_port"}},
    {"relaxps-server", {"coordinator", "bind", "store", "data_dir", "restore_from", "device",
                        "metrics_port"}},
    {"relaxps-worker", {"coordinator", "local", "model", "lr", "duration_s", "role", "device",
                        "metrics_port"}},
    {"relaxps-ctl", {"coordinator", "timeout_ms", "json", "keys_dir"}},
#ifdef RELAXPS_HELP_TEST_BENCH
    {"relaxps-bench-optimizer", {"device", "reps"}},
    {"relaxps-bench-zmq", {"sizes", "seconds"}},
    {"relaxps-bench-ps", {"configs", "sizes", "sparse"}},
    {"relaxps-bench-checkpoint", {"mb", "dir"}},
    {"relaxps-bench-incremental-checkpoint", {"dirty_pct", "keep"}},
    {"relaxps-bench-store", {"mb", "seconds"}},
    {"relaxps-bench-wal", {"workers", "dir"}},
    {"relaxps-bench-metrics", {"iterations", "reps"}},
#endif
};

INSTANTIATE_TEST_SUITE_P(Binaries, e2e_Help, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<HelpCase>& info) {
                           std::string name = info.param.binary;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace test
}  // namespace relaxps
