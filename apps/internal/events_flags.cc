#include "apps/internal/events_flags.h"

#include <gflags/gflags.h>

DEFINE_string(events_file, "",
              "Append structured events (JSON Lines, docs/events.md) to this file; processes of "
              "a job may share one, e.g. OUT_DIR/events.jsonl (empty: none)");

namespace relaxps {

const std::string& EventsFileFlag() { return FLAGS_events_file; }

StatusOr<std::shared_ptr<EventLog>> EventsFromFlags(const std::string& process) {
  if (FLAGS_events_file.empty()) return std::shared_ptr<EventLog>();
  EventLogOptions options;
  options.path = FLAGS_events_file;
  options.process = process;
  return EventLog::Open(options);
}

}  // namespace relaxps
