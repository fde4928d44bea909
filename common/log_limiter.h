// LogLimiter: at most one log line per reason per period.
//
// A peer that sends thousands of bad requests a second must not fill the
// disk with one WARNING line each: the owner asks Allow(reason) before
// logging, logs when it returns true, and mentions how many lines of that
// reason were suppressed since the last one. Reasons are chosen by the
// caller from a bounded set (message type and status code, never text from
// the wire), so the table stays small.
//
// LOG_LIMITED(severity, limiter, kind) wraps the pattern: one line per kind
// per period, prefixed with how many lines of that kind were suppressed
// since the last one:
//   LOG_LIMITED(WARNING, rpc_->log_limiter(), "register/too many members")
//       << "refused a worker REGISTER: " << status;
// logs "[12 more register/too many members since the last such line] refused
// ..." at most once a second.
//
// Thread-safety: not synchronized; use from one thread (a server's loop).
#ifndef RELAXPS_COMMON_LOG_LIMITER_H_
#define RELAXPS_COMMON_LOG_LIMITER_H_

#include <cstdint>
#include <string>
#include <unordered_map>

#include <glog/logging.h>

#include "common/clock.h"

namespace relaxps {

class LogLimiter {
 public:
  // `clock` (nullptr: real time) must outlive the limiter.
  explicit LogLimiter(const Clock* clock = nullptr, int64_t period_ms = 1000)
      : clock_(ClockOrReal(clock)), period_ms_(period_ms) {}

  // True if a line for `reason` may be logged now (the first call, or the
  // first one `period_ms` after the last allowed line); `*suppressed` is then
  // the number of calls refused for it since. False otherwise (counted).
  bool Allow(const std::string& reason, uint64_t* suppressed) {
    const int64_t now = clock_->NowMs();
    auto [it, inserted] = entries_.try_emplace(reason, Entry{now, 0});
    if (!inserted && now - it->second.last_ms < period_ms_) {
      ++it->second.suppressed;
      return false;
    }
    *suppressed = inserted ? 0 : it->second.suppressed;
    it->second = Entry{now, 0};
    return true;
  }

 private:
  struct Entry {
    int64_t last_ms;
    uint64_t suppressed;
  };
  // Constant after construction (assignable, so an owner can set its clock).
  const Clock* clock_;
  int64_t period_ms_;
  std::unordered_map<std::string, Entry> entries_;
};

// The prefix LOG_LIMITED puts before a line: empty when nothing was
// suppressed, else "[N more <kind> since the last such line] ".
inline std::string SuppressedNote(const std::string& kind, uint64_t suppressed) {
  if (suppressed == 0) return "";
  return "[" + std::to_string(suppressed) + " more " + kind + " since the last such line] ";
}

}  // namespace relaxps

// `limiter` is a LogLimiter*, `kind` a std::string (a bounded set of values:
// message type, reason; never text from the wire). Streams like LOG().
#define LOG_LIMITED(severity, limiter, kind)                                        \
  for (uint64_t relaxps_suppressed_ = 0, relaxps_once_ = 1; relaxps_once_ != 0;     \
       relaxps_once_ = 0)                                                            \
    for (const std::string relaxps_kind_(kind);                                      \
         relaxps_once_ != 0 && (limiter)->Allow(relaxps_kind_, &relaxps_suppressed_); \
         relaxps_once_ = 0)                                                          \
  LOG(severity) << ::relaxps::SuppressedNote(relaxps_kind_, relaxps_suppressed_)

#endif  // RELAXPS_COMMON_LOG_LIMITER_H_
