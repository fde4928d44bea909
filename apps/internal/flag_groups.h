// How each relaxps binary groups its own flags in --help
// (common/flag_help.h). A flag no group names is listed under "Other
// flags", so a new flag is never hidden; a group naming a flag the binary
// does not define is a programmer error (checked when --help runs, which
// tests/e2e/help_test.cc does for every binary).
#ifndef RELAXPS_APPS_INTERNAL_FLAG_GROUPS_H_
#define RELAXPS_APPS_INTERNAL_FLAG_GROUPS_H_

#include <vector>

#include "common/flag_help.h"

namespace relaxps {

std::vector<FlagGroup> CoordinatorFlagGroups();
std::vector<FlagGroup> ServerFlagGroups();
std::vector<FlagGroup> WorkerFlagGroups();
std::vector<FlagGroup> CtlFlagGroups();

}  // namespace relaxps

#endif  // RELAXPS_APPS_INTERNAL_FLAG_GROUPS_H_
