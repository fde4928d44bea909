// Forwards to the public header <relaxps/optimizer_options.h> (kept so in-tree includes of
// "common/optimizer_options.h" keep working).
#ifndef RELAXPS_COMMON_OPTIMIZER_OPTIONS_H_
#define RELAXPS_COMMON_OPTIMIZER_OPTIONS_H_

#include <glog/logging.h>  // In-tree code gets glog through this header.
#include "relaxps/optimizer_options.h"

#endif  // RELAXPS_COMMON_OPTIMIZER_OPTIONS_H_
