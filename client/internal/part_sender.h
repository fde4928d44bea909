// PartSender: sends one request part to a server and decides what its reply
// means, for every part the client's data path (requests.cc), its local
// fallback and its recovery role send. It owns the routing of a part
// (RouteOf: under chain routing the head of its range's or bucket's chain in
// the current map), its deadline, the decision on a part whose server
// failed (the recovery role's OnServerFailed: fail it, re-route it, park it
// until the server restarts or the map changes, give up at the deadline),
// the re-route of a "moved" reply, the failover logged or announced on the
// first acknowledged resend, and the count of acknowledged updates
// (ClientStats::acked_updates).
//
// Rules:
//  - A part goes to RouteOf(request, server); a server without an endpoint
//    in the map fails it (Unavailable); so does a role that serves the
//    server's parts locally (BeforeSend kServeLocally: the caller serves it).
//    A restarted server's parts wait at the gate (ServerGate) unless
//    `past_gate` (a replay).
//  - Under chain routing, a WrongShard reply with a map installs the map
//    (Host::SetMap) and counts as Unavailable (the part is re-routed, never
//    failed for this); an answer of a server the current map shows dead is
//    refused (Unavailable).
//  - An acknowledged part counts as an update (acked_updates) only if it is
//    a push (PUSH, PUSH_PULL, PUSH_ROWS) that is not a raw delta, a replay
//    or a later part of a split push.
//  - The failover is reported for a resend (give_up_ms set) only: under
//    chain routing the first acknowledged resent push of each epoch
//    (Host::FirstFailoverAckIn; a resent CLOCK says nothing), else the first
//    acknowledgement of a server after parts to it were parked
//    (client_failover_acked).
//  - A part a server refused with ResourceExhausted (its limit on unread
//    replies: nothing of the part was applied) is sent again after a
//    backoff (kFirstRetryMs doubling to kMaxRetryMs, on a thread of its own:
//    DelayedTasks), neither failed nor counted as an error, until the
//    part's deadline (TimeoutMs from its first send); then it fails with
//    that refusal. Every data request (pulls, pushes, row requests, the
//    zero-copy variants, the local fallback's and the recovery role's
//    parts) goes through here, so all of them are retried alike.
//  - A PUSH_PULL part answered as a PUSH (reply type PUSH, no parameters:
//    the server applied its push and refused its pull part for its limit on
//    unread replies) is acknowledged as a push (acked_updates), and its pull
//    part is sent as a plain PULL of the next clock after the same backoff
//    (PullLater) until the part's deadline; a pull of a later clock waits at
//    the server's gate as pulls do. Its reply completes the part.
//  - A part whose server was lost (Resender::IsServerLoss) while the job is
//    alive is the role's (OnServerFailed): kPark waits for a new endpoint of
//    the server, kReroute routes it again now if the map changed since it
//    was sent (a newer epoch or another head), else waits for the next map;
//    either gives up at the resender's deadline (the part fails with the
//    server's error). Anything else fails the part.
//
// Thread-safety: every method is safe from any thread; a part's `done` runs
// on the transport's I/O thread, inline on the calling thread when the part
// fails before it is sent, or on the resends' thread (a resent part that
// fails before it is sent; StopResends' caller for one it cancels).
#ifndef RELAXPS_CLIENT_INTERNAL_PART_SENDER_H_
#define RELAXPS_CLIENT_INTERNAL_PART_SENDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "client/internal/delayed_tasks.h"
#include "client/internal/resender.h"
#include "client/internal/router.h"
#include "client/internal/server_gate.h"
#include "common/clock.h"
#include "common/events.h"
#include "common/shard_map.h"
#include "common/transport.h"
#include "consistency/consistency_policy.h"
#include "recovery/client_recovery.h"

namespace relaxps {
namespace client_internal {

class PartSender {
 public:
  // A "moved" reply may re-route a part this many times.
  static constexpr int kMaxReroutes = 3;
  // Backoff of a part refused with ResourceExhausted: the first resend after
  // kFirstRetryMs, each later one after twice the wait before, at most
  // kMaxRetryMs.
  static constexpr int64_t kFirstRetryMs = 1;
  static constexpr int64_t kMaxRetryMs = 50;

  struct Options {
    int worker_id = -1;            // This worker (events).
    int request_timeout_ms = 0;    // ClientOptions::request_timeout_ms.
    recovery::ClientFeatures features;  // The role's (chain_routing, lost_after_ms).
    EventLog* events = nullptr;    // Null: none.
  };

  // What the sender needs of its client.
  class Host {
   public:
    virtual ~Host() = default;
    // Not OK once the job failed: a failed part is then never kept.
    virtual Status JobError() const = 0;
    // Installs a map a server's reply carried, if newer.
    virtual Status SetMap(const wire::ShardMap& proto) = 0;
    // True for the first acknowledged failover resend in `epoch`
    // (MemberSession::FirstFailoverAckIn).
    virtual bool FirstFailoverAckIn(uint64_t epoch) = 0;
  };

  // Everything borrowed outlives this.
  PartSender(Options options, Transport* rpc, Router* router, Resender* resender,
             ServerGate* gate, const recovery::ClientRecovery* role,
             const ConsistencyPolicy* consistency, Host* host, const Clock* clock)
      : options_(std::move(options)), features_(options_.features), rpc_(rpc), router_(router),
        resender_(resender), gate_(gate), role_(role), consistency_(consistency), host_(host),
        clock_source_(clock) {}
  PartSender(const PartSender&) = delete;
  PartSender& operator=(const PartSender&) = delete;

  // Sends one request part to a server; `make` builds it (again for a
  // resend). `give_up_ms`: the deadline of a resent part (0: a first send).
  void Send(int server, std::function<Message()> make, Transport::ReplyCallback done,
            int64_t give_up_ms = 0, bool past_gate = false);
  // The server `request` should go to now: under chain routing
  // (ClientFeatures::chain_routing) the head of its range's or bucket's
  // chain in the current map (data requests), else `server`.
  int RouteOf(const Message& request, int server) const;
  // Deadline of a request of `type` to a server.
  int TimeoutMs(wire::MsgType type) const;
  // Without chain routing: true if `request` is a dense data part some of
  // whose keys the current map no longer gives `server` (a range move took
  // them, e.g. to drain it). Such a part whose server failed is not waited
  // for (the server may have left for good): FailMoved() hands it back to
  // be split again by the map.
  bool MovedAway(const Message& request, int server) const;
  // Completes `done` as a "moved" reply (WrongShard with the current map),
  // which the data path answers by routing the part again (Rerouted).
  void FailMoved(int server, const Transport::ReplyCallback& done) const;
  // True (and the map installed) if a failed part should be routed again:
  // the server sent a newer map than `version` with a routing error, and
  // `reroutes` are left.
  bool Rerouted(const Status& st, const Message& reply, uint64_t version, int reroutes);
  // What the recovery role is told about a part that failed at `server`
  // (sent at `endpoint`, held by `holder` now) with `error`.
  recovery::FailedPart NewFailedPart(int server, const std::string& endpoint, int holder,
                                     const Status& error, bool rows, int reroutes) const;
  // Update parts the servers acknowledged (ClientStats::acked_updates).
  uint64_t acked_updates() const { return acked_updates_.load(); }
  // Resends of parts a server refused with ResourceExhausted.
  uint64_t refused_resends() const { return refused_resends_.load(); }
  // Fails every part waiting to be sent again after a refusal with Aborted
  // (the client is shutting down), and later refused parts at once.
  // REQUIRES: called before the transport goes.
  void StopResends() { resends_.Stop(); }

 private:
  // A part's resends after ResourceExhausted refusals.
  struct Refusals {
    int64_t deadline_ms = 0;  // Of the part (its first send); 0: not sent yet.
    int64_t backoff_ms = 0;   // The last wait; 0: none yet.
  };
  void SendPart(int server, std::function<Message()> make, Transport::ReplyCallback done,
                int64_t give_up_ms, bool past_gate, Refusals refusals);
  // A part refused with `refusal`: sent again after the backoff, or failed
  // with the refusal if its deadline would pass first.
  void ResendRefused(int server, std::function<Message()> make, Transport::ReplyCallback done,
                     int64_t give_up_ms, bool past_gate, Refusals refusals,
                     const Status& refusal);
  // A PUSH_PULL part the server answered as a PUSH (`push_ack`): it applied
  // the push and refused the pull part (ServerImpl::RefusePullPart). The
  // pull part goes as a plain PULL after the backoff (ResendRefused), and its
  // reply completes `done` with the push's acknowledgement fields; `keyed`:
  // the push has an exactly-once key.
  void PullLater(int server, std::function<Message()> make, Transport::ReplyCallback done,
                 int64_t give_up_ms, bool past_gate, Refusals refusals,
                 const wire::Header& push_ack, bool keyed);
  // Logs the first acknowledged resend of each epoch (scripts/run_local.sh
  // reads it: kill -> first push acknowledged by the new head).
  void LogFailover(int server);

  // Constant after construction.
  const Options options_;
  const recovery::ClientFeatures& features_;  // options_.features.
  Transport* const rpc_;
  Router* const router_;
  Resender* const resender_;
  ServerGate* const gate_;
  const recovery::ClientRecovery* const role_;
  const ConsistencyPolicy* const consistency_;
  Host* const host_;
  const Clock* const clock_source_;

  std::atomic<uint64_t> acked_updates_{0};
  std::atomic<uint64_t> refused_resends_{0};
  DelayedTasks resends_;  // Last: its thread runs SendPart, which uses the members above.
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_PART_SENDER_H_
