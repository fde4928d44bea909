// apps/internal/main_util: the command line of a re-execution, and the
// sanitizer builds' stretched timeouts.
#include "apps/internal/main_util.h"

#include <gflags/gflags.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>

DEFINE_int32(test_timeout_ms, 3000, "A timeout flag for ScaleTimeoutFlagsTest");
DEFINE_int32(test_huge_timeout_ms, 2000000000, "A timeout flag for ScaleTimeoutFlagsTest");
DEFINE_int32(test_period_ms, 200, "A flag ScaleTimeoutFlagsTest leaves alone");

namespace relaxps {
namespace {

using Args = std::vector<std::string>;

TEST(ReplaceFlagsTest, DropsTheNamedFlagsInEveryFormGflagsTakesAndAppendsTheNewOnes) {
  const Args args = {"relaxps-server",    "--coordinator=tcp://c:1", "--server_id=3",
                     "-restore_from",     "/old/ckpt",               "--data_dir=/d",
                     "--server_id",       "4",                       "-restore_from=x",
                     "--server_idle=1"};
  EXPECT_EQ(ReplaceFlags(args, {"server_id", "restore_from"},
                         {"--server_id=3", "--restore_from=latest"}),
            (Args{"relaxps-server", "--coordinator=tcp://c:1", "--data_dir=/d", "--server_idle=1",
                  "--server_id=3", "--restore_from=latest"}));
}

TEST(ReplaceFlagsTest, KeepsTheProgramNameAndAFlagfile) {
  EXPECT_EQ(ReplaceFlags({"server_id", "--flagfile=f"}, {"server_id"}, {"--server_id=0"}),
            (Args{"server_id", "--flagfile=f", "--server_id=0"}));
}

TEST(ScaleTimeoutFlagsTest, MultipliesOnlyTheNamedDefaultedFlagsAndSaturates) {
  gflags::FlagSaver saver;
  ScaleTimeoutFlags(5, {"test_timeout_ms", "test_huge_timeout_ms"});
  EXPECT_EQ(FLAGS_test_timeout_ms, 15000);
  EXPECT_EQ(FLAGS_test_huge_timeout_ms, INT32_MAX);
  EXPECT_EQ(FLAGS_test_period_ms, 200);
}

TEST(ScaleTimeoutFlagsTest, KeepsValuesGivenOnTheCommandLine) {
  gflags::FlagSaver saver;
  int argc = 2;
  char arg0[] = "relaxps-test", arg1[] = "--test_timeout_ms=700";
  char* args[] = {arg0, arg1, nullptr};
  char** argv = args;
  gflags::ParseCommandLineFlags(&argc, &argv, false);
  ScaleTimeoutFlags(5, {"test_timeout_ms"});
  EXPECT_EQ(FLAGS_test_timeout_ms, 700);
  ScaleTimeoutFlags(1, {"test_huge_timeout_ms"});
  EXPECT_EQ(FLAGS_test_huge_timeout_ms, 2000000000);
}

TEST(ScaleTimeoutFlagsTest, SanitizedBuildsStretchTheirTimeoutsAsTheTestsDo) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The binaries' factor is the one the suite scales its own waits by
  // (RELAXPS_TEST_TIME_SCALE, set by CTest).
  const char* scale = std::getenv("RELAXPS_TEST_TIME_SCALE");
  ASSERT_NE(scale, nullptr);
  EXPECT_GT(SanitizerTimeScale(), 1);
  EXPECT_EQ(SanitizerTimeScale(), std::atoi(scale));
#else
  EXPECT_EQ(SanitizerTimeScale(), 1);
#endif
}

TEST(ScaleTimeoutFlagsDeathTest, RefusesAFlagThatIsNotAnInt32) {
  EXPECT_DEATH(ScaleTimeoutFlags(2, {"no_such_flag_ms"}), "not an int32 flag");
}

}  // namespace
}  // namespace relaxps
