// Status and StatusOr: the error model of relaxps.
//
// Every operation that can fail at run time (network, disk, bad input, a lost
// peer) returns a Status or a StatusOr<T>. Aborting checks are reserved for
// broken invariants (programmer errors: value() of an error). A Status carries a code and a message; the
// code tells the caller what to do (retry on Unavailable, give up on
// InvalidArgument, ...), the message tells a person what happened.
//
// Status and StatusOr are values: cheap to copy when OK, safe to move between
// threads. They are not synchronized; do not share one object across threads
// without a lock.
#ifndef RELAXPS_STATUS_H_
#define RELAXPS_STATUS_H_

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>

namespace relaxps {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,   // Malformed request, bad flag, wrong size, NaN gradient.
  kNotFound = 2,          // Unknown table, missing file or checkpoint.
  kUnavailable = 3,       // Peer down or unreachable; the caller may retry.
  kIOError = 4,           // Disk or socket failure.
  kCorruption = 5,        // Stored data failed a consistency check.
  kAborted = 6,           // The operation was cancelled (shutdown, job failed).
  kDeadlineExceeded = 7,  // No answer before the request's deadline.
  kFailedPrecondition = 8,  // State does not allow the call (e.g. stale map).
  kInternal = 9,          // A bug or an unexpected library exception.
  kWrongShard = 10,       // Routing: the keys or table are not served by this
                          // server (the sender's shard map is stale).
  kPermissionDenied = 11,  // The sender may not send this (wrong role, key or
                           // connection; a forged control message).
  kResourceExhausted = 12,  // A limit on what a server holds for its peers is
                            // reached (unread replies): nothing of the request
                            // was applied; retry after a short wait.
  kMaxCode = kResourceExhausted,
};

// Returns "InvalidArgument", "NotFound", ... for logs and wire messages.
const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  // An OK status. Cheap: no allocation.
  Status() = default;
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // Empty for OK.
  const std::string& message() const;

  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<prefix>: <old message>"; OK stays OK.
  Status WithPrefix(const std::string& prefix) const;

  // Marks a status as deliberately ignored.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // nullptr means OK.
};

std::ostream& operator<<(std::ostream& os, const Status& s);

inline Status InvalidArgumentError(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
inline Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status UnavailableError(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
inline Status IOError(std::string m) { return Status(StatusCode::kIOError, std::move(m)); }
inline Status CorruptionError(std::string m) { return Status(StatusCode::kCorruption, std::move(m)); }
inline Status AbortedError(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
inline Status DeadlineExceededError(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }
inline Status FailedPreconditionError(std::string m) { return Status(StatusCode::kFailedPrecondition, std::move(m)); }
inline Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
inline Status WrongShardError(std::string m) { return Status(StatusCode::kWrongShard, std::move(m)); }
inline Status PermissionDeniedError(std::string m) { return Status(StatusCode::kPermissionDenied, std::move(m)); }
inline Status ResourceExhaustedError(std::string m) { return Status(StatusCode::kResourceExhausted, std::move(m)); }

// Holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // REQUIRES: !status.ok().
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design.
    if (status_.ok()) Die("StatusOr constructed from an OK Status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design.

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & { CheckOk(); return *value_; }
  const T& value() const& { CheckOk(); return *value_; }
  T&& value() && { CheckOk(); return std::move(*value_); }
  T* operator->() { CheckOk(); return &*value_; }
  const T* operator->() const { CheckOk(); return &*value_; }
  T& operator*() & { CheckOk(); return *value_; }
  const T& operator*() const& { CheckOk(); return *value_; }

 private:
  void CheckOk() const {
    if (ok()) return;
    std::ostringstream why;
    why << "StatusOr has no value: " << status_;
    Die(why.str());
  }
  [[noreturn]] static void Die(const std::string& why) {
    std::fprintf(stderr, "relaxps: %s\n", why.c_str());
    std::abort();
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace relaxps

#define RELAXPS_CONCAT_INNER_(a, b) a##b
#define RELAXPS_CONCAT_(a, b) RELAXPS_CONCAT_INNER_(a, b)

// Evaluates `expr` (a Status); returns it from the enclosing function if not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::relaxps::Status _relaxps_status = (expr);        \
    if (!_relaxps_status.ok()) return _relaxps_status; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, Foo());` declares x from a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(RELAXPS_CONCAT_(_relaxps_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // RELAXPS_STATUS_H_
