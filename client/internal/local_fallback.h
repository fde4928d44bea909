// LocalFallback: a worker that trains through a server's loss
// (recovery::ClientFeatures::local_copies: --recovery=stateless, hybrid).
//
// Owns the worker's copies of what the servers hold (LocalReplica for dense
// ranges, LocalRows for sparse rows) and the rules for leaving and rejoining
// a server:
//   - go local: a server is lost (the role decided so on a failed part, a
//     closed connection that a probe confirms, or a map that marks it dead);
//     whatever else waits on it is cancelled, so it is served here at once;
//   - serve: pushes to a local server's ranges are applied to the copy, pulls
//     answered from it (LocalReplica, LocalRows say how);
//   - re-seed: the coordinator asks for the copies (SEED_COPY) to seed a
//     replacement server;
//   - rejoin: the seeded (or merely slow) server takes over again; what was
//     changed here since the copy it was seeded from goes to it as raw
//     deltas, and pushes it may already have applied are resent under their
//     exactly-once keys instead; client_rejoined reports how many clocks
//     behind the local steps were when they reached a server (LateSteps).
// The recovery role decides *when* (recovery/client_recovery.h); this object
// is the mechanism, and never asks which policy runs.
//
// What it needs of the client it serves is the Host interface: the
// worker's identity and clock, and the data path that sends a request to a
// server (resends, the restart gate) or to the coordinator.
//
// Thread-safety: every method is safe from any thread (the data path calls
// it from callers' threads and the transport's I/O thread, the role from the
// heartbeat thread).
#ifndef RELAXPS_CLIENT_INTERNAL_LOCAL_FALLBACK_H_
#define RELAXPS_CLIENT_INTERNAL_LOCAL_FALLBACK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/internal/late_steps.h"
#include "client/internal/local_replica.h"
#include "client/internal/local_rows.h"
#include "client/internal/router.h"
#include "common/buffer.h"
#include "common/events.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport.h"
#include "common/wire.h"

namespace relaxps {
namespace client_internal {

class LocalFallback {
 public:
  // What the fallback needs of the client.
  class Host {
   public:
    virtual ~Host() = default;
    virtual int worker_id() const = 0;
    // The worker's clock (the next clock it pushes at).
    virtual int64_t clock() const = 0;
    // Moves the worker's clock up to `clock` (never back): a server seeded
    // at a higher clock than this worker's.
    virtual void RaiseClock(int64_t clock) = 0;
    virtual bool shutting_down() const = 0;
    // A data request of `type` at `clock`, routed with map `map_version`.
    virtual Message NewRequest(wire::MsgType type, const std::string& table, int64_t clock,
                               uint64_t map_version) const = 0;
    // `values` in the job's wire encoding.
    virtual Frame EncodeValues(const FloatBuffer& values) const = 0;
    // Sends a request to `server` through the data path (resent across its
    // restart; held at the restart gate).
    virtual void SendToServer(int server, std::function<Message()> make,
                              Transport::ReplyCallback done) = 0;
    // InvalidArgument (counted) unless every value is finite.
    virtual Status CheckPushFinite(const float* values, size_t n) = 0;
    // Counts a request that failed here.
    virtual void CountError() = 0;
    // Synchronous call to the current coordinator.
    virtual StatusOr<Message> CallCoordinatorSync(Message msg, int timeout_ms) = 0;
  };

  struct Options {
    // Chain routing (ClientFeatures::chain_routing): a range's or bucket's
    // copy belongs to the head of its chain, not to a fixed server.
    bool chain_routing = false;
    // How long a probe of a server whose connection closed may take before
    // the server goes local (ClientOptions::disconnect_probe_ms).
    int disconnect_probe_ms = 0;
    // How long a probe of a stalled server may take (local_after_ms).
    int stalled_probe_ms = 0;
    // Where client_went_local / client_rejoined go (null: nowhere).
    EventLog* events = nullptr;
  };

  // `host`, `router` and `transport` must outlive the fallback.
  // InvalidArgument for non-positive probe times.
  static StatusOr<std::unique_ptr<LocalFallback>> New(Host* host, Router* router,
                                                      Transport* transport,
                                                      const Options& options);
  LocalFallback(const LocalFallback&) = delete;
  LocalFallback& operator=(const LocalFallback&) = delete;

  // ---- Going local and coming back ----------------------------------------
  // Starts serving `server`'s ranges here (it was lost at `endpoint`;
  // `stalled`: it did not answer in time, rather than refusing or closing).
  // Cancels what else waits on it. No-op if it is local already.
  void GoLocal(int server, const std::string& endpoint, bool stalled, const std::string& why);
  // Whether a request to a server failed because the server stalled (no
  // reply in time), not because it refused or closed: the `stalled` of the
  // GoLocal that the failure leads to. The calls GoLocal cancels fail the
  // same way as the loss that cancelled them.
  static bool IsStall(const Status& failure) {
    return failure.code() == StatusCode::kDeadlineExceeded;
  }
  bool IsLocal(int server) const { return replica_.IsLocal(server); }
  // Whether `server` is local, and where and how it was lost.
  bool LostAt(int server, std::string* endpoint, bool* stalled) const {
    return replica_.LostAt(server, endpoint, stalled);
  }
  // Server `spare` takes over what `holder` held alone (the copies move).
  bool TakeOver(int holder, int spare);
  // The dense range of `table` at `range_begin` is served by `server` now.
  // The copies follow a map that moved ranges (LocalReplica::FollowMoves).
  int FollowMoves(const ShardMap& map) { return replica_.FollowMoves(map); }
  void Reassign(const std::string& table, uint64_t range_begin, int server) {
    replica_.Reassign(table, range_begin, server);
  }
  // Ends local mode for `server`: the changes made here since the last copy
  // sent to the coordinator go to it as raw deltas. `same_server`: it was
  // slow, not lost; the pushes it may have applied are resent with their
  // exactly-once keys rather than as part of the deltas.
  void Rejoin(int server, bool same_server, const char* why);
  // Answers the coordinator's re-seed requests of a heartbeat reply.
  void SendSeedCopies(const wire::HeartbeatReply& reply);
  // Probes the servers lost by a stall that the map still shows alive at
  // the same endpoint, and rejoins those that answer.
  void ProbeStalledServers();
  // The connection of transport peer `peer` closed: probes each server
  // there, and takes it local if it does not answer within
  // disconnect_probe_ms.
  void OnDisconnect(int peer);

  // ---- The data path's hooks -----------------------------------------------
  // Held while one part of a request is served from the copies: a rejoin
  // (and a re-seed copy) waits until the part is served, so the part's step
  // is in the change the rejoin hands back, or the part is not served here
  // at all. A step applied to a copy just after a rejoin took the change
  // would reach no server: its worker counted it, the model never saw it.
  // Serve only if local(); it is false when `server` rejoined since the
  // caller looked, and the part then goes to the server. Never held while a
  // part's completion runs (it may start the next request).
  class SCOPED_CAPABILITY ServingPart {
   public:
    ServingPart(LocalFallback* fallback, int server) ACQUIRE(fallback->serve_mu_)
        : mu_(&fallback->serve_mu_) {
      mu_->Lock();
      local_ = fallback->IsLocal(server);
    }
    ~ServingPart() RELEASE() { mu_->Unlock(); }
    ServingPart(const ServingPart&) = delete;
    ServingPart& operator=(const ServingPart&) = delete;
    bool local() const { return local_; }

   private:
    Mutex* const mu_;
    bool local_ = false;
  };
  // Serves `s`, one range's slice of the dense part that `part` holds
  // (REQUIRES: part.local()), of a request on `table` from the copy: the
  // push `grads` (null for a pull) applied, the pull answered into `out`
  // (null for a push). Returns the clock of the copy's parameters.
  // `doubtful_id` != 0: the push was sent under that exactly-once key and the
  // server may still apply it (DoubtfulPush; `doubtful_grads` its values).
  // The first push part of a request served here sets *served_locally and
  // counts one local step. `continues`: `s` is a later part of a split push
  // in a range its first part stepped (LocalReplica::Serve).
  StatusOr<int64_t> ServeDense(const ServingPart& part, const std::string& table,
                               const DenseSlice& s, const float* grads, float* out,
                               std::atomic<bool>* served_locally,
                               uint64_t doubtful_id = 0, FloatBuffer doubtful_grads = FloatBuffer(),
                               bool continues = false);
  // Serves the rows `ids` of `table` (PUSH_ROWS with `grads`, or PULL_ROWS
  // into `out` at `positions`, `width` floats a row) of the local `server`
  // as one part (ServingPart): false, serving nothing, when `server` is not
  // local any more; else true, with the outcome in *result.
  bool ServeRows(int server, wire::MsgType type, const std::string& table, size_t width,
                 const KeyBuffer& ids, const FloatBuffer& grads, const FloatBuffer& out,
                 const std::vector<uint32_t>& positions, std::atomic<bool>* served_locally,
                 uint64_t doubtful_id, Status* result);
  // A server answered the dense part `s` of `table` with `params` at
  // `params_clock`: remembered as the copy, and the worker's clock moved up
  // to a seeded server's.
  void RememberDense(const std::string& table, const DenseSlice& s, const float* params,
                     int64_t params_clock);
  // A server answered rows: `count` rows of `width` floats at `params`.
  void RememberRows(const std::string& table, size_t width, const uint64_t* ids,
                    const float* params, size_t count) {
    rows_.Remember(table, width, ids, params, count);
  }

  // Pushes applied here (ClientStats::local_steps).
  uint64_t local_steps() const { return replica_.local_steps(); }

 private:
  LocalFallback(Host* host, Router* router, Transport* transport, const Options& options)
      : host_(host), router_(router), transport_(transport), options_(options) {}
  // The server holding the dense range of `table` at `range_begin` now:
  // under chain routing the head of its chain, else `server`.
  int HolderOf(const std::string& table, uint64_t range_begin, int server) const;
  // ServeRows' work, under `serve_mu_`.
  Status ServeRowsLocked(int server, wire::MsgType type, const std::string& table, size_t width,
                         const KeyBuffer& ids, const FloatBuffer& grads, const FloatBuffer& out,
                         const std::vector<uint32_t>& positions,
                         std::atomic<bool>* served_locally, uint64_t doubtful_id)
      REQUIRES(serve_mu_);
  // Chain routing: `deltas` split into one per sparse bucket
  // (RowsDelta::bucket), the unit a chained server takes row pushes in;
  // else `deltas` as they are.
  std::vector<RowsDelta> SplitByBucket(const std::vector<RowsDelta>& deltas) const;

  Host* const host_;
  Router* const router_;
  Transport* const transport_;
  const Options options_;
  // Orders serving a part against taking the change (ServingPart); taken
  // before the copies' own locks.
  Mutex serve_mu_;
  LocalReplica replica_;
  LocalRows rows_;
  LateSteps late_;  // The local steps, until their change reaches a server.
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_LOCAL_FALLBACK_H_
