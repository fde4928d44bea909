#include "client/internal/member_session.h"

#include <algorithm>
#include <utility>

namespace relaxps {
namespace client_internal {

void MemberSession::Start(int period_ms, std::function<void()> beat) {
  last_ok_ms_ = clock_->NowMs();
  thread_ = std::make_unique<PeriodicThread>(period_ms, std::move(beat), clock_);
}

void MemberSession::Stop() {
  if (thread_ != nullptr) thread_->Stop();
}

MemberSession::News MemberSession::Answered(const wire::HeartbeatReply& reply) {
  failures_.store(0);
  last_ok_ms_ = clock_->NowMs();
  News news;
  if (reply.job_done() && !job_done_seen_) {
    job_done_seen_ = true;
    news.job_done = true;
  }
  if (reply.has_latest_checkpoint()) {
    checkpoint_seq_ = std::max(checkpoint_seq_, reply.latest_checkpoint().seq());
  }
  return news;
}

MemberSession::Silence MemberSession::Failed() {
  Silence s;
  s.silent_ms = clock_->NowMs() - last_ok_ms_;
  if (s.silent_ms > coordinator_timeout_ms_) {
    s.lost = true;
    s.why = "no answer from the coordinator " + coordinator_ + " for " +
            std::to_string(s.silent_ms) + " ms (--coordinator_timeout_ms=" +
            std::to_string(coordinator_timeout_ms_) + ")";
  }
  s.log = failures_.fetch_add(1) % 10 == 0;
  return s;
}

void MemberSession::Registered() {
  failures_.store(0);
  last_ok_ms_ = clock_->NowMs();
}

bool MemberSession::FirstFailoverAckIn(uint64_t epoch) {
  uint64_t logged = failover_logged_epoch_.load();
  return logged < epoch && failover_logged_epoch_.compare_exchange_strong(logged, epoch);
}

}  // namespace client_internal
}  // namespace relaxps
