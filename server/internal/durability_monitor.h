// DurabilityMonitor: whether the state a server acknowledges is on disk, in
// a form programs can read.
//
// The server reports the outcome of every durable write it makes: a
// checkpoint, a store flush, a WAL sync (--wal_per_update). The monitor turns
// those into one state: durable, or not durable since a wall-clock time and
// why. Going from durable to not durable (per kind of write) emits a
// `disk_error` event and a log line; further failures of a kind already
// failing are counted and logged at most once per `log_period_ms` (with the
// number of lines left out); the first success of every failing kind emits
// `durable_again`. ServerStats (relaxps-ctl stats) and the Prometheus gauges
// read the same state.
//
// With OnDiskError::kStop, OnFailure returns the Aborted status the server
// must stop with (ending the job with a clear error); with kContinue it
// returns OK and the server trains on, not durably, until a write succeeds.
//
// Thread-safety: not synchronized; the server's loop thread owns it.
#ifndef RELAXPS_SERVER_INTERNAL_DURABILITY_MONITOR_H_
#define RELAXPS_SERVER_INTERNAL_DURABILITY_MONITOR_H_

#include <array>
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/events.h"
#include "common/log_limiter.h"
#include "common/status.h"
#include "common/wire.h"
#include "server/server.h"

namespace relaxps {

namespace server_internal {

// The durable writes a server makes.
enum class DurableWrite { kCheckpoint = 0, kFlush = 1, kWal = 2 };
inline constexpr int kNumDurableWrites = 3;
// "checkpoint", "flush", "wal": the `write` field of the events.
const char* DurableWriteName(DurableWrite w);

class DurabilityMonitor {
 public:
  struct Options {
    OnDiskError on_error = OnDiskError::kContinue;
    // Events (disk_error, durable_again); nullptr: none. Borrowed.
    EventLog* events = nullptr;
    // Time of `since` and of the log throttle (nullptr: real time). Borrowed.
    const Clock* clock = nullptr;
    // At most one log line per kind of write per period while it keeps
    // failing (a full disk fails every flush and sync).
    int64_t log_period_ms = 10000;
  };

  explicit DurabilityMonitor(const Options& options);
  DurabilityMonitor(const DurabilityMonitor&) = delete;
  DurabilityMonitor& operator=(const DurabilityMonitor&) = delete;

  // The server's id for events and log lines (known after registration).
  void set_server_id(int id) { server_id_ = id; }

  // A write of kind `what` failed with `error` (not OK). Returns OK when the
  // server may train on (kContinue), or an Aborted status naming the write,
  // the error and --on_disk_error=stop that the server must stop with.
  [[nodiscard]] Status OnFailure(DurableWrite what, const Status& error);
  // A write of kind `what` succeeded: it no longer fails; when no kind
  // fails any more the server is durable again.
  void OnSuccess(DurableWrite what);

  bool durable() const { return failing_ == 0; }
  // Wall-clock ms (Unix epoch) of the first failure of the current outage;
  // 0 while durable.
  int64_t not_durable_since_unix_ms() const { return since_unix_ms_; }
  // Failed writes since start, of every kind.
  uint64_t failures() const { return failures_total_; }
  uint64_t failures(DurableWrite what) const { return kinds_[Index(what)].failures; }
  // The latest failure ("<write>: <status>"), kept after recovery; "" if none.
  const std::string& last_error() const { return last_error_; }

  // Sets the durability fields of `stats`.
  void FillStats(wire::ServerStats* stats) const;

 private:
  struct Kind {
    bool failing = false;
    uint64_t failures = 0;
  };
  static int Index(DurableWrite w) { return static_cast<int>(w); }

  // Constant after construction.
  const Options options_;
  const Clock* const clock_;

  // Loop thread.
  int server_id_ = -1;
  std::array<Kind, kNumDurableWrites> kinds_{};
  int failing_ = 0;  // Kinds whose latest write failed.
  int64_t since_unix_ms_ = 0;
  int64_t since_mono_ms_ = 0;
  uint64_t failures_total_ = 0;
  std::string last_error_;
  LogLimiter log_limiter_;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_DURABILITY_MONITOR_H_
