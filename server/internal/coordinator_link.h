// CoordinatorLink: a server's link to the coordinator of its job. It owns
// the connections to the coordinators (CoordinatorPeers; under
// --coordination the leader followed in ZooKeeper), the registration
// (REGISTER retried while the coordinator is unreachable), the server's
// identity with the coordinator (its id, its member token, the coordinator's
// connection identity and term), the heartbeat thread and what its failures
// mean, the rejoin after a fence, and DEREGISTER at the end of the job.
//
// What a reply says about the server's tables (the shard map, the live
// workers, the other servers' tokens) it hands to its Host, the server,
// which installs them; so do the decisions that are the server's or its
// recovery policy's (how a server declared dead comes back).
//
// Rules:
//  - Register retries while the coordinator answers DeadlineExceeded or
//    Unavailable (a standby without a leader to name: after a short wait),
//    up to `register_timeout_ms` on the Clock; any other error at once. The
//    reply's member token is this server's from then on.
//  - A heartbeat every `heartbeat_ms` (StartHeartbeat) reports the map
//    version last installed (set_map_version, published after the map) and
//    whether a replica here awaits its state (Host::awaiting_state, read
//    after the version). A heartbeat answered NotFound means the server was
//    declared dead: Host::OnDeclaredDead. Any other failure counts; once no
//    heartbeat was answered for longer than `coordinator_timeout_ms` (from
//    StartHeartbeat or the last answer) the server stops
//    (Host::ExitLater, Unavailable). Failures are logged one in ten.
//  - An answered heartbeat that reports the job failed stops the server
//    (Aborted); otherwise, on the loop thread, the coordinator of a reply's
//    term is adopted (AdoptCoordinator) and then the reply handed on
//    (Host::OnHeartbeatReply).
//  - A coordinator's identity is adopted only for a term not older than the
//    one held: a deposed coordinator's replies change nothing.
//  - Rejoin registers again with this server's id; on success the reply's
//    coordinator is adopted and the reply handed on (Host::OnRejoined), on
//    the loop thread; on failure the server counts as fenced (fenced()) and
//    is stopped (Host::StopNow).
//
// Thread-safety: Connect, Register (at start), Registered and
// StartHeartbeat run on the thread that starts the server, before its loop
// runs; the heartbeat thread runs HeartbeatOnce (and so Register again, in
// Rejoin); coordinator_identity(), coordinator_term(), AdoptCoordinator and
// ReportStateArrived run on the loop thread (or the starting thread before
// it); member_token(), wire_token(), set_map_version, fenced(), Deregister
// and StopHeartbeat are safe from any thread (StopHeartbeat not from the
// heartbeat thread).
#ifndef RELAXPS_SERVER_INTERNAL_COORDINATOR_LINK_H_
#define RELAXPS_SERVER_INTERNAL_COORDINATOR_LINK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/coordinator_peers.h"
#include "common/member_token.h"
#include "common/periodic_thread.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport.h"
#include "common/wire.h"
#include "coordinator/leader_watch.h"
#include "proto/relaxps.pb.h"

namespace relaxps {
namespace server_internal {

class CoordinatorLink {
 public:
  struct Options {
    // --coordinator (one endpoint or a comma-separated list) and/or
    // --coordination (zk://HOST:PORT/PATH: the leader is read and followed).
    std::string coordinator;
    std::string coordination;
    int zk_session_timeout_ms = 4000;
    int register_timeout_ms = 15000;
    int heartbeat_ms = 200;
    int coordinator_timeout_ms = 30000;
    // What this server registers with: its advertised endpoint and the
    // checkpoint part it restored at start, if any.
    std::string endpoint;
    std::optional<wire::ShardCheckpoint> restored_from;
    // --join: the first registration asks for the next free id and a share
    // of the ranges (docs/elastic.md); a rejoin keeps the id it was given.
    bool join = false;
  };

  // What the link needs of its server.
  class Host {
   public:
    virtual ~Host() = default;
    // Heartbeat thread: a chain replica here awaits its state.
    virtual bool awaiting_state() const = 0;
    // Runs `fn` on the server's loop thread.
    virtual void PostToLoop(std::function<void()> fn) = 0;
    // Heartbeat thread: the loop stops with `why` (posted).
    virtual void ExitLater(const Status& why) = 0;
    // Heartbeat thread: the loop stops now (a failed rejoin).
    virtual void StopNow() = 0;
    // Heartbeat thread: the coordinator answered a heartbeat NotFound
    // (`why`: its message); the server decides how it comes back (Rejoin,
    // or stopping).
    virtual void OnDeclaredDead(const std::string& why) = 0;
    // Loop thread: an answered heartbeat of a job that did not fail, after
    // its coordinator was adopted; `tokens`: the servers' tokens it carried.
    virtual void OnHeartbeatReply(const wire::HeartbeatReply& reply,
                                  const wire::ServerTokens& tokens) = 0;
    // Loop thread: registered again after a fence, after the reply's
    // coordinator was adopted.
    virtual void OnRejoined(const wire::RegisterReply& reply,
                            const wire::ServerTokens& tokens) = 0;
  };

  // `transport`: the connection to the coordinators (an RpcClient). `host`
  // and `clock` outlive this.
  CoordinatorLink(Options options, std::unique_ptr<Transport> transport, Host* host,
                  const Clock* clock)
      : options_(std::move(options)), transport_(std::move(transport)), host_(host),
        clock_(clock) {}
  ~CoordinatorLink() { StopHeartbeat(); }
  CoordinatorLink(const CoordinatorLink&) = delete;
  CoordinatorLink& operator=(const CoordinatorLink&) = delete;

  // Connects to Options::coordinator, or to the leader read from ZooKeeper
  // (Options::coordination), then followed.
  Status Connect();
  // REGISTER with the coordinator (retried while it is unreachable, up to
  // register_timeout_ms). `server_tokens` (if given): the other servers'
  // tokens the reply carries.
  StatusOr<wire::RegisterReply> Register(int requested_id,
                                         wire::ServerTokens* server_tokens = nullptr);
  // The first registration's reply: this server's id, its coordinator and
  // that coordinator's term.
  void Registered(const wire::RegisterReply& reply);
  // Starts the heartbeat thread; the silence is counted from now.
  void StartHeartbeat();
  // Stops it (waits for a beat in progress). Idempotent.
  void StopHeartbeat();
  // One heartbeat and what its outcome means (the heartbeat thread's body;
  // tests call it directly).
  void HeartbeatOnce();
  // Registers again with this server's id after it was declared dead
  // (from Host::OnDeclaredDead).
  void Rejoin();
  // The map version heartbeats report (the server publishes it after
  // installing a map).
  void set_map_version(uint64_t version) { seen_map_version_.store(version); }
  // A heartbeat now, not waiting for the answer: the state this server
  // awaited under map `map_version` arrived.
  void ReportStateArrived(uint64_t map_version);
  // DEREGISTER: this server left in order (a bounded wait).
  void Deregister();

  // Adopts a coordinator's identity if its term is not older.
  void AdoptCoordinator(const std::string& identity, uint64_t term);
  // Routing id of the coordinator's connection (RegisterReply): control
  // messages from anyone else are refused. Empty before registration.
  const std::string& coordinator_identity() const { return coordinator_identity_; }
  // Its term: a reply of a newer term (a restarted or newly elected
  // coordinator) replaces it.
  uint64_t coordinator_term() const { return coordinator_term_; }
  // This server's member token (RegisterReply.member_token), and as headers
  // carry it.
  std::string member_token() const {
    MutexLock l(&token_mu_);
    return member_token_;
  }
  WireToken wire_token() const {
    MutexLock l(&token_mu_);
    return wire_token_;
  }
  // A rejoin failed: the server stopped because it was fenced.
  bool fenced() const { return fenced_.load(); }
  // The heartbeats failed in a row (0 after an answer).
  int heartbeat_failures() const { return heartbeat_failures_; }
  // The coordinator called now.
  std::string current_endpoint() const { return coordinators_.current_endpoint(); }

 private:
  // A server HEARTBEAT reporting `map_version` and `awaiting_state`.
  Message HeartbeatMessage(uint64_t map_version, bool awaiting_state) const;

  // Constant after construction.
  const Options options_;
  const std::unique_ptr<Transport> transport_;
  Host* const host_;
  const Clock* const clock_;
  // Every coordinator of the job (--coordinator may list several; the
  // leader serves, coordinator/coordinator.h).
  CoordinatorPeers coordinators_;
  // --coordination: follows the leader in ZooKeeper (calls
  // coordinators_.Follow from its thread; declared after coordinators_ and
  // transport_, so destroyed before them).
  std::unique_ptr<LeaderWatch> leader_watch_;
  // This server's id (Registered). Constant after it.
  int id_ = -1;
  // Loop thread after Registered().
  std::string coordinator_identity_;
  uint64_t coordinator_term_ = 0;
  // Set by Register (at start, or a rejoin on the heartbeat thread), read
  // by the heartbeat thread and the loop thread.
  mutable Mutex token_mu_;
  std::string member_token_ GUARDED_BY(token_mu_);
  WireToken wire_token_ GUARDED_BY(token_mu_);  // member_token_ as headers carry it.
  // Set when the server stops because it was fenced and could not rejoin.
  std::atomic<bool> fenced_{false};
  std::atomic<uint64_t> seen_map_version_{0};
  // Heartbeat thread only.
  int heartbeat_failures_ = 0;
  int64_t last_heartbeat_ok_ms_ = 0;
  std::unique_ptr<PeriodicThread> heartbeat_;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_COORDINATOR_LINK_H_
