// RangeMover: a server's side of moving dense key ranges and sparse hash
// buckets between servers in a running job (docs/elastic.md), as source and
// as destination.
//
// Source (MOVE_RANGE from the coordinator, keys [m, e) = the tail of a range
// [b, e) held here): first copies [m, e) to the destination while serving it
// (Options::copy_first: the copy phase), its writes tracked per chunk
// (DenseShardState::TrackWrites), and forwards every update of [m, e) to the
// destination as it applies it (Options::forward_updates; the destination
// applies it to the keys whose copy it holds), or without forwarding sends
// the chunks written during each round again while they shrink (catch-up
// rounds); then waits until the range is quiescent (no BSP round
// pending, no pull waiting; checked by Poll after every data request and on
// the timer), then on the loop thread shrinks the range to [b, m) in place
// (its store shard keeps the head's memory; a whole range, m == b, is
// dropped) and from then on holds every request that touches [m, e)
// (HoldIfMoving); it streams [m, e) to the destination straight out of its
// memory in MOVE_STATE pieces (OutgoingTransfer, a window of them in
// flight) and answers the coordinator once the destination holds it; the
// tail's memory goes back to the system once the move is published. After a
// copy phase the cut sends only the metadata (forwarding) or the chunks
// written since its last round. The held requests are let through again once a map
// that gives [m, e) to another server is installed (OnMapInstalled): the
// data path then refuses them "moved" with that map, and the client sends
// them again by it. If the destination fails, the source waits until [b, m)
// is quiescent, grows it back to [b, e) (nothing was applied to [m, e)
// since the cut) and answers the coordinator with the error.
//
// Destination (MOVE_RANGE with `incoming` from the coordinator, then
// MOVE_STATE pieces from the source): a piece is accepted only with the
// move's token; the first creates the range, each is written in place, the
// last loads the clocks and the exactly-once record. MOVE_RANGE with
// `incoming` and an error status (the coordinator failed the move) drops
// the range the pieces created and forgets the token.
//
// Chains (a range replicated on a chain, docs/elastic.md "Chains"): the
// destination joins the chain as tail through chain replication's state
// transfer; MOVE_RANGE to the source then asks its replica to leave. A
// follower answers at once (its predecessor resends to the new successor
// what was not acknowledged, as after a failure). A head first waits until
// the range is quiescent, then holds every request for the range and waits
// until the tail acknowledged everything it forwarded, and answers: nothing
// waits at it any more. The map that splices it out releases the held
// requests ("moved": the range is no longer here); a map in which the
// destination left the chain again (the move failed) lets them through.
// The hash buckets of an unreplicated sparse table that the source holds in
// [begin, end) (bucket indices) move the same way, together: the source
// waits until the table is quiescent (no BSP round pending, no pull
// waiting), copies the buckets' rows, the table's step and the exactly-once
// record's ids (bucket_copy.h), holds every request with a row in them,
// streams the copy, and once the new map is installed refuses their rows
// "moved" (the client splits its request by that map). The source keeps its
// copy of the rows, so a failed move only releases the held requests. The
// part counts of the table's record go along with the last buckets the
// source holds.
//
// Both sides remember the tokens of the moves they finished, so a
// coordinator that repeats a step (a timeout, a failover) gets OK again.
//
// Thread-safety: not synchronized; the server's loop thread only.
#ifndef RELAXPS_SERVER_INTERNAL_RANGE_MOVER_H_
#define RELAXPS_SERVER_INTERNAL_RANGE_MOVER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/events.h"
#include "common/loop_client.h"
#include "common/rpc_server.h"
#include "common/status.h"
#include "proto/relaxps.pb.h"
#include "server/internal/range_state.h"
#include "server/internal/sparse_shard.h"
#include "server/internal/state_transfer.h"
#include "server/internal/write_tracker.h"

namespace relaxps {
namespace server_internal {

// What the mover needs of its server (ServerImpl).
class RangeMoverHost {
 public:
  virtual int server_id() const = 0;
  virtual const wire::ShardMap& installed_map() const = 0;
  // The dense range holding `key` of `table`, or nullptr.
  virtual RangeState* DenseRangeAt(const std::string& table, uint64_t key) = 0;
  // Creates the dense range [begin, end) of `table` (a table of the
  // installed map) with its initial values: a store shard of its own, the
  // live workers, rates. FailedPrecondition past the byte quota. Without
  // `initialize` the store may skip the initial values (the caller writes
  // every key of every slot before the range serves: an incoming move).
  virtual StatusOr<RangeState*> CreateRange(const std::string& table, uint64_t begin,
                                            uint64_t end, bool initialize) = 0;
  // Forgets the range of `table` starting at `begin` (its store shard stays
  // allocated: ParamStore has no drop).
  virtual void DropRange(const std::string& table, uint64_t begin) = 0;
  // Unreplicated sparse table `table` (its rows here, in store()), or nullptr.
  virtual SparseShardState* SparseTable(const std::string& table) = 0;
  // The exactly-once record of sparse table `table` (made on first use).
  virtual AppliedLedger* SparseLedger(const std::string& table) = 0;
  virtual ParamStore* store() = 0;
  // Makes `range` the keys [range->key, end), in place: its store shard,
  // renamed for them, keeps its memory and values (DenseShardState::Reshape).
  // REQUIRES: range->shard quiescent. On an error nothing changed.
  virtual Status ReshapeRange(RangeState* range, uint64_t end) = 0;
  // Gives the memory of `range`'s keys past its end (up to `old_end`, where
  // it ended before a ReshapeRange shrank it) back to the system.
  virtual void ReleaseRangeTail(RangeState* range, uint64_t old_end) = 0;
  // Runs a held data request through the data path again.
  virtual void Redispatch(Request&& req) = 0;
  virtual void SendReply(const Request& req, Message&& reply) = 0;
  virtual void SendError(const Request& req, const Status& status) = 0;

 protected:
  ~RangeMoverHost() = default;
};

class RangeMover {
 public:
  struct Options {
    // How long a source waits for its range to be quiescent.
    int64_t drain_timeout_ms = 10000;
    // Payload bytes per MOVE_STATE piece.
    size_t chunk_bytes = size_t{8} << 20;
    // MOVE_STATE pieces in flight at once (>= 1).
    int window_pieces = 1;
    // How long the source waits for the destination to answer a piece.
    int64_t piece_timeout_ms = 30000;
    // Dense, unreplicated moves: copy the range to the destination while it
    // serves, then catch up, and cut over with only what changed since
    // (docs/elastic.md "One move"). false: the cut-over sends the whole
    // range (writes of the moved keys wait for one transfer of it).
    bool copy_first = true;
    // Catch-up rounds at most after the first copy; fewer once the keys
    // written during a round are at most `catchup_bytes` (of every slot),
    // or no fewer than the round sent. More rounds: a shorter cut-over
    // under writes that come and go, more bytes sent.
    int catchup_rounds = 8;
    size_t catchup_bytes = size_t{1} << 20;
    // Keys per chunk of the copy phase's write tracking (one bit each): a
    // written key sends its whole chunk again. Smaller: fewer bytes resent,
    // more (smaller) pieces.
    uint64_t write_chunk_keys = 16384;
    // During the copy phase, forward every update of the moved keys to the
    // destination as it is applied (in order, numbered; the destination
    // applies one to the keys whose copy it holds, as the copy of the others
    // is taken after it): no catch-up round, and the cut sends only the
    // metadata. Past `forward_window_bytes` of unacknowledged forwards the
    // source gives forwarding up and the cut sends every chunk written
    // since the copy began.
    bool forward_updates = true;
    size_t forward_window_bytes = size_t{1} << 30;
    // The copy rounds' pieces leave straight out of the live range, lent to
    // ZeroMQ (DenseShardState::LendSlot): a write of keys in flight waits
    // until ZeroMQ sent them, at most `lend_wait_ms`; past it the write
    // proceeds and the cut sends those keys again (the destination stopped
    // reading).
    // Longer: fewer resends after a stall, a longer stall of the source's
    // loop when the destination stops reading.
    int64_t lend_wait_ms = 250;
    // Where the source reports each published dense move's cut-over
    // (range_move_cutover); may be null.
    EventLog* events = nullptr;
  };

  // REQUIRES: host, rpc and clock outlive this.
  RangeMover(RangeMoverHost* host, RpcServer* rpc, const RpcClientOptions& peer_options,
             const Clock* clock, const Options& options);
  RangeMover(const RangeMover&) = delete;
  RangeMover& operator=(const RangeMover&) = delete;

  // MOVE_RANGE from the coordinator (its sender was checked).
  void HandleMoveRange(Request&& req);
  // MOVE_STATE from the source.
  void HandleMoveState(Request&& req);
  // True if `req` (a data request) touches a range or bucket this server
  // cut out and has not seen published yet: it is kept, and run again later.
  bool HoldIfMoving(Request* req);
  // Whether any of the n rows `ids` of sparse table `table` lies in a bucket
  // this server gave away by a move (published): the request is refused
  // "moved".
  bool MovedAway(const std::string& table, const uint64_t* ids, size_t n) const;
  // After each data request and on the timer: cuts ranges that became
  // quiescent, fails drains past their deadline, finishes aborted moves.
  void Poll();
  // A map was installed (after the chain roles were applied): drops the
  // replicas of chains it no longer lists this server in while the map
  // before did (a chain move took them away; a fenced server forgot its
  // chains and drops nothing here), and releases the requests held for
  // ranges it gives to other servers.
  void OnMapInstalled(const wire::ShardMap& map);
  // Requests held now (tests, stats).
  size_t held() const;

 private:
  // kCopying: the copy phase (copy_first); kDraining: waiting for the
  // range to be quiescent; kSending: cut, its last state on the way;
  // kSent: waiting for the map; kAborting: taking the range back.
  enum class Phase { kCopying, kDraining, kSending, kSent, kAborting };
  struct Outgoing {
    wire::RangeMove move;
    std::shared_ptr<Request> coordinator_request;  // Answered once sent (or failed).
    Phase phase = Phase::kDraining;
    bool bucket = false;         // Buckets of a sparse table (`buckets`).
    std::set<int> buckets;       // Bucket moves: those that move.
    int num_buckets = 0;         // Of its table (bucket moves).
    bool carried_parts = false;  // The copy took the table's part counts along.
    int64_t drain_deadline_ms = 0;
    uint64_t range_begin = 0;  // b: the range [b, e) the move cuts.
    int peer = -1;
    std::unique_ptr<OutgoingTransfer> transfer;
    size_t acked = 0;  // Pieces the destination took (transfer->next: sent).
    // The state of [m, e) at the cut: its metadata, and its slots straight
    // out of the source's memory (DenseShardState::ViewSlot; nothing writes
    // them until the map moves them: their requests are held).
    wire::ChainSnapshot meta;
    std::vector<FloatBuffer> frames;
    // The head [b, m) stayed in place (ReshapeRange): the take-back grows it
    // back, and the published move gives the tail's memory back.
    bool in_place = false;
    // Where the store cannot reshape in place (CutByCopy): the head [b, m)
    // and its record, only while the cut has not created the head's range
    // yet (a failure there puts them back). A whole range's record (m == b).
    std::vector<FloatBuffer> head_copy;
    std::unique_ptr<AppliedLedger> head_ledger;
    Status failure;  // kAborting: why.
    std::deque<Request> held;  // Arrival order.
    // The copy phase (dense, copy_first): rounds of pieces out of the live
    // range, its writes of [m, e) tracked (DenseShardState::TrackWrites)
    // from the first round until the cut, which sends only the chunks
    // written since the last round.
    bool copying = false;       // The copy phase ran (or runs).
    bool cut = false;           // The cut happened (holding requests).
    int catchup_rounds = 0;     // Rounds after the first (whole) copy.
    uint64_t round_bytes = 0;   // The last round's payload.
    uint64_t copied_bytes = 0;  // Every round's payload.
    uint32_t next_index = 0;    // The next transfer's first piece index.
    uint64_t range_bytes = 0;   // [m, e) of every slot.
    uint64_t cutover_bytes = 0; // The cut's payload.
    size_t slots = 0;           // Frames of the range (copy phase).
    // Forwarding (Options::forward_updates): on from the copy's start until
    // the cut, unless given up (forward_stop says why).
    bool forwarding = false;
    std::string forward_stop;
    uint64_t forward_seq = 0;        // Forwards sent (the last one's number).
    uint64_t forwards_acked = 0;     // Forwards the destination answered.
    uint64_t forward_bytes = 0;      // Their gradients' bytes.
    uint64_t forward_unacked_bytes = 0;
    int64_t cut_ms = 0;         // When the cut began holding requests.
    // The copy rounds' payload: bytes lent to ZeroMQ (not copied), and the
    // range's LentSpans figures when the copy began and at the cut.
    uint64_t lent_bytes = 0;
    LentSpans::Stats lent_before;
    LentSpans::Stats lent_at_cut;
  };
  // The source of a chain move: its replica leaving the chain.
  enum class LeavePhase { kDraining, kAcking, kLeft };
  struct Leaving {
    wire::RangeMove move;
    std::shared_ptr<Request> coordinator_request;  // Answered once it may leave.
    LeavePhase phase = LeavePhase::kDraining;
    int64_t deadline_ms = 0;
    std::deque<Request> held;  // kAcking and kLeft; arrival order.
  };
  struct Incoming {
    wire::RangeMove move;
    uint32_t next_piece = 0;
    bool created = false;
    // Keys [m, m + received_keys) arrived with every slot (the copy round's
    // pieces go key by key): a forwarded update applies to those of its keys.
    uint64_t received_keys = 0;
    uint64_t forward_seq = 0;  // The last forwarded update taken.
  };

  // Source steps.
  void Cut(Outgoing* out);
  // The cut's head where the store cannot reshape its shard in place: a new
  // range [b, m) loaded with a copy of the head. False (and the move
  // aborting) if that failed.
  bool CutByCopy(Outgoing* out, const wire::ChainSnapshot& meta);
  // Starts the copy phase of dense move `out` out of `range`.
  void StartCopy(Outgoing* out, RangeState* range);
  // A transfer of `runs` of [m, e)'s slots out of the live range (not the
  // last: the cut's ends the move), sent from out->next_index on, each
  // piece lent or copied as it leaves (PiecePayload).
  void SendRound(Outgoing* out, const std::vector<OutgoingTransfer::Run>& runs);
  // A copy round was taken: another round, or on to the drain and cut.
  void EndCopyRound(const std::string& token);
  // A copy round's piece: floats [offset, offset + count) of [m, e) of
  // `slot`, lent out of the range (a write of them waits until ZeroMQ sent
  // them), or copied out of `view` (the slot's view) when the range is gone.
  Frame PiecePayload(const std::string& token, const FloatBuffer& view, uint32_t slot,
                     uint64_t offset, uint64_t count);
  // The copy phase's observer of the range's writes: forwards an update of
  // the moved keys to the destination (Options::forward_updates).
  void ForwardWrite(const std::string& token, const DenseShardState::Write& w);
  void OnForwardReply(const std::string& token, uint64_t bytes, const Status& status);
  // Ends forwarding for the rest of the copy phase (the cut then sends the
  // chunks written since it began). Safe inside the observer.
  void StopForwarding(Outgoing* out, const std::string& why);
  // Destination: a forwarded update (MOVE_STATE with a chain_seq, no piece).
  Status TakeForward(Incoming* in, const Request& req);
  // The write tracker of `out`'s range (nullptr: none or gone).
  WriteTracker* TrackerOf(const Outgoing& out);
  // Ends the tracking of a copy phase that did not get to the cut.
  void StopTracking(const Outgoing& out);
  // range_move_cutover of a published dense move.
  void ReportCutover(const Outgoing& out, int64_t map_version);
  // Destination: the coordinator gave the incoming move `token` up
  // (MOVE_RANGE with `incoming` and an error status): what it received is
  // dropped, its later pieces refused.
  void DropIncoming(const std::string& token, const Status& why);
  // Sends pieces until options_.window_pieces are unacknowledged.
  void SendPieces(const std::string& token);
  // Cut for a bucket move. An error: the move fails, nothing changed.
  Status CutBucket(Outgoing* out);
  // HandleMoveRange's checks of a bucket move of sparse table `ts`.
  Status CheckBucketMove(const wire::RangeMove& m, const wire::TableShards& ts) const;
  // HandleMoveState of a bucket move (the piece matched the move).
  Status TakeBucketPiece(Incoming* in, const Request& req);
  void OnPieceReply(const std::string& token, size_t index, const Status& status);
  // The destination failed: take the range back once [b, m) is quiescent.
  void Abort(Outgoing* out, const Status& why);
  // kAborting and [b, m) quiescent: [b, e) again, held requests released.
  Status TakeBack(Outgoing* out);
  // `status` by value: it may be the entry's own failure, which this erases.
  void Finish(const std::string& token, Status status);
  void Remember(const std::string& token);
  // MOVE_RANGE to the source of a chained range.
  void LeaveChain(Request&& req, RangeState* range);
  // Poll's part for the leaving replicas.
  void PollLeaving();
  // Drops the chained ranges `map` took this server out of (OnMapInstalled).
  void DropLeftReplicas(const wire::ShardMap& map);
  // Ends a leave: the coordinator answered with `status` (unless OK was
  // sent already), the held requests run again.
  void EndLeave(const std::string& token, const Status& status);
  static bool Overlaps(const wire::RangeMove& m, const std::string& table, uint64_t begin,
                       uint64_t count);

  // Constant after construction.
  RangeMoverHost* const host_;
  const Clock* const clock_;
  const Options options_;

  LoopClient peers_;
  std::map<std::string, Outgoing> outgoing_;  // By token.
  std::map<std::string, Incoming> incoming_;  // By token.
  std::map<std::string, Leaving> leaving_;    // By token.
  std::set<std::string> finished_;            // Tokens of finished moves.
  std::deque<std::string> finished_order_;    // Oldest first (bounded).
  // Buckets of each sparse table this server gave away (published) and has
  // not received back since: rows in them are refused "moved".
  std::map<std::string, std::set<int>> moved_out_;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_RANGE_MOVER_H_
