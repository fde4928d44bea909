// --events_file, shared by relaxps-coordinator, relaxps-server and
// relaxps-worker (both roles): where a binary appends its structured events
// (common/events.h, docs/events.md). Several processes may share one file.
#ifndef RELAXPS_APPS_INTERNAL_EVENTS_FLAGS_H_
#define RELAXPS_APPS_INTERNAL_EVENTS_FLAGS_H_

#include <memory>
#include <string>

#include "common/events.h"
#include "common/status.h"

namespace relaxps {

// --events_file as given ("" when off).
const std::string& EventsFileFlag();

// The event log of --events_file for `process` ("" lets the client or server
// name it once it knows its id); nullptr when --events_file is empty.
// IOError naming the file when it cannot be opened.
StatusOr<std::shared_ptr<EventLog>> EventsFromFlags(const std::string& process);

}  // namespace relaxps

#endif  // RELAXPS_APPS_INTERNAL_EVENTS_FLAGS_H_
