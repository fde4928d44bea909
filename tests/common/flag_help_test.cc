// OwnFlagsHelp (common/flag_help.h): only flags of this source tree, in the
// binary's groups and order, the rest under "Other flags", defaults shown as
// typed, descriptions wrapped; a group naming an unknown flag is a bug.
#include "common/flag_help.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace {

// This test's own file: a file of the source tree, as gflags records it.
const std::string kOwnFile = __FILE__;

gflags::CommandLineFlagInfo Flag(const std::string& name, const std::string& type,
                                 const std::string& default_value, const std::string& description,
                                 const std::string& file = kOwnFile) {
  gflags::CommandLineFlagInfo f{};  // Value-initialized: has_validator_fn, flag_ptr too.
  f.name = name;
  f.type = type;
  f.default_value = default_value;
  f.current_value = default_value;
  f.description = description;
  f.filename = file;
  f.is_default = true;
  return f;
}

std::vector<gflags::CommandLineFlagInfo> SomeFlags() {
  return {
      Flag("bind", "string", "tcp://127.0.0.1:*", "ZeroMQ endpoint to bind"),
      Flag("lr", "double", "0.01000000000000000021", "Learning rate"),
      Flag("data_dir", "string", "", "RocksDB directory"),
      Flag("verbose_name", "bool", "false", "Whatever"),
      Flag("logtostderr", "bool", "false", "log messages go to stderr", "./src/logging.cc"),
      Flag("flagfile", "string", "", "load flags from file",
           "/build/gflags-QLcAqI/gflags-2.2.2/src/gflags.cc"),
  };
}

TEST(FlagHelpTest, OwnFileIsRecognizedAndLibraryFilesAreNot) {
  EXPECT_TRUE(IsOwnFlagFile(kOwnFile));
  EXPECT_FALSE(IsOwnFlagFile("./src/logging.cc"));
  EXPECT_FALSE(IsOwnFlagFile("/build/gflags-QLcAqI/gflags-2.2.2/src/gflags_reporting.cc"));
  EXPECT_FALSE(IsOwnFlagFile("./tools/trace_analyzer_tool.cc"));
}

TEST(FlagHelpTest, ListsOwnFlagsInGroupsWithDefaults) {
  const std::string help =
      OwnFlagsHelp("prog [flags]", SomeFlags(),
                   {{"Training", {"lr"}}, {"Network", {"data_dir", "bind"}}});
  EXPECT_EQ(help.find("logtostderr"), std::string::npos) << help;
  EXPECT_EQ(help.find("flagfile"), std::string::npos) << help;
  EXPECT_EQ(help.find("Flags from"), std::string::npos) << help;
  // Groups in the given order, flags in the group's order, the rest last.
  const size_t training = help.find("\nTraining:\n");
  const size_t lr = help.find("  --lr=0.01 ");
  const size_t network = help.find("\nNetwork:\n");
  const size_t data_dir = help.find("  --data_dir=\"\" ");
  const size_t bind = help.find("  --bind=tcp://127.0.0.1:* ");
  const size_t other = help.find("\nOther flags:\n");
  const size_t verbose = help.find("  --verbose_name=false ");
  for (size_t p : {training, lr, network, data_dir, bind, other, verbose}) {
    ASSERT_NE(p, std::string::npos) << help;
  }
  EXPECT_EQ(help.rfind("prog [flags]\n", 0), 0u) << help;
  EXPECT_LT(training, lr);
  EXPECT_LT(lr, network);
  EXPECT_LT(network, data_dir);
  EXPECT_LT(data_dir, bind);
  EXPECT_LT(bind, other);
  EXPECT_LT(other, verbose);
  EXPECT_NE(help.find("--helpfull"), std::string::npos) << help;
}

TEST(FlagHelpTest, WithoutGroupsEveryOwnFlagIsUnderFlags) {
  const std::string help = OwnFlagsHelp("prog [flags]", SomeFlags(), {});
  EXPECT_NE(help.find("\nFlags:\n"), std::string::npos) << help;
  EXPECT_EQ(help.find("Other flags"), std::string::npos) << help;
  for (const char* name : {"--bind=", "--lr=", "--data_dir=", "--verbose_name="}) {
    EXPECT_NE(help.find(name), std::string::npos) << name << "\n" << help;
  }
}

TEST(FlagHelpTest, WrapsLongDescriptionsAt100Columns) {
  std::string words;
  for (int i = 0; i < 60; ++i) words += "word" + std::to_string(i) + " ";
  const std::string help = OwnFlagsHelp(
      "", {Flag("a_rather_long_flag_name_for_the_column", "int32", "12345", words)}, {});
  size_t lines = 0;
  for (const std::string& line : test::GrepLines(help, ".")) {
    EXPECT_LE(line.size(), 100u) << line;
    ++lines;
  }
  // The long name pushes the description to its own lines, all indented.
  EXPECT_NE(help.find("  --a_rather_long_flag_name_for_the_column=12345\n" +
                      std::string(32, ' ') + "word0 word1"),
            std::string::npos)
      << help;
  EXPECT_GT(lines, 5u);
  EXPECT_NE(help.find("word59"), std::string::npos);
}

TEST(FlagHelpDeathTest, GroupNamingAnUnknownOrForeignFlagIsABug) {
  EXPECT_DEATH(OwnFlagsHelp("", SomeFlags(), {{"Job", {"no_such_flag"}}}), "no_such_flag");
  EXPECT_DEATH(OwnFlagsHelp("", SomeFlags(), {{"Logging", {"logtostderr"}}}), "logtostderr");
  EXPECT_DEATH(OwnFlagsHelp("", SomeFlags(), {{"A", {"lr"}}, {"B", {"lr"}}}), "twice");
}

}  // namespace
}  // namespace relaxps
