// RangeMover: a server's side of moving dense key ranges between servers in
// a running job (docs/elastic.md), as source and as destination.
//
// Source (MOVE_RANGE from the coordinator, keys [m, e) = the tail of a range
// [b, e) held here): waits until the range is quiescent (no BSP round
// pending, no pull waiting; checked by Poll after every data request and on
// the timer), then on the loop thread shrinks the range to [b, m) in place
// (its store shard keeps the head's memory; a whole range, m == b, is
// dropped) and from then on holds every request that touches [m, e)
// (HoldIfMoving); it streams [m, e) to the destination straight out of its
// memory in MOVE_STATE pieces (OutgoingTransfer, a window of them in
// flight) and answers the coordinator once the destination holds it; the
// tail's memory goes back to the system once the move is published. The held requests are let through again once a map
// that gives [m, e) to another server is installed (OnMapInstalled): the
// data path then refuses them "moved" with that map, and the client sends
// them again by it. If the destination fails, the source waits until [b, m)
// is quiescent, grows it back to [b, e) (nothing was applied to [m, e)
// since the cut) and answers the coordinator with the error.
//
// Destination (MOVE_RANGE with `incoming` from the coordinator, then
// MOVE_STATE pieces from the source): a piece is accepted only with the
// move's token; the first creates the range, each is written in place, the
// last loads the clocks and the exactly-once record.
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
#include "common/loop_client.h"
#include "common/rpc_server.h"
#include "common/status.h"
#include "proto/relaxps.pb.h"
#include "server/internal/range_state.h"
#include "server/internal/state_transfer.h"

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
  // live workers, rates. FailedPrecondition past the byte quota.
  virtual StatusOr<RangeState*> CreateRange(const std::string& table, uint64_t begin,
                                            uint64_t end) = 0;
  // Forgets the range of `table` starting at `begin` (its store shard stays
  // allocated: ParamStore has no drop).
  virtual void DropRange(const std::string& table, uint64_t begin) = 0;
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
  // True if `req` (a dense data request) touches a range this server cut
  // out and has not seen published yet: it is kept, and run again later.
  bool HoldIfMoving(Request* req);
  // After each data request and on the timer: cuts ranges that became
  // quiescent, fails drains past their deadline, finishes aborted moves.
  void Poll();
  // A map was installed: releases the requests held for ranges it gives to
  // other servers.
  void OnMapInstalled(const wire::ShardMap& map);
  // Requests held now (tests, stats).
  size_t held() const;

 private:
  enum class Phase { kDraining, kSending, kSent, kAborting };
  struct Outgoing {
    wire::RangeMove move;
    std::shared_ptr<Request> coordinator_request;  // Answered once sent (or failed).
    Phase phase = Phase::kDraining;
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
  };
  struct Incoming {
    wire::RangeMove move;
    uint32_t next_piece = 0;
    bool created = false;
  };

  // Source steps.
  void Cut(Outgoing* out);
  // The cut's head where the store cannot reshape its shard in place: a new
  // range [b, m) loaded with a copy of the head. False (and the move
  // aborting) if that failed.
  bool CutByCopy(Outgoing* out, const wire::ChainSnapshot& meta);
  // Sends pieces until options_.window_pieces are unacknowledged.
  void SendPieces(const std::string& token);
  void OnPieceReply(const std::string& token, size_t index, const Status& status);
  // The destination failed: take the range back once [b, m) is quiescent.
  void Abort(Outgoing* out, const Status& why);
  // kAborting and [b, m) quiescent: [b, e) again, held requests released.
  Status TakeBack(Outgoing* out);
  // `status` by value: it may be the entry's own failure, which this erases.
  void Finish(const std::string& token, Status status);
  void Remember(const std::string& token);
  static bool Overlaps(const wire::RangeMove& m, const std::string& table, uint64_t begin,
                       uint64_t count);

  // Constant after construction.
  RangeMoverHost* const host_;
  const Clock* const clock_;
  const Options options_;

  LoopClient peers_;
  std::map<std::string, Outgoing> outgoing_;  // By token.
  std::map<std::string, Incoming> incoming_;  // By token.
  std::set<std::string> finished_;            // Tokens of finished moves.
  std::deque<std::string> finished_order_;    // Oldest first (bounded).
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_RANGE_MOVER_H_
