// Resender: request parts parked while their server is down, resent when it
// is back (the client's side of a recovery policy that restarts servers).
//
// When the client's recovery role says so (ClientRecovery::OnServerFailed),
// a part that fails because its server is gone (Unavailable,
// DeadlineExceeded) is parked with the endpoint it failed on. A part parked
// until its server restarts (PartAction::kPark) is taken out when a newer
// shard map names a different endpoint for that server; one parked until
// the next map (PartAction::kReroute: a new chain head may take it) is taken
// out by every map, or after a while by TakeParkedBefore. Either is sent
// again (its `make` builds the request anew). A part still parked at its
// give-up time fails with its original error.
//
// Thread-safety: all methods are safe from any thread; callbacks of taken
// parts are run by the caller, never under the resender's lock.
#ifndef RELAXPS_CLIENT_INTERNAL_RESENDER_H_
#define RELAXPS_CLIENT_INTERNAL_RESENDER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/shard_map.h"
#include "common/thread_annotations.h"
#include "common/transport.h"

namespace relaxps {
namespace client_internal {

class Resender {
 public:
  // A request part waiting for its server to come back.
  struct Parked {
    int server;
    std::string endpoint;  // The server's endpoint when it failed.
    std::function<Message()> make;
    Transport::ReplyCallback done;
    int64_t give_up_ms;  // On `clock`'s time line.
    Status error;        // Why it failed.
    int64_t parked_ms = 0;  // When it was parked (Park() sets it).
    // Taken only when its server's endpoint changes (else by any new map).
    bool until_restart = true;
    // Passes the gate of a restarted server (a replayed part).
    bool past_gate = false;
  };

  // `clock` must outlive the resender.
  Resender(const Clock* clock, int recovery_timeout_ms)
      : clock_(clock), recovery_timeout_ms_(recovery_timeout_ms) {}
  Resender(const Resender&) = delete;
  Resender& operator=(const Resender&) = delete;

  // True if `status` says the part's server looks lost (Unavailable,
  // DeadlineExceeded): the recovery role decides whether it waits.
  static bool IsServerLoss(const Status& status);
  // The give-up time of a part first failing now (`give_up_ms` == 0), or its
  // existing one; a part past it fails.
  int64_t GiveUpTime(int64_t give_up_ms) const;
  int64_t NowMs() const { return clock_->NowMs(); }

  // Parks `part`. Returns true for the first part parked for its server at
  // its endpoint (a new outage, worth one client_request_parked event),
  // false for the parts that follow, resends that fail again included.
  bool Park(Parked part);
  // After a resent part of `server` was acknowledged: true the first time
  // since Park() announced an outage of it (the first acknowledged push
  // after the server came back: one client_failover_acked event).
  bool FirstAckAfterPark(int server);
  // Takes the parts parked until the next map (a new map may name a new
  // head for them), and those parked until a restart whose server `map`
  // names a new, non-empty endpoint for.
  std::vector<Parked> TakeRestarted(const ShardMap& map);
  // Takes the parts `moved` says the current map routes elsewhere (their
  // server may never come back: it was drained).
  std::vector<Parked> TakeMoved(const std::function<bool(const Parked&)>& moved);
  // Takes the parts parked until the next map at or before `ms`.
  std::vector<Parked> TakeParkedBefore(int64_t ms);
  // Takes the parts past their give-up time, or every part if `all`.
  std::vector<Parked> TakeExpired(bool all);
  // Runs `done` of expired parts: with `all` if not OK, else with their own
  // error prefixed by how long the server was waited for.
  void FailExpired(const Status& all);

 private:
  const Clock* const clock_;
  const int recovery_timeout_ms_;

  Mutex mu_;
  std::vector<Parked> parked_ GUARDED_BY(mu_);
  // Server -> its last announced outage (see Park()): the endpoint it was
  // on, and whether a resent part was acknowledged since.
  struct Outage {
    std::string endpoint;
    bool acked = false;
  };
  std::map<int, Outage> announced_ GUARDED_BY(mu_);
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_RESENDER_H_
