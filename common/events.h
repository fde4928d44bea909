// Forwards to the public header <relaxps/events.h> (the EventLog lives there
// because ClientOptions::events names it; in-tree code includes this one).
#ifndef RELAXPS_COMMON_EVENTS_H_
#define RELAXPS_COMMON_EVENTS_H_

#include "relaxps/events.h"

#endif  // RELAXPS_COMMON_EVENTS_H_
