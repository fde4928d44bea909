// Forwards to the public header <relaxps/clock.h> (kept so in-tree includes of
// "common/clock.h" keep working).
#ifndef RELAXPS_COMMON_CLOCK_H_
#define RELAXPS_COMMON_CLOCK_H_

#include <glog/logging.h>  // In-tree code gets glog through this header.
#include "relaxps/clock.h"

#endif  // RELAXPS_COMMON_CLOCK_H_
