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
  if (n > shard->spec().end - h.key_begin()) {
    HandleDenseSpan(std::move(req), range);
    return;
  }
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

namespace {

// One range's keys of a spanning request.
struct SpanPiece {
  RangeState* range;
  uint64_t begin;   // Global first key.
  uint64_t count;
  uint64_t offset;  // Of `begin` within the request's keys.
  bool seen;        // Its exactly-once record has the push.
};

// A spanning pull's answers, gathered: the request is answered once every
// piece was (with the first error, or the pieces' parameters in key order
// and the lowest clock they reflect).
struct SpanPull {
  size_t remaining = 0;
  Status error;
  FloatBuffer params;
  int64_t params_clock = INT64_MAX;
  bool waited = false;  // Some piece waited at its gate (parked).
  ParkedRequests::Ticket ticket;
};

}  // namespace

void ServerImpl::HandleDenseSpan(Request&& req, RangeState* first) {
  const wire::Header& h = req.msg.header;
  const uint64_t n = h.key_count();
  // The ranges [key_begin, key_begin + n) spans, all checked first.
  const uint64_t end = h.key_begin() + n;
  if (end < h.key_begin()) {
    Reject(req, InvalidArgumentError("keys from " + std::to_string(h.key_begin()) + " count " +
                                     std::to_string(n) + " wrap past 2^64"));
    return;
  }
  std::vector<SpanPiece> pieces;
  for (RangeState* range = first; range != nullptr;) {
    const DenseShardSpec& spec = range->shard->spec();
    const uint64_t b = pieces.empty() ? h.key_begin() : spec.begin;
    if (range->chain != nullptr) {
      // Each chained range forwards on its own chain: never coalesced.
      Reject(req, InvalidArgumentError(
                      "keys [" + std::to_string(h.key_begin()) + ", " + std::to_string(end) +
                      ") of table '" + h.table() + "' span several ranges and range [" +
                      std::to_string(spec.begin) + ", " + std::to_string(spec.end) +
                      ") is replicated: a request for a replicated range carries its keys only"));
      return;
    }
    const uint64_t e = std::min(end, spec.end);
    pieces.push_back({range, b, e - b, b - h.key_begin(), false});
    if (e == end) break;
    range = FindRange(h.table(), e);
    if (range == nullptr) {
      // A range this server does not hold (any more): "moved", whole.
      Reject(req, WrongShardError("keys [" + std::to_string(e) + ", " + std::to_string(end) +
                                  ") of table '" + h.table() +
                                  "' are not all in this server's ranges"));
      return;
    }
  }
  const bool push = h.type() != wire::PULL;
  Status s = server_internal::CheckClock(h.clock());
  for (const SpanPiece& p : pieces) {
    if (s.ok() && push) s = CheckClockAhead(*p.range->shard, h.clock(), h.sender());
  }
  if (!s.ok()) {
    Reject(req, s);
    return;
  }
  const int slots = static_cast<int>(first->shard->num_slots());
  if (h.slot() != 0 && (h.type() != wire::PULL || h.slot() < 0 || h.slot() >= slots)) {
    Reject(req, InvalidArgumentError("slot " + std::to_string(h.slot()) + " of table '" +
                                     h.table() + "' cannot be read (PULL only; the table has " +
                                     std::to_string(slots) + " slots)"));
    return;
  }
  if (!CheckFrameCount(req, push ? 1 : 0)) return;
  if (h.slot() != 0) {
    // Inspection of a state slot: each range's copy at once, without the
    // gates (no range here is chained: a pull by no worker goes through
    // the gates, as for one range).
    FloatBuffer params = FloatBuffer::Uninitialized(n);
    int64_t params_clock = INT64_MAX;
    for (const SpanPiece& p : pieces) {
      FloatBuffer piece = p.range->shard->CopySlot(h.slot(), p.begin, p.count);
      std::copy(piece.data(), piece.data() + p.count, params.data() + p.offset);
      params_clock = std::min(params_clock, p.range->shard->visible_clock());
    }
    Message reply = MakeReply(h, Status::OK());
    reply.header.set_params_clock(params_clock);
    reply.header.set_encoding(h.encoding());
    reply.frames.push_back(EncodeFloats(params, h.encoding()));
    ReplyWith(req, std::move(reply));
    return;
  }
  // Exactly once, per range: a resend finds the push in the record of every
  // range that applied it (all of them, or, if an earlier try failed
  // halfway, those before the failure) and is applied only where it is not.
  bool any_seen = false;
  bool pending = false;
  for (SpanPiece& p : pieces) {
    p.seen = push && h.push_id() > 0 &&
             p.range->applied.Find(h.sender(), h.incarnation(), h.push_id()) > 0;
    any_seen = any_seen || p.seen;
    pending = pending ||
              (p.seen && p.range->applied.IsPending(h.sender(), h.incarnation(), h.push_id()));
  }
  if (any_seen) stats_.set_duplicates_skipped(stats_.duplicates_skipped() + 1);
  // The part is counted by the first range that applies it, unless a range
  // applied it before (then it was counted there).
  bool count = !any_seen;
  // A later piece starts its range: the push's first keys there (one
  // optimizer step), whether or not the request continues a split push.
  auto new_step = [continues = h.push_continues()](const SpanPiece& p) {
    return p.offset > 0 || !continues;
  };
  if (h.type() == wire::PUSH) {
    const float* grads = DecodeGradient(req, req.msg.frames[0], n);
    if (grads == nullptr) return;
    for (const SpanPiece& p : pieces) {
      if (p.seen) continue;
      DenseShardState* shard = p.range->shard.get();
      s = h.raw_delta() ? shard->AddDelta(p.begin, grads + p.offset, p.count)
                        : shard->Push(h.sender(), h.clock(), p.begin, grads + p.offset, p.count,
                                      new_step(p));
      if (!s.ok()) {
        // The ranges before it applied their keys (recorded: a resend
        // applies only the rest).
        Reject(req, s);
        MaybeFlush();
        return;
      }
      const bool waits = PushPending(*shard, h);
      pending = pending || waits;
      RecordPush(&p.range->applied, h, 0, waits, count);
      count = false;
    }
    Message reply = MakeReply(h, Status::OK());
    reply.header.set_pending(pending);
    ReplyWith(req, std::move(reply));
    MaybeFlush();
    return;
  }
  // PULL and PUSH_PULL: each range answers its keys when its gate allows.
  auto shared = std::make_shared<Request>(std::move(req));
  const wire::Header& sh = shared->msg.header;
  const float* grads = nullptr;
  if (push) {
    grads = DecodeGradient(*shared, shared->msg.frames[0], n);
    if (grads == nullptr) return;
  }
  const int64_t park_bytes = ParkedRequests::BytesOf(shared->identity, 0);
  if (Status admit = parked_.Check(shared->identity, park_bytes); !admit.ok()) {
    Reject(*shared, admit);
    return;
  }
  auto gather = std::make_shared<SpanPull>();
  gather->remaining = pieces.size();
  gather->params = FloatBuffer::Uninitialized(n);
  auto answer_of = [this, shared, gather](const SpanPiece& p) -> PullReply {
    return [this, shared, gather, offset = p.offset, count = p.count](
               const Status& st, FloatBuffer params, int64_t params_clock) {
      if (!st.ok()) {
        if (gather->error.ok()) gather->error = st;
      } else {
        std::copy(params.data(), params.data() + count, gather->params.data() + offset);
        gather->params_clock = std::min(gather->params_clock, params_clock);
      }
      if (--gather->remaining > 0) return;
      gather->ticket.Release();
      if (gather->waited && metrics_.enabled()) metrics_.OnGateWait(*shared);
      if (!gather->error.ok()) {
        Reject(*shared, gather->error);
        return;
      }
      Message reply = MakeReply(shared->msg.header, Status::OK());
      reply.header.set_params_clock(gather->params_clock);
      reply.header.set_encoding(shared->msg.header.encoding());
      reply.frames.push_back(EncodeFloats(gather->params, shared->msg.header.encoding()));
      ReplyWith(*shared, std::move(reply));
    };
  };
  // A push at clock c is followed by computation at clock c + 1.
  const int64_t pull_clock = push ? sh.clock() + 1 : sh.clock();
  const int64_t deadline = PullDeadlineMs(sh);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SpanPiece& p = pieces[i];
    DenseShardState* shard = p.range->shard.get();
    if (!push || p.seen) {
      shard->Pull(pull_clock, p.begin, p.count, deadline, answer_of(p));
      continue;
    }
    s = shard->PushPull(sh.sender(), sh.clock(), p.begin, grads + p.offset, p.count, new_step(p),
                        pull_clock, deadline, answer_of(p));
    if (!s.ok()) {
      // Not answered: this piece and the ones not tried fail the request
      // (once the pieces before it are answered).
      for (size_t j = i; j < pieces.size(); ++j) answer_of(pieces[j])(s, FloatBuffer(), 0);
      break;
    }
    // Answered once its round is applied (never pending).
    RecordPush(&p.range->applied, sh, 0, PushPending(*shard, sh), count);
    count = false;
  }
  if (gather->remaining > 0) {
    // Waiting at a gate: counted until answered, without the gradient.
    gather->waited = true;
    shared->msg.frames.clear();
    gather->ticket = parked_.Charge(shared->identity, park_bytes);
  }
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
