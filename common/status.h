// Forwards to the public header <relaxps/status.h> (kept so in-tree includes of
// "common/status.h" keep working).
#ifndef RELAXPS_COMMON_STATUS_H_
#define RELAXPS_COMMON_STATUS_H_

#include <glog/logging.h>  // In-tree code gets glog through this header.
#include "relaxps/status.h"

#endif  // RELAXPS_COMMON_STATUS_H_
