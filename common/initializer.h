// Forwards to the public header <relaxps/initializer.h> (kept so in-tree includes of
// "common/initializer.h" keep working).
#ifndef RELAXPS_COMMON_INITIALIZER_H_
#define RELAXPS_COMMON_INITIALIZER_H_

#include <glog/logging.h>  // In-tree code gets glog through this header.
#include "relaxps/initializer.h"

#endif  // RELAXPS_COMMON_INITIALIZER_H_
