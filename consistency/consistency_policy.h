// Forwards to the public header <relaxps/consistency_policy.h> (kept so in-tree includes of
// "consistency/consistency_policy.h" keep working).
#ifndef RELAXPS_CONSISTENCY_CONSISTENCY_POLICY_H_
#define RELAXPS_CONSISTENCY_CONSISTENCY_POLICY_H_

#include <glog/logging.h>  // In-tree code gets glog through this header.
#include "relaxps/consistency_policy.h"

#endif  // RELAXPS_CONSISTENCY_CONSISTENCY_POLICY_H_
