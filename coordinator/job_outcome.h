// JobOutcome: how a job ends, as the coordinator decides it.
//
// Owns the job's two ways out and their times: ended in order (End():
// relaxps-ctl shutdown, or every worker finished or left; workers finish
// their step and leave, then servers flush and exit) and failed (Fail(): a
// recovery policy gave up; clients learn why from their heartbeats). It
// counts the workers that left in order, says when the coordinator's loop
// may stop (ShouldExit), and computes the verdict once the loop stopped
// (Finish: the JobEnd and Run()'s result, coordinator.h).
//
// It does not look at members or leadership itself: the coordinator passes
// what the verdict needs (JobEndFacts) and acts on ShouldExit's answer.
//
// Invariants: the first End() and the first Fail() win (later reasons are
// ignored); a job can be both done and failed (the verdict says failed);
// Finish() computes job_end() at most once; result() is OK unless Abort()
// or a verdict other than "done" made it Aborted.
//
// Time is passed in (the coordinator's Clock, ms) so tests drive it.
//
// Thread-safety: not synchronized; the coordinator's loop thread, and
// result() / job_end() on the thread that ran the loop once it returned.
#ifndef RELAXPS_COORDINATOR_JOB_OUTCOME_H_
#define RELAXPS_COORDINATOR_JOB_OUTCOME_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/coordinator.h"

namespace relaxps {

// What the verdict depends on besides the job's own end.
struct JobEndFacts {
  bool stepped_down = false;  // It lost its leadership (Leadership::StepDown).
  bool ever_led = false;      // It claimed the store (a term > 0).
  // The job ends by itself when its workers are done (exit_when_done and a
  // known number of workers); else only its launcher stops it.
  bool ends_by_itself = false;
  int lost_workers = 0;                     // Went silent without finishing.
  std::vector<std::string> failed_workers;  // Reported failing, with why.
  int live_workers = 0;
};

class JobOutcome {
 public:
  // `failed_exit_ms`: a failed job's loop stops this long after the failure
  // (0: never by itself). `done_grace_ms`: an ended job's loop stops this
  // long after the end even if members have not all left.
  JobOutcome(int64_t failed_exit_ms, int64_t done_grace_ms)
      : failed_exit_ms_(failed_exit_ms), done_grace_ms_(done_grace_ms) {}
  JobOutcome(const JobOutcome&) = delete;
  JobOutcome& operator=(const JobOutcome&) = delete;

  // The job ended in order at `now_ms` (`why` for logs and the verdict).
  // False if it had ended already.
  bool End(const std::string& why, int64_t now_ms);
  // The job failed at `now_ms`. False if it had failed already.
  bool Fail(const std::string& reason, int64_t now_ms);
  // A worker left in order (DEREGISTER).
  void WorkerLeft() { ++workers_left_; }
  // A resumed job (a new leader): its stored state, its timers from `now_ms`.
  void Resume(bool done, const std::string& error, int workers_left, int64_t now_ms);

  bool done() const { return done_; }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }  // "" unless failed().
  int workers_left() const { return workers_left_; }
  int64_t failed_at_ms() const { return failed_at_ms_; }
  int64_t done_grace_ms() const { return done_grace_ms_; }

  // Whether the loop may stop at `now_ms`, and why.
  enum class Exit {
    kStay,           // Not yet.
    kFailed,         // Failed failed_exit_ms ago: clients had time to learn why.
    kEveryoneLeft,   // Ended, and no live worker or server is left.
    kGraceOver,      // Ended done_grace_ms ago; some members never left.
  };
  Exit ShouldExit(int64_t now_ms, int live_workers, int live_servers) const;

  // The verdict as of now (see coordinator.h JobEnd).
  JobEnd Verdict(const JobEndFacts& facts) const;
  // Run()'s result becomes Aborted(`why`).
  void Abort(const std::string& why) { result_ = AbortedError(why); }
  // Once the loop stopped: computes job_end() from `facts` (and makes the
  // result Aborted if the verdict is not "done"). False (nothing changes)
  // if it ran before.
  bool Finish(const JobEndFacts& facts);
  const Status& result() const { return result_; }
  const JobEnd& job_end() const { return job_end_; }

 private:
  // Constant after construction.
  const int64_t failed_exit_ms_;
  const int64_t done_grace_ms_;

  bool done_ = false;
  int64_t done_at_ms_ = 0;
  std::string done_reason_;  // Why it ended in order ("" when resumed).
  std::string error_;
  int64_t failed_at_ms_ = 0;
  int workers_left_ = 0;
  Status result_;
  JobEnd job_end_;
  bool finished_ = false;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_JOB_OUTCOME_H_
