// apps/internal/main_util: the command line of a re-execution.
#include "apps/internal/main_util.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace relaxps
