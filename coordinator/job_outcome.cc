#include "coordinator/job_outcome.h"

namespace relaxps {

bool JobOutcome::End(const std::string& why, int64_t now_ms) {
  if (done_) return false;
  done_ = true;
  done_at_ms_ = now_ms;
  done_reason_ = why;
  return true;
}

bool JobOutcome::Fail(const std::string& reason, int64_t now_ms) {
  if (!error_.empty()) return false;
  error_ = reason;
  failed_at_ms_ = now_ms;
  return true;
}

void JobOutcome::Resume(bool done, const std::string& error, int workers_left, int64_t now_ms) {
  if (!error.empty()) {
    error_ = error;
    failed_at_ms_ = now_ms;
  }
  if (done) {
    done_ = true;
    done_at_ms_ = now_ms;
  }
  workers_left_ = workers_left;
}

JobOutcome::Exit JobOutcome::ShouldExit(int64_t now_ms, int live_workers,
                                        int live_servers) const {
  if (failed() && failed_exit_ms_ > 0 && now_ms - failed_at_ms_ >= failed_exit_ms_) {
    return Exit::kFailed;
  }
  if (!done_) return Exit::kStay;
  if (live_workers == 0 && live_servers == 0) return Exit::kEveryoneLeft;
  if (now_ms - done_at_ms_ >= done_grace_ms_) return Exit::kGraceOver;
  return Exit::kStay;
}

JobEnd JobOutcome::Verdict(const JobEndFacts& facts) const {
  if (facts.stepped_down) return {"stepped_down", result_.message(), kExitSteppedDown};
  if (failed()) return {"failed", error_, kExitJobFailed};
  if (!result_.ok()) return {"failed", result_.message(), kExitJobFailed};
  const int lost = facts.lost_workers;
  if (done_ && lost > 0) {
    return {"workers_lost",
            std::to_string(lost) + " worker(s) went silent without finishing or leaving (" +
                done_reason_ + ")",
            kExitWorkersLost};
  }
  const std::vector<std::string>& failed_workers = facts.failed_workers;
  if (done_ && !failed_workers.empty()) {
    std::string reason =
        std::to_string(failed_workers.size()) + " worker(s) failed: " + failed_workers[0];
    if (failed_workers.size() > 1) {
      reason += " (and " + std::to_string(failed_workers.size() - 1) + " more)";
    }
    return {"workers_failed", reason, kExitWorkersLost};
  }
  if (done_) return {"done", done_reason_, kExitDone};
  // Stopped before the job ended (Stop(): SIGTERM or SIGINT).
  if (!facts.ever_led) return {"stopped", "a standby coordinator was stopped", kExitDone};
  if (!facts.ends_by_itself) {
    return {"stopped", "stopped by its launcher (the job ends when it is stopped)", kExitDone};
  }
  return {"interrupted",
          "stopped before the job ended (" + std::to_string(facts.live_workers) +
              " worker(s) live, " + std::to_string(lost) + " lost)",
          kExitInterrupted};
}

bool JobOutcome::Finish(const JobEndFacts& facts) {
  if (finished_) return false;
  finished_ = true;
  job_end_ = Verdict(facts);
  if (job_end_.exit_code != kExitDone && result_.ok()) {
    result_ = AbortedError("job " + job_end_.verdict + ": " + job_end_.reason);
  }
  return true;
}

}  // namespace relaxps
