// Forwards to the public header <relaxps/buffer.h> (kept so in-tree includes of
// "common/buffer.h" keep working).
#ifndef RELAXPS_COMMON_BUFFER_H_
#define RELAXPS_COMMON_BUFFER_H_

#include <glog/logging.h>  // In-tree code gets glog through this header.
#include "relaxps/buffer.h"

#endif  // RELAXPS_COMMON_BUFFER_H_
