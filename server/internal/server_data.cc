// ServerImpl: the data path without chain replication (server_impl.h):
// dense PUSH / PULL / PUSH_PULL and sparse PUSH_ROWS / PULL_ROWS, pulls
// waiting at the consistency gate, and the exactly-once record of every push
// (a resent or replayed push its range's state reflects is acknowledged
// without being applied). Ranges replicated in chains go on to
// ChainReplication (chain_replication.h). Loop thread.

#include <algorithm>

#include "common/payload_codec.h"
#include "server/internal/request_codec.h"
#include "server/internal/server_impl.h"

namespace relaxps {
namespace server_internal {

void ServerImpl::HandleDense(Request&& req) {
  const wire::Header& h = req.msg.header;
  RangeState* range = FindRange(h.table(), h.key_begin());
  if (range == nullptr) {
    Reject(req, sparse_.count(h.table())
                    ? InvalidArgumentError("table '" + h.table() + "' is sparse")
                : HasDenseTable(h.table()) || MapHasTable(h.table())
                    // Not here (any more: a range moved away): "moved".
                    ? WrongShardError("keys from " + std::to_string(h.key_begin()) + " of table '" +
                                      h.table() + "' are not in this shard")
                    : NotFoundError("unknown dense table '" + h.table() + "'"));
    return;
  }
  DenseShardState* shard = range->shard.get();
  const uint64_t n = h.key_count();
  Status s = server_internal::CheckClock(h.clock());
  if (s.ok()) s = shard->CheckRange(h.key_begin(), n);
  if (s.ok() && h.type() != wire::PULL) s = CheckClockAhead(*shard, h.clock(), h.sender());
  if (!s.ok()) {
    Reject(req, s);
    return;
  }
  const bool push = h.type() != wire::PULL;
  if (h.slot() != 0 && (h.type() != wire::PULL || h.slot() < 0 ||
                        h.slot() >= static_cast<int>(shard->num_slots()))) {
    Reject(req, InvalidArgumentError("slot " + std::to_string(h.slot()) + " of table '" +
                                     h.table() + "' cannot be read (PULL only; the table has " +
                                     std::to_string(shard->num_slots()) + " slots)"));
    return;
  }
  if (!CheckFrameCount(req, push ? 1 : 0)) return;
  // Inspection: a state slot, or on a chain replica a pull by no worker
  // (sender -1: relaxps-ctl, tests comparing replicas) reads this replica's
  // copy at once, without the gate.
  if (h.slot() != 0 || (range->chain != nullptr && h.type() == wire::PULL && h.sender() < 0)) {
    if (range->chain != nullptr && !range->chain->has_state()) {
      Reject(req, UnavailableError("server " + std::to_string(id_) + " is awaiting state"));
      return;
    }
    Message reply = MakeReply(h, Status::OK());
    reply.header.set_params_clock(shard->visible_clock());
    reply.header.set_encoding(h.encoding());
    reply.frames.push_back(EncodeFloats(shard->CopySlot(h.slot(), h.key_begin(), n), h.encoding()));
    ReplyWith(req, std::move(reply));
    return;
  }
  if (range->chain != nullptr) {
    chain_->HandleDense(range, std::move(req));
    return;
  }
  // A push with an exactly-once key that this range's state reflects: a
  // stateless worker's resend of a push it gave up on, or a push replayed
  // into a server restored from a checkpoint. Applied once.
  // A push still waiting for its BSP round is recognized too (acknowledged
  // as pending, not summed twice).
  AppliedLedger* ledger = &range->applied;
  const bool seen = push && h.push_id() > 0 &&
                    ledger->Find(h.sender(), h.incarnation(), h.push_id()) > 0;
  if (seen) stats_.set_duplicates_skipped(stats_.duplicates_skipped() + 1);
  bool pending = seen && ledger->IsPending(h.sender(), h.incarnation(), h.push_id());
  if (h.type() == wire::PUSH_PULL && !seen) {
    // Decoded after the move: a gradient of a few bytes lives inside the
    // ZeroMQ message object itself.
    auto shared = std::make_shared<Request>(std::move(req));
    const wire::Header& sh = shared->msg.header;
    const float* grads = DecodeGradient(*shared, shared->msg.frames[0], n);
    if (grads == nullptr) return;
    s = ServePull(range, shared, grads);
    if (!s.ok()) {
      Reject(*shared, s);
      return;
    }
    // Answered once its round is applied (never pending), maybe not yet.
    RecordPush(ledger, sh, 0, PushPending(*shard, sh));
    MaybeFlush();
    return;
  }
  if (push && !seen) {
    const float* grads = DecodeGradient(req, req.msg.frames[0], n);
    if (grads == nullptr) return;
    s = h.raw_delta() && h.type() == wire::PUSH
            ? shard->AddDelta(h.key_begin(), grads, n)
            : shard->Push(h.sender(), h.clock(), h.key_begin(), grads, n, !h.push_continues());
    if (!s.ok()) {
      Reject(req, s);
      return;
    }
    pending = PushPending(*shard, h);
    RecordPush(ledger, h, 0, pending);
  }
  if (push) {
    if (h.type() == wire::PUSH) {
      Message reply = MakeReply(h, Status::OK());
      reply.header.set_pending(pending);
      ReplyWith(req, std::move(reply));
      MaybeFlush();
      return;
    }
  }
  ServePull(range, std::make_shared<Request>(std::move(req))).IgnoreError();  // No push in it.
  if (push) MaybeFlush();
}

int64_t ServerImpl::PullDeadlineMs(const wire::Header& h) const {
  // A hostile deadline near INT64_MAX must not overflow the sum: a pull
  // waits at most a day.
  constexpr int64_t kMaxPullWaitMs = 24 * 3600 * 1000;
  const int64_t wait_ms =
      h.deadline_unix_ms() > 0
          ? std::clamp<int64_t>(h.deadline_unix_ms() - clock_->NowUnixMs(), 0, kMaxPullWaitMs)
          : 60000;
  return clock_->NowMs() + wait_ms;
}

Status ServerImpl::ServePull(RangeState* range, std::shared_ptr<Request> req,
                             const float* push_grads) {
  const wire::Header& h = req->msg.header;
  // A push at clock c is followed by computation at clock c + 1.
  const int64_t pull_clock = h.type() == wire::PUSH_PULL ? h.clock() + 1 : h.clock();
  const int64_t deadline = PullDeadlineMs(h);
  ChainReplica* chain = range->chain.get();
  // Parked, it keeps no payload: a PUSH_PULL's gradient is dropped below.
  const int64_t park_bytes = ParkedRequests::BytesOf(req->identity, 0);
  if (Status admit = parked_.Check(req->identity, park_bytes); !admit.ok()) {
    if (push_grads != nullptr) return admit;  // The caller refuses the push too.
    Reject(*req, admit);
    return Status::OK();
  }
  auto parked = std::make_shared<Parked>();
  PullReply answer =
      [this, req, chain, parked](const Status& st, FloatBuffer params, int64_t params_clock) {
        const bool waited = parked->state == Parked::kWaiting;
        parked->state = Parked::kAnswered;
        parked->ticket.Release();
        if (waited && metrics_.enabled()) metrics_.OnGateWait(*req);
        if (!st.ok()) {
          Reject(*req, st);
          return;
        }
        Message reply = MakeReply(req->msg.header, Status::OK());
        reply.header.set_params_clock(params_clock);
        reply.header.set_encoding(req->msg.header.encoding());
        reply.frames.push_back(EncodeFloats(params, req->msg.header.encoding()));
        if (chain == nullptr) {
          ReplyWith(*req, std::move(reply));
          return;
        }
        chain_->ReplyToPull(chain, req, std::move(reply));
      };
  Status pushed;
  if (push_grads != nullptr) {
    pushed = range->shard->PushPull(h.sender(), h.clock(), h.key_begin(), push_grads,
                                    h.key_count(), !h.push_continues(), pull_clock, deadline,
                                    std::move(answer));
  } else {
    range->shard->Pull(pull_clock, h.key_begin(), h.key_count(), deadline, std::move(answer));
  }
  if (parked->state == Parked::kBeforeGate && pushed.ok()) {
    // Waiting at the gate: counted until answered, and without the gradient
    // it applied (the reply needs only the header).
    parked->state = Parked::kWaiting;
    req->msg.frames.clear();
    parked->ticket = parked_.Charge(req->identity, park_bytes);
  }
  return pushed;
}

void ServerImpl::HandleSparse(Request&& req) {
  if (ChainReplicates()) {
    chain_->HandleSparse(std::move(req));
    return;
  }
  const wire::Header& h = req.msg.header;
  auto it = sparse_.find(h.table());
  if (it == sparse_.end()) {
    Reject(req, HasDenseTable(h.table())
                    ? InvalidArgumentError("table '" + h.table() + "' is dense")
                    : NotFoundError("unknown sparse table '" + h.table() + "'"));
    return;
  }
  SparseShardState* shard = it->second.get();
  const bool push = h.type() == wire::PUSH_ROWS;
  if (h.slot() != 0 && (push || h.slot() < 0 || h.slot() >= shard->num_slots())) {
    Reject(req, InvalidArgumentError("slot " + std::to_string(h.slot()) + " of table '" +
                                     h.table() + "' cannot be read (PULL_ROWS only; the table has " +
                                     std::to_string(shard->num_slots()) + " slots)"));
    return;
  }
  if (!CheckFrameCount(req, push ? 2 : 1)) return;
  StatusOr<const uint64_t*> decoded_ids =
      server_internal::DecodeRowIds(req.msg.frames[0], h.key_count(), &ids_scratch_);
  if (!decoded_ids.ok()) {
    Reject(req, decoded_ids.status());
    return;
  }
  const size_t n = h.key_count();
  const uint64_t* ids = *decoded_ids;
  // Rows of a bucket this server gave away (docs/elastic.md): "moved". A
  // push is refused so only after the exactly-once check below: a "moved"
  // reply then says the push was never applied here, so the client may send
  // its rows on under new keys (a resend of an applied one is a duplicate).
  const bool moved_away = mover_->MovedAway(h.table(), ids, n);
  auto refuse_moved = [&] {
    Reject(req, WrongShardError("rows of table '" + h.table() +
                                "' lie in a hash bucket that moved to another server"));
  };
  if (moved_away && !push) {
    refuse_moved();
    return;
  }
  Status clock_ok = server_internal::CheckClock(h.clock());
  if (!clock_ok.ok()) {
    Reject(req, clock_ok);
    return;
  }
  if (push) {
    const float* grads = DecodeGradient(req, req.msg.frames[1], n * shard->width());
    if (grads == nullptr) return;
    // A resent or replayed row push the table's state reflects (exactly once).
    AppliedLedger* ledger = applied_.SparseLedger(h.table());
    if (h.push_id() > 0 && ledger->Find(h.sender(), h.incarnation(), h.push_id()) > 0) {
      stats_.set_duplicates_skipped(stats_.duplicates_skipped() + 1);
      Message reply = MakeReply(h, Status::OK());
      reply.header.set_pending(ledger->IsPending(h.sender(), h.incarnation(), h.push_id()));
      ReplyWith(req, std::move(reply));
      return;
    }
    if (moved_away) {
      refuse_moved();
      return;
    }
    // A BSP push only joins its round (a row push completes no clock, so
    // this holds after Push too): counted once the round is applied.
    const bool pending = !h.raw_delta() && !shard->Reflects(h.clock());
    // Acknowledged before its rows are updated where that update can no
    // longer fail: it (a cache miss or two per row, the bulk of a row push's
    // time here) then overlaps the reply's way back and the worker's next
    // request on its way in, instead of adding to every round trip. Nothing
    // can observe the difference: the update runs next on this thread, before
    // any other request, timer or checkpoint. Only a crash in between loses
    // it, and a memory store loses everything then.
    const bool acknowledge_first = !h.raw_delta() && shard->PushCannotFail();
    const auto acknowledge = [&] {
      RecordPush(ledger, h, 0, pending);
      Message reply = MakeReply(h, Status::OK());
      reply.header.set_pending(pending);
      ReplyWith(req, std::move(reply));
    };
    if (acknowledge_first) acknowledge();
    // A raw delta: a stateless worker's row changes made while this server
    // was lost.
    Status s = h.raw_delta() ? shard->AddDelta(ids, n, grads) : shard->Push(h.sender(), h.clock(), ids, n, grads);
    if (acknowledge_first) {
      if (!s.ok()) LOG(DFATAL) << "acknowledged row push to '" << h.table() << "' failed: " << s;
      return;
    }
    if (!s.ok()) {
      Reject(req, s);
      return;
    }
    acknowledge();
    return;
  }
  // Everything the gate needs, taken before the request moves.
  const bool inspect = h.slot() != 0 || h.sender() < 0;  // Inspection reads skip the gate.
  const int slot = h.slot();
  const int64_t worker_clock = h.clock();
  const int64_t deadline = PullDeadlineMs(h);
  std::vector<uint64_t> wanted(ids, ids + n);
  auto shared = std::make_shared<Request>(std::move(req));
  RowsReply reply_rows = [this, shared](StatusOr<FloatBuffer> rows) {
    if (!rows.ok()) {
      Reject(*shared, rows.status());
      return;
    }
    Message reply = MakeReply(shared->msg.header, Status::OK());
    reply.header.set_encoding(shared->msg.header.encoding());
    reply.frames.push_back(EncodeFloats(*rows, shared->msg.header.encoding()));
    ReplyWith(*shared, std::move(reply));
  };
  if (inspect) {
    reply_rows(shard->Read(wanted.data(), wanted.size(), slot));
    return;
  }
  // Parked, it keeps its row ids (the gate's copy; the request's frame is
  // dropped below).
  const int64_t park_bytes =
      ParkedRequests::BytesOf(shared->identity, wanted.size() * sizeof(uint64_t));
  if (Status admit = parked_.Check(shared->identity, park_bytes); !admit.ok()) {
    Reject(*shared, admit);
    return;
  }
  auto parked = std::make_shared<Parked>();
  shard->Pull(worker_clock, std::move(wanted), deadline,
              [parked, reply_rows = std::move(reply_rows)](StatusOr<FloatBuffer> rows) {
                parked->state = Parked::kAnswered;
                parked->ticket.Release();
                reply_rows(std::move(rows));
              });
  if (parked->state == Parked::kBeforeGate) {
    parked->state = Parked::kWaiting;
    shared->msg.frames.clear();
    parked->ticket = parked_.Charge(shared->identity, park_bytes);
  }
}

}  // namespace server_internal
}  // namespace relaxps
