// Forwards to the public header <relaxps/client.h> (kept so in-tree includes of
// "client/client.h" keep working).
#ifndef RELAXPS_CLIENT_CLIENT_H_
#define RELAXPS_CLIENT_CLIENT_H_

#include <glog/logging.h>  // In-tree code gets glog through this header.
#include "relaxps/client.h"

#endif  // RELAXPS_CLIENT_CLIENT_H_
