// ClientRecovery: the client's side of a recovery policy
// (include/relaxps/recovery_policy.h, docs/recovery.md).
//
// The client core (client/) runs the mechanisms: it routes request parts by
// the shard map, parks and resends them, stamps exactly-once keys, keeps a
// worker's local copies of pulled ranges and rows, watches the map, holds
// requests to a restarted server behind a gate. It never asks which policy
// runs. At well-defined points it calls the hooks of its ClientRecovery
// object, which decides (what happens to a part whose server failed, what
// happens when the map changes) and drives the mechanisms back through the
// ClientMechanisms interface below, which the core implements (as Linux's
// tcp_congestion_ops: the core calls hooks, the module calls back).
//
// Life cycle: the core makes its object with
// RecoveryPolicy::NewClientRecovery(options) right after registering, reads
// features() once (they are constant), calls Attach() with its mechanisms
// before installing the first shard map, and OnStarted() at the end of
// Connect() (before a worker waits at the start barrier). The object lives
// as long as the client.
//
// Replay (upstream backup) as a plug-in: a role that keeps its acknowledged
// updates sets features().report_acked_pushes and exactly_once_keys and
// hold_restarted_servers; it copies what OnPushAcked() reports into its log,
// trims the log when OnHeartbeatReply() announces a newer complete
// checkpoint, and on OnMapInstalled() with a restarted server resends its
// logged parts for that server in order with ClientMechanisms::Replay()
// (which passes the gate) and then calls ReleaseServer(): only then do new
// requests (and parts parked during the outage) reach that server.
//
// Thread-safety: hooks are called from any thread (callers of the data
// path, the transport's I/O thread, the heartbeat thread), concurrently;
// an implementation synchronizes its own state. Hooks must not block (no
// waiting for a reply): a hook that sends uses the asynchronous mechanisms.
// Mechanisms are safe to call from hooks and from any thread, except where
// a mechanism says otherwise.
#ifndef RELAXPS_RECOVERY_CLIENT_RECOVERY_H_
#define RELAXPS_RECOVERY_CLIENT_RECOVERY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/events.h"
#include "common/buffer.h"
#include "common/shard_map.h"
#include "common/status.h"
#include "common/wire.h"
#include "relaxps/recovery_policy.h"

namespace relaxps {
namespace recovery {

// What a client tells its policy's role object when making it (copied from
// ClientOptions). A role reads the limits its behaviour needs.
struct ClientRecoveryOptions {
  // A worker (joins the live worker set, trains); false: an observer
  // (relaxps-ctl, tools), which only reads and keeps no recovery state.
  bool worker = true;
  // Deadline of each request to a server.
  int request_timeout_ms = 10000;
  // Heartbeat period to the coordinator (OnHeartbeat runs once per period).
  int heartbeat_ms = 200;
  // A server that has not answered a request that cannot legitimately
  // wait (see ClientFeatures::lost_after_ms) for this long counts as lost.
  int local_after_ms = 200;
  // Bound of a log of this client's acknowledged updates kept for replay
  // (upstream backup), in bytes of payload; beyond it the oldest entries
  // are dropped and must be counted as lost.
  int64_t update_log_bytes = int64_t{1} << 30;
  // The job policy's options with their values (JobConfig.recovery_options).
  RecoveryOptionValues policy_options;
};

// The mechanisms the client core runs for the role, chosen once
// (ClientRecovery::features()). Each names a mechanism, not a policy.
struct ClientFeatures {
  // Pushes carry the exactly-once key (sender, incarnation, push_id) per
  // request part, kept by resends and re-routes; dense requests are then
  // never split into several parts per server (keys are per part).
  bool exactly_once_keys = false;
  // Chain routing: requests carry the job epoch and go to the head of their
  // range's (or sparse bucket's) chain in the current map, sparse requests
  // one part per bucket; a server the new map marks dead has its in-flight
  // requests cancelled (so they are re-routed); a WrongShard reply with a
  // map installs it and re-routes; a reply from a server the current map
  // shows dead is refused; the first acknowledged resend of each epoch is
  // logged ("chain failover", scripts/run_local.sh).
  bool chain_routing = false;
  // Workers: keep a copy of every dense range and sparse row pulled
  // (client/internal/local_replica.h, local_rows.h) so that a lost
  // server's parts can be served locally (PartAction::kServeLocally).
  // Needs local_after_ms > 0 and disconnect_probe_ms > 0.
  bool local_copies = false;
  // With local_copies: a closed connection to a server is probed and an
  // unanswered probe takes the server local at once.
  bool probe_on_disconnect = false;
  // > 0: the deadline of requests that cannot legitimately wait at a
  // consistency gate (pushes and clocks; pulls under async) is at most
  // this; 0: every request gets request_timeout_ms.
  int lost_after_ms = 0;
  // Gate: data requests to a server at an endpoint the map names after a
  // restart (a new endpoint for the same id) are held until the role calls
  // ClientMechanisms::ReleaseServer(); Replay() passes the gate. Endpoints
  // known at registration and a server's first endpoint are released
  // already.
  bool hold_restarted_servers = false;
  // Call OnPushAcked() for every push part a server acknowledged.
  bool report_acked_pushes = false;
};

// What happens to a request part.
enum class PartAction {
  kSend,           // BeforeSend: send it.
  kFail,           // Fail it with its error.
  // OnServerFailed: park it until the map names a new endpoint for its
  // server (it restarted), then resend it there; fail it at the client's
  // recovery_timeout_ms.
  kPark,
  // OnServerFailed: route it again with the current map now if the map
  // changed since it was sent (a new head), else park it until the next
  // map or heartbeat (ClientMechanisms::RetryParkedBefore); fail it at
  // recovery_timeout_ms. Keeps its exactly-once key.
  kReroute,
  // BeforeSend / OnPartLost: fail it at once so the data path serves it
  // from this worker's copy (OnPartLost: the holder goes local first).
  kServeLocally,
  // OnPartLost: the map names a new live server at another endpoint for
  // the part's server: route it again there now (if reroutes are left,
  // else serve it locally).
  kSendToReplacement,
};

// A request part whose server failed with Unavailable or DeadlineExceeded
// (the job has not failed).
struct FailedPart {
  int server = -1;       // The server it was sent to.
  std::string endpoint;  // That server's endpoint when it was sent.
  // The server holding the part's range or bucket in the current map (under
  // chain routing its head; -1: none known), else `server`.
  int holder = -1;
  Status error;
  bool rows = false;         // A sparse (row) part, else a dense one.
  bool can_reroute = false;  // kSendToReplacement is allowed (reroutes left).
  // The current map (never null).
  std::shared_ptr<const ShardMap> map;
};

// The answer of OnPartLost.
struct LostPartDecision {
  PartAction action = PartAction::kFail;
  // kServeLocally: the server that goes local (usually the holder) and its
  // endpoint when it was lost.
  int local_server = -1;
  std::string endpoint;
};

// A push part a server acknowledged (ClientFeatures::report_acked_pushes),
// with what is needed to send it again (ClientMechanisms::Replay).
struct AckedPush {
  // The server the part was routed to when it was split (under chain
  // routing its range's head at that time).
  int server = -1;
  wire::MsgType type = wire::PUSH;  // PUSH, PUSH_PULL or PUSH_ROWS.
  std::string table;
  // Dense: the part's first key; rows: its bucket under chain routing, else 0.
  uint64_t key_begin = 0;
  KeyBuffer ids;      // PUSH_ROWS: the rows' ids (empty for dense).
  // The gradients (dense: key_begin .. + grads.size(); rows: ids.size() *
  // width). Both buffers may be the caller's, who may reuse them once the
  // request completed: copy what you keep (FloatBuffer::CopyOf).
  FloatBuffer grads;
  int64_t clock = 0;         // The clock the push was made at.
  uint64_t incarnation = 0;  // This client's registration.
  uint64_t push_id = 0;      // Its exactly-once key (0 without exactly_once_keys).
  // Dense: a later part of a push the client split (Header.push_continues):
  // a replay says so again, so it takes no optimizer step of its own.
  bool push_continues = false;
  // From the server's acknowledgement (Header.snapshot_seq, .pending): the
  // seq of the newest checkpoint the server had written when it replied, and
  // whether the push was accepted without being reflected yet (a BSP push
  // waiting for its round). A reflected push is in every checkpoint of a
  // larger seq.
  uint64_t snapshot_seq = 0;
  bool pending = false;
  // From a chain head's acknowledgement under asynchronous replication
  // (Header.chain_seq, .chain_head_since, .epoch; 0 otherwise): the push's
  // sequence number in its range's chain, the sequence number that head had
  // applied when it became head, and the job epoch at which it did.
  uint64_t chain_seq = 0;
  uint64_t chain_head_since = 0;
  uint64_t chain_head_epoch = 0;
  // Payload bytes (grads and ids): what a log of it costs.
  int64_t bytes() const {
    return static_cast<int64_t>(grads.size() * sizeof(float) + ids.size() * sizeof(uint64_t));
  }
};

// The mechanisms of the client core a role drives. Implemented by client/;
// valid from Attach() until the role is destroyed.
class ClientMechanisms {
 public:
  virtual ~ClientMechanisms() = default;

  // The client's time source (ClientOptions::clock), in ms.
  virtual int64_t NowMs() const = 0;
  // This worker's current clock.
  virtual int64_t clock() const = 0;
  // The current shard map (never null once Attach() returned).
  virtual std::shared_ptr<const ShardMap> map() const = 0;
  // This worker's id, and the client's structured event log (null: none;
  // docs/events.md lists the kinds a role may emit).
  virtual int worker_id() const = 0;
  virtual EventLog* events() const = 0;

  // ---- Map watch and parked parts --------------------------------------
  // Keeps one map watch outstanding (a GET_SHARD_MAP the coordinator holds
  // until its map changes), re-armed by each answer. No-op while one is
  // out. Workers only.
  virtual void WatchMap() = 0;
  // Sends again the parts parked by kReroute at or before `ms` (a server
  // refused them for now: an epoch it had not installed, a replica still
  // awaiting its state).
  virtual void RetryParkedBefore(int64_t ms) = 0;

  // ---- Local copies (ClientFeatures::local_copies) ---------------------
  // Whether `server` is served locally, and where (endpoint) and how
  // (stalled: by a timeout, not a closed connection or the coordinator's
  // word) it was lost.
  virtual bool IsLocal(int server) const = 0;
  virtual bool LostAt(int server, std::string* endpoint, bool* stalled) const = 0;
  // Starts training locally on `server`'s ranges (lost at `endpoint`);
  // what waits on it is served locally now. No-op if it already is local.
  virtual void GoLocal(int server, const std::string& endpoint, bool stalled,
                       const std::string& why) = 0;
  // Ends local mode for `server`: the changes made locally go to it as raw
  // deltas; with `same_server` (it was slow, not lost) the pushes it may
  // have applied are resent with their exactly-once keys instead.
  virtual void Rejoin(int server, bool same_server, const char* why) = 0;
  // `spare` took over what the local `holder` held alone: it becomes local
  // in holder's place with every copy and change. False if holder is not
  // local.
  virtual bool TakeOver(int holder, int spare) = 0;
  // The dense range at (table, range_begin) is now held by `server` (its
  // chain's last replica).
  virtual void Reassign(const std::string& table, uint64_t range_begin, int server) = 0;
  // Answers the coordinator's re-seed requests in `reply` (SEED_COPY of this
  // worker's copies). Blocks for the coordinator's answers: only from
  // OnHeartbeatReply (the heartbeat thread).
  virtual void SendSeedCopies(const wire::HeartbeatReply& reply) = 0;
  // Probes the servers lost by a stall that the map still shows alive at
  // the same endpoint; one that answers rejoins (same_server). Blocks for
  // the probes: only from OnHeartbeatReply.
  virtual void ProbeStalledServers() = 0;

  // ---- Upstream backup (replay) ----------------------------------------
  // Sends `push` again to `server` as a PUSH (dense) or PUSH_ROWS with its
  // exactly-once key and clock, marked replayed (Header.replayed), past the
  // gate of hold_restarted_servers; `done` runs with the server's answer
  // and its header (snapshot_seq, pending as for OnPushAcked; a lost server
  // parks or fails it as OnServerFailed says). Not counted in
  // ClientStats::acked_updates again.
  virtual void Replay(int server, const AckedPush& push,
                      std::function<void(const Status&, const wire::Header& reply)> done) = 0;
  // Opens the gate of `server` (hold_restarted_servers) at its current
  // endpoint: the requests held for it are sent, in the order they were
  // held. A role that holds must release every restarted server.
  virtual void ReleaseServer(int server) = 0;
};

class ClientRecovery {
 public:
  ClientRecovery() = default;
  ClientRecovery(const ClientRecovery&) = delete;
  ClientRecovery& operator=(const ClientRecovery&) = delete;
  virtual ~ClientRecovery() = default;

  // The mechanisms this role needs; constant over its life.
  virtual const ClientFeatures& features() const = 0;

  // Called once, before the first map is installed. `mechanisms` outlives
  // the role.
  virtual void Attach(ClientMechanisms* mechanisms) { mechanisms_ = mechanisms; }
  // Called once at the end of Connect(), workers and observers alike (a
  // worker's heartbeat thread runs already; the start barrier follows).
  virtual void OnStarted() {}

  // Before a part is sent to `server` (the map's choice, after chain
  // routing). kSend or kServeLocally.
  virtual PartAction BeforeSend(int /*server*/, const ShardMap& /*map*/) const {
    return PartAction::kSend;
  }
  // A part (any request to a server, data or clock) failed because its
  // server looks lost: kFail, kPark or kReroute.
  virtual PartAction OnServerFailed(const FailedPart& /*part*/) const { return PartAction::kFail; }
  // A data part finally failed (after OnServerFailed's parking or
  // re-routing, if any) because its server looks lost: kFail,
  // kServeLocally or kSendToReplacement.
  virtual LostPartDecision OnPartLost(const FailedPart& /*part*/) { return {}; }

  // A newer shard map was installed (after parked parts were resent).
  // `restarted`: servers whose endpoint changed with it (a restart at a new
  // endpoint); under hold_restarted_servers their gate is closed until
  // ReleaseServer().
  virtual void OnMapInstalled(const ShardMap& /*map*/, const std::vector<int>& /*restarted*/) {}

  // Heartbeat thread, every heartbeat period before the heartbeat is sent.
  virtual void OnHeartbeat() {}
  // Heartbeat thread: the coordinator's answer (after a map it carries was
  // installed): re-seed requests, job state, checkpoint announcements.
  virtual void OnHeartbeatReply(const wire::HeartbeatReply& /*reply*/) {}

  // A push part was acknowledged by a server (report_acked_pushes only).
  virtual void OnPushAcked(const AckedPush& /*push*/) {}

  // Adds the role's counters (e.g. "replay_log_bytes", "replay_dropped") to
  // `counters` (ClientStats::recovery_counters).
  virtual void AddCounters(std::map<std::string, uint64_t>* /*counters*/) const {}

 protected:
  ClientMechanisms* mechanisms() const { return mechanisms_; }

 private:
  ClientMechanisms* mechanisms_ = nullptr;
};

}  // namespace recovery
}  // namespace relaxps

#endif  // RELAXPS_RECOVERY_CLIENT_RECOVERY_H_
