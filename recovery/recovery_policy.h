// Forwards to the public header <relaxps/recovery_policy.h> (kept so in-tree includes of
// "recovery/recovery_policy.h" keep working).
#ifndef RELAXPS_RECOVERY_RECOVERY_POLICY_H_
#define RELAXPS_RECOVERY_RECOVERY_POLICY_H_

#include <glog/logging.h>  // In-tree code gets glog through this header.
#include "relaxps/recovery_policy.h"

#endif  // RELAXPS_RECOVERY_RECOVERY_POLICY_H_
