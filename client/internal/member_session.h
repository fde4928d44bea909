// MemberSession: a worker's session with the coordinator, as its client
// keeps it: the heartbeat thread, whether the coordinator answers (and for
// how long it has not), what the coordinator announced (the job's end, the
// newest complete checkpoint), the one map watch kept outstanding, and the
// epoch whose chain failover was last logged.
//
// It owns the state and the decisions; the client does the I/O: each
// heartbeat it builds and sends the message (with checkpoint_seq()), then
// reports the outcome (Answered / Failed) and acts on what they return.
// Registration and the member token are the client's (client.cc).
//
// Rules:
//  - The coordinator is lost (the job fails) once no heartbeat was answered
//    for longer than `coordinator_timeout_ms`, counted from Start() or the
//    last answer (or registration again), on the client's Clock.
//  - Failed heartbeats are logged one in ten (ShouldLog), counting from the
//    first; an answer resets the count (healthy() again).
//  - The job's end is reported once (Answered's job_done), however many
//    replies say so; the checkpoint announced only grows.
//  - At most one map watch is out (BeginMapWatch / EndMapWatch).
//  - A failover is logged once per map epoch (FirstFailoverAckIn).
//
// Thread-safety: Start and Stop run on the thread that owns the client
// (its Init and destructor); Answered, Failed, Registered, ShouldLog and
// checkpoint_seq() on the heartbeat thread between them (or on one test
// thread without Start); healthy(), failures(), BeginMapWatch, EndMapWatch
// and FirstFailoverAckIn are safe from any thread.
#ifndef RELAXPS_CLIENT_INTERNAL_MEMBER_SESSION_H_
#define RELAXPS_CLIENT_INTERNAL_MEMBER_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/periodic_thread.h"
#include "proto/relaxps.pb.h"

namespace relaxps {
namespace client_internal {

class MemberSession {
 public:
  // `coordinator`: how it was given (--coordinator), for messages.
  // `clock` outlives this.
  MemberSession(std::string coordinator, int64_t coordinator_timeout_ms, const Clock* clock)
      : coordinator_(std::move(coordinator)),
        coordinator_timeout_ms_(coordinator_timeout_ms),
        clock_(clock) {}
  ~MemberSession() { Stop(); }
  MemberSession(const MemberSession&) = delete;
  MemberSession& operator=(const MemberSession&) = delete;

  // Starts heartbeating: `beat` every `period_ms` on its own thread, the
  // silence counted from now. Without Start() (not a worker) nothing runs.
  void Start(int period_ms, std::function<void()> beat);
  // Stops the heartbeat thread (waits for a beat in progress). Idempotent.
  void Stop();
  bool started() const { return thread_ != nullptr; }

  // What an answered heartbeat brought.
  struct News {
    bool job_done = false;  // The coordinator ended the job (first time only).
  };
  // The coordinator answered `reply` now.
  News Answered(const wire::HeartbeatReply& reply);
  // What a failed heartbeat means.
  struct Silence {
    int64_t silent_ms = 0;    // Since the last answer.
    bool lost = false;        // Over coordinator_timeout_ms: the job fails...
    std::string why;          // ...for this reason (when lost).
    bool log = false;         // Log this failure (one in ten).
  };
  Silence Failed();
  // Registered again (after the coordinator did not know it): counts as an
  // answer.
  void Registered();
  // Log a failure now (one in ten, counting from the first).
  bool ShouldLog() const { return failures_.load() % 10 == 0; }

  // The newest complete checkpoint the coordinator announced (its seq; 0:
  // none). Heartbeats carry it so the coordinator announces only newer ones.
  uint64_t checkpoint_seq() const { return checkpoint_seq_; }
  // The last heartbeat (or registration) was answered.
  bool healthy() const { return failures_.load() == 0; }
  int failures() const { return failures_.load(); }

  // True if the caller may send a map watch (none was out); then it must
  // call EndMapWatch when the watch is answered or failed.
  bool BeginMapWatch() { return !watching_map_.exchange(true); }
  void EndMapWatch() { watching_map_.store(false); }
  // True for the first acknowledged failover resend in `epoch` (and in no
  // later call for an epoch <= it).
  bool FirstFailoverAckIn(uint64_t epoch);

 private:
  // Constant after construction.
  const std::string coordinator_;
  const int64_t coordinator_timeout_ms_;
  const Clock* const clock_;

  // Heartbeat thread only.
  int64_t last_ok_ms_ = 0;
  uint64_t checkpoint_seq_ = 0;
  bool job_done_seen_ = false;
  std::unique_ptr<PeriodicThread> thread_;

  // Any thread.
  std::atomic<int> failures_{0};
  std::atomic<bool> watching_map_{false};
  std::atomic<uint64_t> failover_logged_epoch_{0};
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_MEMBER_SESSION_H_
