// ChainReplication: a server's part in chain replication, when the recovery
// policy's write rule forwards writes along chains
// (recovery::WriteRule::kForwardAlongChain: --recovery=chain, hybrid).
//
// Every replicated unit (a dense key range, or a sparse hash bucket) has its
// own chain of servers, head first, from the shard map. This object owns
//   - the chain side of every unit (RangeState::chain, members, transfers):
//     the dense ranges themselves belong to the server's data path, the
//     sparse buckets (which exist only under chain replication) to this
//     object;
//   - the connections to the successors (a LoopClient polled by the
//     server's loop, so a forward and its acknowledgement cross no thread);
//   - the roles: at the head it takes workers' writes, applies, numbers and
//     forwards them and answers once the tail acknowledged; at a follower it
//     applies forwarded updates in sequence order and passes them on; it
//     resends what a new successor lacks, or streams a snapshot to a server
//     joining the chain (chain_replication_transfer.cc);
//   - fencing: a server the coordinator declared dead drops every unit's
//     state and rejoins its chains as a fresh tail.
// Invariants (tests/server/chain_replica_test.cc, tests/recovery/chain*):
// a write is acknowledged only when every live replica applied it; replicas
// apply the same updates in the same order; an update of an older epoch is
// refused; a resent write (same worker, incarnation and push id) is applied
// once.
//
// What it needs of the server is the ChainHost interface: identity, the
// installed map and epoch, the dense ranges, and the data path's reply,
// reject, decode and pull-serving mechanisms.
//
// Thread-safety: none; everything runs on the server's loop thread, except
// awaiting_state() (any thread) and MarkFencePending() (heartbeat thread).
#ifndef RELAXPS_SERVER_INTERNAL_CHAIN_REPLICATION_H_
#define RELAXPS_SERVER_INTERNAL_CHAIN_REPLICATION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/buffer_pool.h"
#include "common/clock.h"
#include "common/loop_client.h"
#include "common/member_token.h"
#include "common/rpc_server.h"
#include "common/table.h"
#include "kernels/device.h"
#include "server/internal/range_state.h"
#include "storage/param_store.h"

namespace relaxps {
namespace server_internal {

// What ChainReplication needs of the server it is part of (loop thread).
class ChainHost {
 public:
  virtual ~ChainHost() = default;
  virtual int id() const = 0;
  // The job epoch of the installed map, and the map.
  virtual uint64_t epoch() const = 0;
  virtual const wire::ShardMap& map() const = 0;
  // Registered with the coordinator: units created from now on belong to
  // tables the other replicas hold already (their state comes by transfer).
  virtual bool registered() const = 0;
  // This server's member token, which every message to another server
  // carries with its id (Header.from_server): the receiver checks both.
  virtual WireToken wire_token() const = 0;
  virtual wire::ServerStats* mutable_stats() = 0;
  // The dense range of `table` that holds `key`, or nullptr.
  virtual RangeState* DenseRange(const std::string& table, uint64_t key) = 0;
  virtual void ForEachDenseRange(const std::function<void(RangeState*)>& fn) = 0;
  // The data path's mechanisms (server_impl.h says what each does).
  virtual void Reject(const Request& req, const Status& status) = 0;
  virtual void ReplyWith(const Request& req, Message&& reply) = 0;
  virtual bool CheckFrameCount(const Request& req, size_t expected) = 0;
  virtual const float* DecodeGradient(const Request& req, const Frame& frame, size_t n,
                                      bool check_finite) = 0;
  virtual Status ServePull(RangeState* range, std::shared_ptr<Request> req,
                           const float* push_grads) = 0;
  virtual void MaybeFlush() = 0;
  // Tells the coordinator now (not at the next heartbeat) that no replica
  // here awaits its state any more.
  virtual void ReportStateArrived() = 0;
  // What sparse buckets are made of.
  virtual ParamStore* store() = 0;
  virtual kernels::Device* device() = 0;
  virtual kernels::Device* update_device() = 0;  // May be null.
  virtual BufferPool* buffer_pool() = 0;
};

class ChainReplication {
 public:
  struct Options {
    // Bytes of payload per state transfer piece (at least 1 KiB).
    size_t transfer_chunk_bytes = 1 << 20;
    // Where seeded buckets start from, for the log ("" : the initializer).
    std::string restored_from;
    // Updates of a range the head may acknowledge before the tail has them
    // (ServerRecovery::ReplicationLag). 0: synchronous replication, nothing
    // acknowledged is lost with the head; more: the head answers a push
    // after applying it while at most this many are unacknowledged by the
    // tail, so workers wait less and a head failure loses up to this many
    // acknowledged updates per range.
    uint64_t replication_lag = 0;
  };

  // `host` and `rpc` (whose loop polls the successor connections) must
  // outlive this object; `peer_options` configure those connections.
  ChainReplication(ChainHost* host, RpcServer* rpc, const RpcClientOptions& peer_options,
                   const Clock* clock, const Options& options);
  ChainReplication(const ChainReplication&) = delete;
  ChainReplication& operator=(const ChainReplication&) = delete;

  // ---- Shard maps -----------------------------------------------------------
  // A new dense range of the first map or of a new table: a chain replica
  // that holds its state (`has_state`) or awaits it from its predecessor.
  static void MakeReplica(RangeState* range, bool has_state);
  // Creates this server's replicas of the buckets of sparse table `t`.
  // `known`: the table was in the map installed before (a bucket joined
  // later waits for its state transfer instead of serving the initializer's
  // values).
  Status CreateBuckets(const TableOptions& t, const wire::TableShards& ts, int slots, bool known);
  // Rates change after creation (SetLearningRate): every map updates them.
  void SetBucketRates(const TableOptions& t);
  // Before a map is applied: fences the replicas if MarkFencePending() was
  // called since the last map.
  void FenceIfPending();
  // Applies the chain roles of a newly installed map: promotion, a new
  // successor (resend what it has not acknowledged, or a snapshot to a
  // server joining the chain), becoming the tail; then publishes
  // awaiting_state().
  void ApplyRoles(const wire::ShardMap& map);

  // ---- Requests (loop thread) ----------------------------------------------
  // A client push / pull / push-pull of a dense range it replicates.
  void HandleDense(RangeState* range, Request&& req);
  // PUSH_ROWS / PULL_ROWS of a sparse table: at the head of the bucket the
  // request names.
  void HandleSparse(Request&& req);
  // An update, completion or snapshot piece forwarded by a predecessor.
  void HandleForwarded(Request&& req);
  // A worker's CLOCK on a dense range: replicated like a push (only the
  // head takes it from a worker; a follower ignores it).
  void HandleClock(RangeState* range, const wire::Header& h);
  // Head under BSP: forwards the rounds the range completed since last time.
  void MaybeForwardCompletion(RangeState* range);
  // SEED under hybrid: the workers' merged changes to rows of the buckets
  // `rows` names (frames `ids` and `deltas`, null when count is 0), added to
  // the rows this server holds. With `apply` false only checks:
  // InvalidArgument for a bucket not held here or a row outside the named
  // buckets. With `apply` the changes are added and each named bucket heads
  // its chain from here on.
  Status SeedBuckets(const wire::SeedRows& rows, const Frame* ids, const Frame* deltas,
                     bool apply);
  // Runs `fn` (a reply to a worker) once update `seq` of `chain` may be
  // acknowledged: once update seq - replication_lag is on every replica.
  void WhenAcknowledgeable(ChainReplica* chain, uint64_t seq, std::function<void()> fn);
  // Sends `reply` (the parameters a pull or push-pull at the head of
  // `chain` returns) once everything it reflects may be acknowledged; a
  // push-pull's reply carries its push's sequence numbers as PushReply's.
  void ReplyToPull(ChainReplica* chain, const std::shared_ptr<Request>& req, Message&& reply);
  // Timer: resends unacknowledged updates and transfer pieces that waited
  // too long.
  void ResendStale();

  // ---- Fencing ---------------------------------------------------------------
  // Heartbeat thread: declared dead; the next map fences the replicas
  // (drops every unit's state and chain position, never a split brain: it
  // holds nothing until a predecessor's snapshot arrives), so it can rejoin
  // as a fresh tail.
  void MarkFencePending() { fence_pending_.store(true); }
  // Any thread: a replica in a chain of the current map still waits for its
  // state transfer (reported in heartbeats).
  bool awaiting_state() const { return awaiting_state_.load(); }

  // ---- Units -----------------------------------------------------------------
  // The replicated unit whose chain messages carry (table, key); nullptr if
  // this server holds none.
  RangeState* FindReplica(const std::string& table, uint64_t key);
  // The sparse bucket `bucket` of `table`, or nullptr.
  RangeState* FindBucket(const std::string& table, uint64_t bucket);
  void ForEachBucket(const std::function<void(RangeState*)>& fn);

 private:
  // Runs fn on every replicated unit (dense ranges, then sparse buckets).
  void ForEachReplica(const std::function<void(RangeState*)>& fn);
  void Fence();
  void ApplyRole(RangeState* range, const std::vector<int>& members, uint64_t epoch);
  void UpdateAwaitingState();
  int PeerOf(int server);
  int id() const { return host_->id(); }
  uint64_t epoch() const { return host_->epoch(); }
  wire::ServerStats* stats() { return host_->mutable_stats(); }

  // Head: gives `msg` the next sequence number and forwards it.
  uint64_t ForwardNew(RangeState* range, Message* msg);
  // Update `seq` (already applied here) goes down the chain; at the tail it
  // is acknowledged at once. `msg`'s frames are shared with the log.
  void Commit(RangeState* range, uint64_t seq, Message* msg);
  void Forward(RangeState* range, uint64_t seq, Message* msg);
  // The head's reply to a push applied at `seq` (or found applied there):
  // OK, `pending` as the data path says, and under asynchronous replication
  // the sequence numbers a worker counts its losses by.
  Message PushReply(const ChainReplica& chain, const wire::Header& request, uint64_t seq,
                    bool pending) const;
  // A client push (or a raw delta) on `shard`, at the head or forwarded.
  static Status ApplyPush(DenseShardState* shard, const wire::Header& h, const float* grads);
  void SendLogged(RangeState* range, const LoggedOp& op);
  // Sends `msg` to successor connection `peer`, naming this server as its
  // sender with this server's member token (Header.from_server; the worker's
  // token of a forwarded push is replaced): every server-to-server message
  // goes through here.
  void CallPeer(int peer, Message msg, int timeout_ms, LoopClient::ReplyCallback done);
  void OnForwardReply(const std::string& table, uint64_t begin, uint64_t seq,
                      const Status& status, const Message& reply);
  // Applies a forwarded update of a dense range / a sparse bucket at a
  // follower; false (after rejecting) when it could not be.
  bool ApplyForwardedDense(RangeState* range, const Request& req);
  bool ApplyForwardedSparse(RangeState* range, const Request& req);

  // State transfer (chain_replication_transfer.cc). SendSnapshot copies the
  // unit's state at its applied seq and streams it to the successor in
  // pieces (SendPiece, one in flight; OnPieceReply sends the next, and after
  // the last the updates held back meanwhile); HandleSnapshotPiece applies
  // the pieces at the joiner.
  void SendSnapshot(RangeState* range);
  void SendPiece(RangeState* range);
  void OnPieceReply(const std::string& table, uint64_t key, uint64_t seq, size_t index,
                    const Status& status, const Message& reply);
  void HandleSnapshotPiece(RangeState* range, std::shared_ptr<Request> req);

  ChainHost* const host_;
  const Clock* const clock_;
  const Options options_;
  // Successors: DEALER sockets polled by the server's loop.
  LoopClient peers_;
  std::map<int, std::pair<std::string, int>> peer_of_;  // Server id -> (endpoint, peer).
  // The sparse buckets held here, by (table, bucket).
  std::map<std::pair<std::string, uint64_t>, RangeState> buckets_;
  std::vector<uint64_t> ids_scratch_;
  std::atomic<bool> fence_pending_{false};
  std::atomic<bool> awaiting_state_{false};
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_CHAIN_REPLICATION_H_
