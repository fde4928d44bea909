// relaxps::EventLog: structured events, the interface programs read
// (docs/events.md; the schema is docs/events.schema.json). Log lines are for
// people; anything a script, the launcher or a test needs to know (a failover,
// a restart, progress, the result) is an event.
//
// An EventLog appends JSON Lines, one object per event:
//   {"v":1,"ts_unix_ms":...,"mono_ms":...,"process":"worker-0","kind":"progress",...}
// `v` is the schema version (kSchemaVersion), `ts_unix_ms` and `mono_ms` come
// from the Clock (wall and monotonic milliseconds), `process` names the
// emitting process ("coordinator", "server-2", "worker-0", "evaluator"),
// `kind` says which of the documented events it is, and the kind's fields
// follow. Several processes may share one file (e.g. <out_dir>/events.jsonl):
// the file is opened with O_APPEND and each line is written with one write(),
// so lines of different processes never interleave.
//
// Writing never fails the caller: an I/O error (disk full, file removed from
// under a read-only mount...) is counted (write_errors()) and logged once; the
// process goes on.
//
// A trainer linking the client library passes its EventLog in
// ClientOptions::events: the client's own events (registration, a server
// lost, a failover) then land in the same file, under the same process name.
//
// Thread-safety: all methods are safe to call from multiple threads.
#ifndef RELAXPS_EVENTS_H_
#define RELAXPS_EVENTS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "relaxps/clock.h"
#include "relaxps/status.h"

namespace relaxps {

// One field value of an event, encoded as JSON when it is made. Integers,
// doubles (a NaN or infinity becomes null), booleans, strings (escaped; bytes
// that are not UTF-8 become U+FFFD) and lists of integers.
class EventValue {
 public:
  EventValue(bool v) : json_(v ? "true" : "false") {}  // NOLINT: implicit by design.
  EventValue(int v) : json_(std::to_string(v)) {}      // NOLINT
  EventValue(long v) : json_(std::to_string(v)) {}     // NOLINT
  EventValue(long long v) : json_(std::to_string(v)) {}           // NOLINT
  EventValue(unsigned v) : json_(std::to_string(v)) {}            // NOLINT
  EventValue(unsigned long v) : json_(std::to_string(v)) {}       // NOLINT
  EventValue(unsigned long long v) : json_(std::to_string(v)) {}  // NOLINT
  EventValue(double v);                                           // NOLINT
  EventValue(const char* v) : EventValue(std::string_view(v)) {}  // NOLINT
  EventValue(const std::string& v) : EventValue(std::string_view(v)) {}  // NOLINT
  EventValue(std::string_view v);                                 // NOLINT
  EventValue(const std::vector<int>& v);                          // NOLINT

  const std::string& json() const { return json_; }

 private:
  std::string json_;
};

// One field of an event: {"server", 2}, {"reason", why}.
struct EventField {
  std::string key;
  EventValue value;
};
using EventFields = std::vector<EventField>;

// `s` as a JSON string literal: quoted, with ", \ and control characters
// escaped and invalid UTF-8 replaced by U+FFFD.
std::string JsonQuote(std::string_view s);

struct EventLogOptions {
  // JSON Lines file, created if missing and appended to (O_APPEND). Empty:
  // no file (events still reach on_line).
  std::string path;
  // The `process` field of every event, e.g. "coordinator", "server-2",
  // "worker-0", "evaluator". May be set later (set_process()), e.g. once a
  // worker learned its id; an empty name is written as "".
  std::string process;
  // Source of ts_unix_ms and mono_ms (nullptr: the real clock). Tests pass
  // a FakeClock. Must outlive the log.
  const Clock* clock = nullptr;
  // Called with each line (without its newline) after it was written, on
  // the emitting thread, outside the log's lock: e.g. the coordinator's ring
  // of recent events that relaxps-ctl events streams. Must not block, and
  // must not emit on this log.
  std::function<void(const std::string& line)> on_line;
};

class EventLog {
 public:
  // The `v` field: bumped when a kind's fields change incompatibly.
  static constexpr int kSchemaVersion = 1;

  // Opens (creates) options.path for appending. IOError naming the path if it
  // cannot be opened (a missing directory, no permission).
  static StatusOr<std::shared_ptr<EventLog>> Open(const EventLogOptions& options);

  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  ~EventLog();

  // Appends one event of `kind` (one of the kinds in docs/events.md) with
  // `fields` (in this order, after the common ones). REQUIRES: no field is
  // named v, ts_unix_ms, mono_ms, process or kind, and no two alike.
  void Emit(std::string_view kind, const EventFields& fields = {});

  void set_process(const std::string& process);
  std::string process() const;
  const std::string& path() const { return options_.path; }

  // Events written to the file (or, without a file, emitted).
  uint64_t events_written() const { return written_.load(); }
  // Events that could not be written (I/O errors, short writes).
  uint64_t write_errors() const { return errors_.load(); }

 private:
  EventLog(const EventLogOptions& options, int fd);

  // Constant after construction.
  const EventLogOptions options_;
  const Clock* const clock_;
  const int fd_;  // -1: no file.

  mutable std::mutex mu_;
  std::string process_;  // Guarded by mu_.

  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> errors_{0};
};

// Emits on `log` unless it is null: for components whose event log is
// optional (e.g. ClientOptions::events). Thread-safe.
inline void EmitEvent(EventLog* log, std::string_view kind, const EventFields& fields = {}) {
  if (log != nullptr) log->Emit(kind, fields);
}

}  // namespace relaxps

#endif  // RELAXPS_EVENTS_H_
