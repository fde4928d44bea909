// RangeMover: moving dense key ranges between servers (range_mover.h,
// docs/elastic.md).
#include "server/internal/range_mover.h"

#include <algorithm>

#include <glog/logging.h>

namespace relaxps {
namespace server_internal {

namespace {
constexpr int kPieceTimeoutMs = 30000;
constexpr size_t kFinishedKept = 256;

std::string Describe(const wire::RangeMove& m) {
  return "keys [" + std::to_string(m.begin()) + ", " + std::to_string(m.end()) + ") of table '" +
         m.table() + "' from server " + std::to_string(m.source()) + " to server " +
         std::to_string(m.destination());
}

// The server the map gives `key` of dense table `table` to (-1: none).
int HolderIn(const wire::ShardMap& map, const std::string& table, uint64_t key) {
  for (const wire::TableShards& ts : map.tables()) {
    if (ts.table().name() != table) continue;
    for (const wire::DenseRange& r : ts.ranges()) {
      if (r.begin() <= key && key < r.end()) return r.server();
    }
  }
  return -1;
}
}  // namespace

RangeMover::RangeMover(RangeMoverHost* host, RpcServer* rpc,
                       const RpcClientOptions& peer_options, const Clock* clock,
                       const Options& options)
    : host_(host), clock_(clock), options_(options), peers_(rpc, peer_options) {}

bool RangeMover::Overlaps(const wire::RangeMove& m, const std::string& table, uint64_t begin,
                          uint64_t count) {
  // [begin, begin + count) meets [m.begin, m.end), without a sum that wraps.
  return table == m.table() && begin < m.end() && (begin >= m.begin() || m.begin() - begin < count);
}

size_t RangeMover::held() const {
  size_t n = 0;
  for (const auto& [token, out] : outgoing_) n += out.held.size();
  return n;
}

void RangeMover::Remember(const std::string& token) {
  if (!finished_.insert(token).second) return;
  finished_order_.push_back(token);
  if (finished_order_.size() > kFinishedKept) {
    finished_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

void RangeMover::HandleMoveRange(Request&& req) {
  const wire::Header& h = req.msg.header;
  if (!h.has_range_move() || h.range_move().token().empty() ||
      h.range_move().begin() >= h.range_move().end()) {
    host_->SendError(req, InvalidArgumentError("MOVE_RANGE without a range_move, a token or a "
                                               "non-empty range"));
    return;
  }
  const wire::RangeMove& m = h.range_move();
  const std::string& token = m.token();
  if (finished_.count(token) > 0) {  // A repeat of a step already done.
    host_->SendReply(req, MakeReply(h, Status::OK()));
    return;
  }
  if (m.incoming()) {
    if (m.destination() != host_->server_id()) {
      host_->SendError(req, InvalidArgumentError("MOVE_RANGE for server " +
                                                 std::to_string(m.destination()) + " sent to " +
                                                 std::to_string(host_->server_id())));
      return;
    }
    incoming_[token].move = m;
    LOG(INFO) << "expecting " << Describe(m);
    host_->SendReply(req, MakeReply(h, Status::OK()));
    return;
  }
  if (outgoing_.count(token) > 0) {
    // The coordinator asks again while the move runs: answer the new request.
    outgoing_[token].coordinator_request = std::make_shared<Request>(std::move(req));
    return;
  }
  RangeState* range = host_->DenseRangeAt(m.table(), m.begin());
  Status s;
  if (m.source() != host_->server_id()) {
    s = InvalidArgumentError("MOVE_RANGE from server " + std::to_string(m.source()) +
                             " sent to " + std::to_string(host_->server_id()));
  } else if (range == nullptr || range->shard == nullptr || range->chain != nullptr) {
    s = FailedPreconditionError("server " + std::to_string(host_->server_id()) +
                                " holds no unreplicated dense range with key " +
                                std::to_string(m.begin()) + " of table '" + m.table() + "'");
  } else if (range->shard->spec().end != m.end()) {
    s = FailedPreconditionError("the move of " + Describe(m) + " is not the tail of range [" +
                                std::to_string(range->shard->spec().begin) + ", " +
                                std::to_string(range->shard->spec().end) + ")");
  } else if (m.destination_endpoint().empty()) {
    s = InvalidArgumentError("MOVE_RANGE without the destination's endpoint");
  }
  for (const auto& [t, other] : outgoing_) {
    if (s.ok() && other.move.table() == m.table() && other.range_begin == range->key) {
      s = FailedPreconditionError("range [" + std::to_string(range->key) + ", ...) of table '" +
                                  m.table() + "' is already moving");
    }
  }
  if (!s.ok()) {
    host_->SendError(req, s);
    return;
  }
  Outgoing& out = outgoing_[token];
  out.move = m;
  out.coordinator_request = std::make_shared<Request>(std::move(req));
  out.range_begin = range->key;
  out.drain_deadline_ms = clock_->NowMs() + options_.drain_timeout_ms;
  out.peer = peers_.Connect(m.destination_endpoint());
  LOG(INFO) << "moving " << Describe(m) << ": waiting for the range to be quiescent";
  Poll();
}

void RangeMover::Poll() {
  const int64_t now = clock_->NowMs();
  std::vector<std::string> failed;
  for (auto& [token, out] : outgoing_) {
    if (out.phase == Phase::kDraining) {
      RangeState* range = host_->DenseRangeAt(out.move.table(), out.range_begin);
      if (range != nullptr && range->shard != nullptr && range->shard->Quiescent()) {
        Cut(&out);
      } else if (now >= out.drain_deadline_ms) {
        out.failure = DeadlineExceededError(
            "the range was not quiescent (a BSP round pending or a pull waiting) within " +
            std::to_string(options_.drain_timeout_ms) + " ms (--move_drain_timeout_ms)");
        failed.push_back(token);
      }
    } else if (out.phase == Phase::kAborting) {
      Status s = TakeBack(&out);
      if (s.code() != StatusCode::kUnavailable) failed.push_back(token);  // Done, or broken.
      if (!s.ok() && s.code() != StatusCode::kUnavailable) out.failure = s;
    }
  }
  for (const std::string& token : failed) Finish(token, outgoing_[token].failure);
}

void RangeMover::Cut(Outgoing* out) {
  const wire::RangeMove& m = out->move;
  RangeState* range = host_->DenseRangeAt(m.table(), out->range_begin);
  DenseShardState& shard = *range->shard;
  const uint64_t b = shard.spec().begin, mid = m.begin(), e = m.end();
  // The state of [m, e) (no rounds, no waiters: the slots, the step and the
  // clocks), and the exactly-once record: its ids go with both parts, its
  // part counts stay here (a whole range takes them along).
  wire::ChainSnapshot meta;
  shard.SaveMeta(&meta);
  wire::ChainSnapshot moved = meta;
  range->applied.Save(moved.mutable_dedup(), 0, /*with_seqs=*/false);
  if (mid > b) {
    for (wire::DedupEntry& d : *moved.mutable_dedup()) d.set_parts(0);
  }
  out->meta = moved;
  // The tail's slots leave straight out of the shard's memory: from here on
  // nothing writes them (their requests are held), and the head's writes
  // touch other keys.
  out->frames.clear();
  out->head_copy.clear();
  for (size_t s = 0; s < shard.num_slots(); ++s) {
    out->frames.push_back(shard.ViewSlot(static_cast<int>(s), mid, e - mid));
  }
  if (mid == b) {
    out->head_ledger = std::make_unique<AppliedLedger>(std::move(range->applied));
    host_->DropRange(m.table(), out->range_begin);
  } else {
    // The head stays where it is: the range shrinks to [b, m) in place,
    // keeping its clocks, its record and the memory of its keys.
    Status s = host_->ReshapeRange(range, mid);
    out->in_place = s.ok();
    // Its rounds close only with the workers' CLOCKs until the move is
    // published or taken back (set_coverage_keys).
    if (s.ok()) range->shard->set_coverage_keys(e - b);
    if (!s.ok()) {
      VLOG(1) << "cutting " << Describe(m) << " in place: " << s << "; copying the head";
      if (!CutByCopy(out, meta)) return;
    }
  }
  out->phase = Phase::kSending;
  out->transfer = OutgoingTransfer::Dense(m.id(), m.destination(), moved, out->frames, e - mid,
                                          options_.chunk_bytes);
  LOG(INFO) << "cut " << Describe(m) << (out->in_place ? " in place" : "") << ": sending "
            << out->transfer->bytes() << " bytes in " << out->transfer->num_pieces()
            << " piece(s); its requests are held until the new map";
  out->acked = 0;
  SendPieces(m.token());
}

bool RangeMover::CutByCopy(Outgoing* out, const wire::ChainSnapshot& meta) {
  const wire::RangeMove& m = out->move;
  const uint64_t b = out->range_begin, mid = m.begin();
  RangeState* range = host_->DenseRangeAt(m.table(), b);
  for (size_t s = 0; s < range->shard->num_slots(); ++s) {
    out->head_copy.push_back(range->shard->CopySlot(static_cast<int>(s), b, mid - b));
  }
  out->head_ledger = std::make_unique<AppliedLedger>(std::move(range->applied));
  // The old store shard stays (ParamStore has no drop): the tail's views
  // keep reading it.
  host_->DropRange(m.table(), b);
  StatusOr<RangeState*> head = host_->CreateRange(m.table(), b, mid);
  Status s = head.status();
  if (s.ok()) {
    std::vector<const float*> ptrs;
    std::vector<size_t> sizes;
    for (const FloatBuffer& f : out->head_copy) {
      ptrs.push_back(f.data());
      sizes.push_back(f.size());
    }
    s = (*head)->shard->LoadState(meta, ptrs, sizes);
    if (s.ok()) {
      (*head)->applied = std::move(*out->head_ledger);
      out->head_ledger.reset();
      out->head_copy.clear();
      return true;
    }
    host_->DropRange(m.table(), b);
  }
  // Never expected (the store allocates the head's shard): the whole state
  // is in head_copy and frames, and goes back as it was.
  LOG(ERROR) << "cannot cut " << Describe(m) << ": " << s;
  out->phase = Phase::kAborting;
  out->failure = s;
  return false;
}

void RangeMover::SendPieces(const std::string& token) {
  Outgoing& out = outgoing_.at(token);
  OutgoingTransfer* t = out.transfer.get();
  // A window of pieces in flight: the destination takes them in order (one
  // connection, one loop), so the link carries the next piece while it
  // writes and acknowledges the previous one.
  const size_t window = static_cast<size_t>(std::max(1, options_.window_pieces));
  while (t->next < t->num_pieces() && t->next - out.acked < window) {
    Message msg;
    msg.header.set_type(wire::MOVE_STATE);
    msg.header.set_sender(host_->server_id());
    msg.header.set_table(out.move.table());
    msg.header.set_key_begin(out.move.begin());
    msg.header.set_key_count(out.move.end() - out.move.begin());
    msg.header.set_move_token(token);
    t->FillPiece(t->next, &msg);
    t->in_flight = true;
    t->last_send_ms = clock_->NowMs();
    const size_t index = t->next++;
    peers_.Call(out.peer, std::move(msg), kPieceTimeoutMs,
                [this, token, index](const Status& st, Message&& reply) {
                  Status s = st.ok() ? StatusFromProto(reply.header.status()) : st;
                  OnPieceReply(token, index, s);
                });
  }
}

void RangeMover::OnPieceReply(const std::string& token, size_t index, const Status& status) {
  auto it = outgoing_.find(token);
  if (it == outgoing_.end() || it->second.phase != Phase::kSending) return;
  Outgoing& out = it->second;
  OutgoingTransfer* t = out.transfer.get();
  if (t == nullptr || index < out.acked) return;  // Stale.
  if (!status.ok()) {
    Abort(&out, status.WithPrefix("the destination did not take piece " + std::to_string(index)));
    return;
  }
  if (index != out.acked) {  // The destination answers in order; never expected.
    Abort(&out, InternalError("piece " + std::to_string(index) + " acknowledged before piece " +
                              std::to_string(out.acked)));
    return;
  }
  if (++out.acked < t->num_pieces()) {
    t->in_flight = out.acked < t->next;
    SendPieces(token);
    return;
  }
  t->in_flight = false;
  LOG(INFO) << "moved " << Describe(out.move) << " (" << t->bytes()
            << " bytes): waiting for the map that publishes it";
  out.phase = Phase::kSent;
  out.transfer.reset();
  out.frames.clear();
  Remember(token);
  if (out.coordinator_request != nullptr) {
    host_->SendReply(*out.coordinator_request,
                     MakeReply(out.coordinator_request->msg.header, Status::OK()));
    out.coordinator_request.reset();
  }
}

void RangeMover::Abort(Outgoing* out, const Status& why) {
  LOG(WARNING) << "the move of " << Describe(out->move) << " failed: " << why
               << "; taking the range back";
  out->phase = Phase::kAborting;
  out->failure = why;
  out->transfer.reset();
  Poll();
}

Status RangeMover::TakeBack(Outgoing* out) {
  const wire::RangeMove& m = out->move;
  const uint64_t b = out->range_begin, mid = m.begin(), e = m.end();
  RangeState* head = mid > b ? host_->DenseRangeAt(m.table(), b) : nullptr;
  if (out->in_place) {
    // [b, m) grows back over the tail's memory, unchanged since the cut (its
    // requests were held), with its pending rounds (which waited for the
    // CLOCKs that follow the held pushes); the head's clocks and record are
    // the range's. No need to wait for quiescence.
    if (head == nullptr) return InternalError("the head of the cut range is lost");
    Status grown = host_->ReshapeRange(head, e);
    head->shard->set_coverage_keys(0);  // Rounds close on what it holds, grown or not.
    RETURN_IF_ERROR(grown);
    LOG(INFO) << "took back " << Describe(m) << ": range [" << b << ", " << e << ") whole again";
    return Status::OK();
  }
  if (head != nullptr && !head->shard->Quiescent()) {
    return UnavailableError("waiting for [b, m) to be quiescent");
  }
  // [b, e) again: the head's live state (or its copy, if the cut did not
  // get as far as creating it) and the tail's state at the cut.
  wire::ChainSnapshot meta;
  std::vector<FloatBuffer> head_slots = out->head_copy;
  AppliedLedger ledger{RangeState::kUnreplicatedWindow};
  if (head != nullptr) {
    head->shard->SaveMeta(&meta);
    head_slots.clear();
    for (size_t s = 0; s < head->shard->num_slots(); ++s) {
      head_slots.push_back(head->shard->CopySlot(static_cast<int>(s), b, mid - b));
    }
    ledger = std::move(head->applied);
    host_->DropRange(m.table(), b);
  } else {
    meta = out->meta;
    meta.clear_dedup();
    if (out->head_ledger != nullptr) {
      ledger = std::move(*out->head_ledger);
    } else {
      ledger.Load(out->meta.dedup());  // Not expected: the cut keeps the record until the head has it.
    }
  }
  if (mid > b && head_slots.size() != out->frames.size()) {
    return InternalError("the head of the cut range is lost");
  }
  // The range's old store shard, which the tail's frames read (a whole
  // range's loads onto itself).
  ASSIGN_OR_RETURN(RangeState * whole, host_->CreateRange(m.table(), b, e));
  for (size_t s = 0; s < out->frames.size(); ++s) {
    if (mid > b) {
      RETURN_IF_ERROR(whole->shard->LoadSlotPiece(s, 0, head_slots[s].data(), mid - b));
    }
    RETURN_IF_ERROR(whole->shard->LoadSlotPiece(s, mid - b, out->frames[s].data(), e - mid));
  }
  RETURN_IF_ERROR(whole->shard->LoadMeta(meta, {}));
  whole->applied = std::move(ledger);
  LOG(INFO) << "took back " << Describe(m) << ": range [" << b << ", " << e << ") whole again";
  return Status::OK();
}

void RangeMover::Finish(const std::string& token, Status status) {
  auto it = outgoing_.find(token);
  if (it == outgoing_.end()) return;
  Outgoing out = std::move(it->second);
  outgoing_.erase(it);
  if (out.coordinator_request != nullptr) {
    host_->SendError(*out.coordinator_request,
                     status.WithPrefix("moving " + Describe(out.move)));
  }
  for (Request& r : out.held) host_->Redispatch(std::move(r));
}

bool RangeMover::HoldIfMoving(Request* req) {
  const wire::Header& h = req->msg.header;
  for (auto& [token, out] : outgoing_) {
    if (out.phase == Phase::kDraining) continue;
    if (!Overlaps(out.move, h.table(), h.key_begin(), std::max<uint64_t>(1, h.key_count()))) {
      continue;
    }
    out.held.push_back(std::move(*req));
    return true;
  }
  return false;
}

void RangeMover::OnMapInstalled(const wire::ShardMap& map) {
  std::vector<std::string> published;
  for (const auto& [token, out] : outgoing_) {
    if (out.phase != Phase::kSent) continue;
    const int holder = HolderIn(map, out.move.table(), out.move.begin());
    if (holder >= 0 && holder != host_->server_id()) published.push_back(token);
  }
  for (const std::string& token : published) {
    auto it = outgoing_.find(token);
    const Outgoing& out = it->second;
    std::deque<Request> held = std::move(it->second.held);
    LOG(INFO) << "the map " << map.version() << " publishes the move of " << Describe(out.move)
              << ": " << held.size() << " held request(s) go on";
    // The tail is the destination's now: its memory goes back.
    RangeState* head = out.in_place ? host_->DenseRangeAt(out.move.table(), out.range_begin)
                                    : nullptr;
    if (head != nullptr) {
      head->shard->set_coverage_keys(0);
      host_->ReleaseRangeTail(head, out.move.end());
    }
    outgoing_.erase(it);
    for (Request& r : held) host_->Redispatch(std::move(r));
  }
}

void RangeMover::HandleMoveState(Request&& req) {
  const wire::Header& h = req.msg.header;
  const std::string& token = h.move_token();
  if (finished_.count(token) > 0) {  // A resent last piece.
    host_->SendReply(req, MakeReply(h, Status::OK()));
    return;
  }
  auto it = incoming_.find(token);
  if (token.empty() || it == incoming_.end()) {
    host_->SendError(req, PermissionDeniedError("MOVE_STATE without the token of a move this "
                                                "server expects"));
    return;
  }
  Incoming& in = it->second;
  const wire::RangeMove& m = in.move;
  if (h.table() != m.table() || h.key_begin() != m.begin() ||
      h.key_count() != m.end() - m.begin() || !h.has_snapshot_piece()) {
    host_->SendError(req, InvalidArgumentError("MOVE_STATE does not match the move of " +
                                               Describe(m)));
    return;
  }
  const wire::SnapshotPiece& p = h.snapshot_piece();
  if (p.index() == 0 && in.next_piece != 0) in.next_piece = 0;  // The source started over.
  if (p.index() != in.next_piece) {
    host_->SendError(req, FailedPreconditionError("MOVE_STATE piece " + std::to_string(p.index()) +
                                                  ", expected " + std::to_string(in.next_piece)));
    return;
  }
  if (p.index() == 0 && !in.created) {
    if (HolderIn(host_->installed_map(), m.table(), m.begin()) == host_->server_id()) {
      host_->SendError(req, FailedPreconditionError("the map already gives " + Describe(m) +
                                                    " to this server"));
      return;
    }
    // A range left from an earlier move of these keys that failed.
    if (RangeState* stale = host_->DenseRangeAt(m.table(), m.begin()); stale != nullptr) {
      host_->DropRange(m.table(), stale->key);
    }
    StatusOr<RangeState*> created = host_->CreateRange(m.table(), m.begin(), m.end());
    if (!created.ok()) {
      host_->SendError(req, created.status());
      return;
    }
    in.created = true;
  }
  RangeState* range = host_->DenseRangeAt(m.table(), m.begin());
  if (range == nullptr || range->shard == nullptr) {
    host_->SendError(req, FailedPreconditionError("the moved range is gone"));
    return;
  }
  Status s;
  if (!req.msg.frames.empty()) {
    const Frame& f = req.msg.frames[0];
    if (f.size() % sizeof(float) != 0) {
      s = InvalidArgumentError("MOVE_STATE frame of " + std::to_string(f.size()) + " bytes");
    } else {
      s = range->shard->LoadSlotPiece(p.frame(), p.offset(), f.as<float>(),
                                      f.size() / sizeof(float));
    }
  }
  if (s.ok() && p.last()) {
    s = range->shard->LoadMeta(h.chain_snapshot(), {});
    if (s.ok()) range->applied.Load(h.chain_snapshot().dedup());
  }
  if (!s.ok()) {
    host_->SendError(req, s);
    return;
  }
  ++in.next_piece;
  if (p.last()) {
    LOG(INFO) << "received " << Describe(m) << " (" << p.total() << " floats)";
    incoming_.erase(it);
    Remember(token);
  }
  host_->SendReply(req, MakeReply(h, Status::OK()));
}

}  // namespace server_internal
}  // namespace relaxps
