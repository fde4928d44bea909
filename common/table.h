// Forwards to the public header <relaxps/table.h> (kept so in-tree includes of
// "common/table.h" keep working).
#ifndef RELAXPS_COMMON_TABLE_H_
#define RELAXPS_COMMON_TABLE_H_

#include <glog/logging.h>  // In-tree code gets glog through this header.
#include "relaxps/table.h"

#endif  // RELAXPS_COMMON_TABLE_H_
