// RangeMover: moving dense key ranges and sparse hash buckets between
// servers (range_mover.h, docs/elastic.md).
#include "server/internal/range_mover.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include <glog/logging.h>

#include "server/internal/bucket_copy.h"
#include "server/internal/request_codec.h"

namespace relaxps {
namespace server_internal {

namespace {
constexpr size_t kFinishedKept = 256;

const wire::TableShards* TableIn(const wire::ShardMap& map, const std::string& table) {
  for (const wire::TableShards& ts : map.tables()) {
    if (ts.table().name() == table) return &ts;
  }
  return nullptr;
}

bool IsSparse(const wire::TableShards& ts) {
  return ts.table().type() == static_cast<int>(TableType::kSparse);
}

// (Of a sparse table the "keys" are bucket indices.)
std::string Describe(const wire::RangeMove& m) {
  return "keys [" + std::to_string(m.begin()) + ", " + std::to_string(m.end()) + ") of table '" +
         m.table() + "' from server " + std::to_string(m.source()) + " to server " +
         std::to_string(m.destination());
}

// The buckets of `ts` in [m.begin, m.end) that `server` holds.
std::set<int> BucketsOf(const wire::TableShards& ts, int server, const wire::RangeMove& m) {
  std::set<int> held;
  for (uint64_t k = m.begin(); k < m.end() && k < static_cast<uint64_t>(ts.buckets_size());
       ++k) {
    if (ts.buckets(static_cast<int>(k)).server() == server) held.insert(static_cast<int>(k));
  }
  return held;
}

// The server the map gives the first key of dense move `m` to (-1: none).
int HolderIn(const wire::ShardMap& map, const wire::RangeMove& m) {
  const wire::TableShards* ts = TableIn(map, m.table());
  if (ts == nullptr || IsSparse(*ts)) return -1;
  for (const wire::DenseRange& r : ts->ranges()) {
    if (r.begin() <= m.begin() && m.begin() < r.end()) return r.server();
  }
  return -1;
}

// The chain of the range [m.begin, m.end) of m.table in `map` (empty: none).
std::vector<int> ChainIn(const wire::ShardMap& map, const wire::RangeMove& m) {
  for (const wire::TableShards& ts : map.tables()) {
    if (ts.table().name() != m.table()) continue;
    for (const wire::DenseRange& r : ts.ranges()) {
      if (r.begin() == m.begin() && r.end() == m.end()) {
        return std::vector<int>(r.chain().begin(), r.chain().end());
      }
    }
  }
  return {};
}

bool Member(const std::vector<int>& chain, int server) {
  return std::find(chain.begin(), chain.end(), server) != chain.end();
}

// The CURVE public key the map gives server `id` ("" under plain TCP, or if
// the map does not list it): a destination's ROUTER must prove it.
std::string CurveKeyIn(const wire::ShardMap& map, int id) {
  for (const wire::ServerInfo& s : map.servers()) {
    if (s.id() == id) return s.curve_public_key();
  }
  return "";
}

// A destination that does not answer (dead, or stuck) fails a move for
// good: Aborted, which the coordinator does not ask the source to start over.
Status FailsForGood(const Status& status) {
  return status.code() == StatusCode::kDeadlineExceeded ||
                 status.code() == StatusCode::kUnavailable
             ? AbortedError(status.ToString())
             : status;
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
  for (const auto& [token, leave] : leaving_) n += leave.held.size();
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
  if (m.incoming() && !StatusFromProto(h.status()).ok()) {  // The coordinator gave it up.
    DropIncoming(token, StatusFromProto(h.status()));
    host_->SendReply(req, MakeReply(h, Status::OK()));
    return;
  }
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
  if (const wire::TableShards* ts = TableIn(host_->installed_map(), m.table());
      ts != nullptr && IsSparse(*ts)) {
    Status s = CheckBucketMove(m, *ts);
    if (!s.ok()) {
      host_->SendError(req, s);
      return;
    }
    Outgoing& out = outgoing_[token];
    out.move = m;
    out.bucket = true;
    out.buckets = BucketsOf(*ts, m.source(), m);
    out.num_buckets = ts->buckets_size();
    out.coordinator_request = std::make_shared<Request>(std::move(req));
    out.range_begin = m.begin();
    out.drain_deadline_ms = clock_->NowMs() + options_.drain_timeout_ms;
    out.peer = peers_.Connect(m.destination_endpoint());
    LOG(INFO) << "moving " << Describe(m) << ": waiting for the table to be quiescent";
    Poll();
    return;
  }
  RangeState* range = host_->DenseRangeAt(m.table(), m.begin());
  if (leaving_.count(token) > 0 || (range != nullptr && range->chain != nullptr)) {
    LeaveChain(std::move(req), range);
    return;
  }
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
    if (s.ok() && !other.bucket && other.move.table() == m.table() &&
        other.range_begin == range->key) {
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
  // Under curve a CURVE client that does not know its server's key never
  // completes the handshake: the transfer would wait out its deadline.
  out.peer = peers_.Connect(m.destination_endpoint(),
                            CurveKeyIn(host_->installed_map(), m.destination()));
  if (options_.copy_first) {
    StartCopy(&out, range);
    return;
  }
  LOG(INFO) << "moving " << Describe(m) << ": waiting for the range to be quiescent";
  Poll();
}

void RangeMover::StartCopy(Outgoing* out, RangeState* range) {
  const wire::RangeMove& m = out->move;
  const uint64_t b = range->shard->spec().begin;
  std::function<void(const DenseShardState::Write&)> observer;
  out->forwarding = options_.forward_updates;
  if (out->forwarding) {
    observer = [this, token = m.token()](const DenseShardState::Write& w) {
      ForwardWrite(token, w);
    };
  }
  range->shard->TrackWrites(m.begin() - b, m.end() - b,
                            std::max<uint64_t>(1, options_.write_chunk_keys), std::move(observer));
  out->phase = Phase::kCopying;
  out->copying = true;
  out->slots = range->shard->num_slots();
  if (const LentSpans* lent = range->shard->lent_spans(); lent != nullptr) {
    out->lent_before = lent->stats();
  }
  LOG(INFO) << "moving " << Describe(m) << ": copying it while it serves"
            << (out->forwarding ? ", forwarding its updates" : "");
  SendRound(out, {OutgoingTransfer::Run{0, m.end() - m.begin()}});
}

void RangeMover::SendRound(Outgoing* out, const std::vector<OutgoingTransfer::Run>& runs) {
  const wire::RangeMove& m = out->move;
  RangeState* range = host_->DenseRangeAt(m.table(), out->range_begin);
  std::vector<FloatBuffer> frames;
  for (size_t s = 0; s < range->shard->num_slots(); ++s) {
    frames.push_back(range->shard->ViewSlot(static_cast<int>(s), m.begin(), m.end() - m.begin()));
  }
  // The pieces' floats leave as they are when the piece is made: the range
  // goes on being written (a write after a piece left marks its chunk for
  // the next round, or is forwarded), and a write of keys in flight waits
  // until ZeroMQ sent them (PiecePayload).
  auto payload = [this, token = m.token(), views = frames](uint32_t slot, uint64_t offset,
                                                         uint64_t count) {
    return PiecePayload(token, views[slot], slot, offset, count);
  };
  out->transfer = OutgoingTransfer::DenseRuns(m.id(), m.destination(), wire::ChainSnapshot(),
                                              std::move(frames), runs, options_.chunk_bytes,
                                              out->next_index, /*final=*/false,
                                              std::move(payload));
  out->acked = 0;
  SendPieces(m.token());
}

Frame RangeMover::PiecePayload(const std::string& token, const FloatBuffer& view, uint32_t slot,
                               uint64_t offset, uint64_t count) {
  auto it = outgoing_.find(token);
  RangeState* range = it == outgoing_.end() ? nullptr
                                            : host_->DenseRangeAt(it->second.move.table(),
                                                                  it->second.range_begin);
  if (range == nullptr || range->shard == nullptr || range->key != it->second.range_begin ||
      range->shard->spec().end != it->second.move.end()) {
    // Never expected (the move aborts when its round ends): a copy of the
    // memory the view keeps allocated.
    return Frame::Copy(view.data() + offset, count * sizeof(float));
  }
  it->second.lent_bytes += count * sizeof(float);
  return Frame::Share(range->shard->LendSlot(static_cast<int>(slot), it->second.move.begin() + offset,
                                             count, options_.lend_wait_ms));
}

void RangeMover::ForwardWrite(const std::string& token, const DenseShardState::Write& w) {
  auto it = outgoing_.find(token);
  if (it == outgoing_.end() || !it->second.forwarding || it->second.cut) return;
  Outgoing& out = it->second;
  const wire::RangeMove& m = out.move;
  // The moved keys [m, e) as offsets in the range [b, e).
  const uint64_t lo = std::max(w.offset, m.begin() - out.range_begin);
  const uint64_t hi = std::min<uint64_t>(w.offset + w.n, m.end() - out.range_begin);
  if (lo >= hi) return;
  if (w.kind == DenseShardState::Write::kReset) {
    StopForwarding(&out, "keys of the range were replaced (a re-seed or a state load)");
    return;
  }
  const uint64_t bytes = (hi - lo) * sizeof(float);
  if (out.forward_unacked_bytes + bytes > options_.forward_window_bytes) {
    StopForwarding(&out, "the destination fell behind: more than " +
                             std::to_string(options_.forward_window_bytes >> 20) +
                             " MiB of forwarded updates unacknowledged (--move_forward_window_mb)");
    return;
  }
  // What a chain replica gets of an update: the gradients of the keys, and
  // the step and learning-rate scale the optimizer applied them at (in a
  // second frame: one float).
  Message msg;
  msg.header.set_type(wire::MOVE_STATE);
  msg.header.set_sender(host_->server_id());
  msg.header.set_table(m.table());
  msg.header.set_key_begin(out.range_begin + lo);
  msg.header.set_key_count(hi - lo);
  msg.header.set_move_token(token);
  // A forward: no snapshot_piece, a chain_seq (the data path's `forwarded`
  // is a chain's, checked as such).
  msg.header.set_chain_seq(++out.forward_seq);
  msg.frames.push_back(Frame::Copy(w.values + (lo - w.offset), bytes));
  if (w.kind == DenseShardState::Write::kDelta) {
    msg.header.set_raw_delta(true);
  } else {
    msg.header.mutable_chain_snapshot()->set_step(w.step);
    msg.frames.push_back(Frame::Copy(&w.lr_scale, sizeof(float)));
  }
  out.forward_unacked_bytes += bytes;
  out.forward_bytes += bytes;
  peers_.Call(out.peer, std::move(msg), options_.piece_timeout_ms,
              [this, token, bytes](const Status& st, Message&& reply) {
                OnForwardReply(token, bytes, st.ok() ? StatusFromProto(reply.header.status()) : st);
              });
}

void RangeMover::OnForwardReply(const std::string& token, uint64_t bytes, const Status& status) {
  auto it = outgoing_.find(token);
  if (it == outgoing_.end()) return;
  Outgoing& out = it->second;
  out.forward_unacked_bytes -= std::min(bytes, out.forward_unacked_bytes);
  ++out.forwards_acked;
  if (!status.ok() && (out.phase == Phase::kCopying || out.phase == Phase::kDraining ||
                       out.phase == Phase::kSending)) {
    const Status why = FailsForGood(status);
    Abort(&out, why.WithPrefix(
                    "the destination did not take a forwarded update" +
                    std::string(out.cut ? "" : " (the copy phase: nothing was cut)")));
  }
}

void RangeMover::StopForwarding(Outgoing* out, const std::string& why) {
  if (!out->forwarding) return;
  out->forwarding = false;
  out->forward_stop = why;
  LOG(WARNING) << "moving " << Describe(out->move) << ": no more forwarding (" << why
               << "); the cut-over sends the keys written since the copy began";
}

WriteTracker* RangeMover::TrackerOf(const Outgoing& out) {
  RangeState* range = host_->DenseRangeAt(out.move.table(), out.range_begin);
  if (range == nullptr || range->shard == nullptr || range->key != out.range_begin) return nullptr;
  return range->shard->write_tracker();
}

void RangeMover::StopTracking(const Outgoing& out) {
  if (out.bucket || !out.copying || out.cut) return;
  RangeState* range = host_->DenseRangeAt(out.move.table(), out.range_begin);
  if (range != nullptr && range->shard != nullptr && range->key == out.range_begin) {
    range->shard->StopTrackingWrites();
  }
}

void RangeMover::EndCopyRound(const std::string& token) {
  Outgoing& out = outgoing_.at(token);
  out.next_index += static_cast<uint32_t>(out.transfer->num_pieces());
  out.round_bytes = out.transfer->bytes();
  out.copied_bytes += out.round_bytes;
  out.transfer.reset();
  WriteTracker* tracker = TrackerOf(out);
  if (tracker == nullptr) {
    Abort(&out, AbortedError("the range changed during the copy phase"));
    return;
  }
  RangeState* range = host_->DenseRangeAt(out.move.table(), out.range_begin);
  const uint64_t written = tracker->written_keys() * range->shard->num_slots() * sizeof(float);
  // Another round while what was written during this one shrinks and is
  // worth a round: the cut-over then sends only what the last one missed.
  // Not while forwarding: the destination has every write already.
  if (!out.forwarding && out.catchup_rounds < options_.catchup_rounds &&
      written > options_.catchup_bytes &&
      written < out.round_bytes) {
    ++out.catchup_rounds;
    std::vector<OutgoingTransfer::Run> runs;
    for (const WriteTracker::Run& r : tracker->Take()) runs.push_back({r.offset, r.count});
    VLOG(1) << "moving " << Describe(out.move) << ": catch-up round " << out.catchup_rounds
            << " sends " << written << " bytes";
    SendRound(&out, runs);
    return;
  }
  LOG(INFO) << "moving " << Describe(out.move) << ": copied " << out.copied_bytes << " bytes in "
            << 1 + out.catchup_rounds << " round(s); " << written
            << " bytes written since; waiting for the range to be quiescent";
  out.phase = Phase::kDraining;
  out.drain_deadline_ms = clock_->NowMs() + options_.drain_timeout_ms;
  Poll();
}

void RangeMover::ReportCutover(const Outgoing& out, int64_t map_version) {
  if (options_.events == nullptr || out.bucket) return;
  options_.events->Emit(
      "range_move_cutover",
      {{"table", out.move.table()},
       {"begin", out.move.begin()},
       {"end", out.move.end()},
       {"destination", out.move.destination()},
       {"map_version", map_version},
       {"range_bytes", out.range_bytes},
       {"copy_phase", out.copying},
       {"copied_bytes", out.copied_bytes},
       {"catchup_rounds", out.catchup_rounds},
       {"cutover_bytes", out.cutover_bytes},
       {"forwarding", out.forwarding},
       {"forwarded_updates", out.forward_seq},
       {"forwarded_bytes", out.forward_bytes},
       {"lent_bytes", out.lent_bytes},
       {"write_waits", out.lent_at_cut.waits - out.lent_before.waits},
       {"write_wait_ms", (out.lent_at_cut.wait_us - out.lent_before.wait_us) / 1000},
       {"torn_pieces", out.lent_at_cut.torn - out.lent_before.torn},
       {"pause_ms", static_cast<long long>(clock_->NowMs() - out.cut_ms)}});
}

void RangeMover::DropIncoming(const std::string& token, const Status& why) {
  auto it = incoming_.find(token);
  if (it == incoming_.end()) return;
  const wire::RangeMove m = it->second.move;
  const bool created = it->second.created;
  incoming_.erase(it);
  LOG(WARNING) << "the move of " << Describe(m) << " failed (" << why
               << "): dropping what arrived of it";
  if (!created || HolderIn(host_->installed_map(), m) == host_->server_id()) return;
  RangeState* range = host_->DenseRangeAt(m.table(), m.begin());
  if (range != nullptr && range->key == m.begin() && range->shard != nullptr &&
      range->chain == nullptr && range->shard->spec().end == m.end()) {
    host_->DropRange(m.table(), m.begin());
  }
}

Status RangeMover::CheckBucketMove(const wire::RangeMove& m, const wire::TableShards& ts) const {
  const int me = host_->server_id();
  if (m.source() != me) {
    return InvalidArgumentError("MOVE_RANGE from server " + std::to_string(m.source()) +
                                " sent to " + std::to_string(me));
  }
  if (m.end() > static_cast<uint64_t>(ts.buckets_size())) {
    return InvalidArgumentError("a move of sparse table '" + m.table() + "' names buckets [" +
                                std::to_string(m.begin()) + ", " + std::to_string(m.end()) +
                                ") of " + std::to_string(ts.buckets_size()));
  }
  const std::set<int> buckets = BucketsOf(ts, me, m);
  bool chained = false;
  for (int k : buckets) chained |= ts.buckets(k).chain_size() > 0;
  if (buckets.empty() || chained || host_->SparseTable(m.table()) == nullptr) {
    return FailedPreconditionError("server " + std::to_string(me) +
                                   " holds no unreplicated bucket in [" +
                                   std::to_string(m.begin()) + ", " + std::to_string(m.end()) +
                                   ") of sparse table '" + m.table() + "'");
  }
  if (m.destination_endpoint().empty()) {
    return InvalidArgumentError("MOVE_RANGE without the destination's endpoint");
  }
  for (const auto& [t, other] : outgoing_) {
    if (!other.bucket || other.move.table() != m.table()) continue;
    for (int k : buckets) {
      if (other.buckets.count(k) > 0) {
        return FailedPreconditionError("bucket " + std::to_string(k) + " of table '" +
                                       m.table() + "' is already moving");
      }
    }
  }
  return Status::OK();
}

Status RangeMover::CutBucket(Outgoing* out) {
  const wire::RangeMove& m = out->move;
  ASSIGN_OR_RETURN(BucketCopy copy,
                   CopyBucketRows(host_->store(), m.table(), out->buckets, out->num_buckets));
  wire::ChainSnapshot meta;
  meta.set_step(copy.step);
  // The record's ids go along (a resend of a push applied here is then a
  // duplicate there too); its part counts only with the last bucket of the
  // table this server holds (the sum over servers stays the same).
  int held_here = 0;
  if (const wire::TableShards* ts = TableIn(host_->installed_map(), m.table()); ts != nullptr) {
    for (const wire::SparseBucket& b : ts->buckets()) held_here += b.server() == host_->server_id();
  }
  out->carried_parts = held_here <= static_cast<int>(out->buckets.size());
  host_->SparseLedger(m.table())->Save(meta.mutable_dedup(), 0, /*with_seqs=*/false);
  if (!out->carried_parts) {
    for (wire::DedupEntry& d : *meta.mutable_dedup()) d.set_parts(0);
  }
  out->phase = Phase::kSending;
  out->transfer = OutgoingTransfer::Sparse(m.id(), m.destination(), std::move(meta),
                                           std::move(copy.ids), std::move(copy.rows),
                                           copy.row_floats, options_.chunk_bytes);
  LOG(INFO) << "cut the buckets of " << Describe(m) << ": sending " << out->transfer->bytes()
            << " bytes in " << out->transfer->num_pieces()
            << " piece(s); their requests are held until the new map";
  SendPieces(m.token());
  return Status::OK();
}

void RangeMover::Poll() {
  const int64_t now = clock_->NowMs();
  std::vector<std::string> failed;
  for (auto& [token, out] : outgoing_) {
    if (out.phase == Phase::kDraining && out.bucket) {
      SparseShardState* table = host_->SparseTable(out.move.table());
      Status s = table == nullptr ? FailedPreconditionError("sparse table '" + out.move.table() +
                                                            "' is gone")
                                  : Status::OK();
      if (s.ok() && table->Quiescent()) {
        s = CutBucket(&out);
      } else if (s.ok() && now >= out.drain_deadline_ms) {
        s = DeadlineExceededError(
            "the table was not quiescent (a BSP round pending or a pull waiting) within " +
            std::to_string(options_.drain_timeout_ms) + " ms (--move_drain_timeout_ms)");
      }
      if (!s.ok()) {
        out.failure = s;
        failed.push_back(token);
      }
    } else if (out.phase == Phase::kDraining) {
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
  if (!leaving_.empty()) PollLeaving();
}

void RangeMover::Cut(Outgoing* out) {
  const wire::RangeMove& m = out->move;
  RangeState* range = host_->DenseRangeAt(m.table(), out->range_begin);
  DenseShardState& shard = *range->shard;
  const uint64_t b = shard.spec().begin, mid = m.begin(), e = m.end();
  // What the copy phase has not sent yet: the chunks written since its
  // last round (the whole tail without a copy phase, or if the tracking
  // was lost).
  std::vector<OutgoingTransfer::Run> runs;
  // Forwarding held to the cut: the destination has every write of the
  // copy phase (in flight ahead of the cut's piece), and gets the metadata.
  WriteTracker* tracker = out->copying ? shard.write_tracker() : nullptr;
  if (out->copying && shard.lent_spans() != nullptr) out->lent_at_cut = shard.lent_spans()->stats();
  if (tracker != nullptr && out->forwarding) {
    tracker->Take();
    // Except the keys of pieces a write did not wait for (LentSpans: the
    // destination did not read them within lend_wait_ms): what it got of
    // them may be torn.
    if (shard.lent_spans() != nullptr) {
      const uint64_t first = mid - b;
      for (const LentSpans::Span& t : shard.lent_spans()->TakeTorn()) {
        const uint64_t from = std::max(t.offset, first), to = std::min(t.offset + t.count, e - b);
        if (from >= to) continue;
        if (!runs.empty() && runs.back().offset + runs.back().count >= from - first) {
          const uint64_t run_end = std::max(runs.back().offset + runs.back().count, to - first);
          runs.back().count = run_end - runs.back().offset;
        } else {
          runs.push_back({from - first, to - from});
        }
      }
    }
  } else if (tracker != nullptr) {
    for (const WriteTracker::Run& r : tracker->Take()) runs.push_back({r.offset, r.count});
  } else {
    runs.push_back({0, e - mid});
  }
  shard.StopTrackingWrites();
  out->cut = true;
  out->cut_ms = clock_->NowMs();
  out->range_bytes = (e - mid) * shard.num_slots() * sizeof(float);
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
  out->transfer = OutgoingTransfer::DenseRuns(m.id(), m.destination(), moved, out->frames, runs,
                                              options_.chunk_bytes, out->next_index,
                                              /*final=*/true);
  out->cutover_bytes = out->transfer->bytes();
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
  StatusOr<RangeState*> head = host_->CreateRange(m.table(), b, mid, /*initialize=*/true);
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
  // A copy round sends every frame of a stretch of keys together (its
  // pieces go key by key): no update falls between them, so the copy of
  // those keys is consistent across their slots and forwarded updates apply
  // to it whole.
  const size_t group = out.phase == Phase::kCopying ? std::max<size_t>(1, out.slots) : 1;
  while (t->next < t->num_pieces() && (t->next - out.acked < window || t->next % group != 0)) {
    Message msg;
    msg.header.set_type(wire::MOVE_STATE);
    msg.header.set_sender(host_->server_id());
    msg.header.set_table(out.move.table());
    msg.header.set_key_begin(out.move.begin());
    msg.header.set_key_count(out.move.end() - out.move.begin());
    msg.header.set_move_token(token);
    t->FillPiece(t->next, &msg);
    // The piece's stamp: the forwarded updates its copy holds.
    msg.header.set_snapshot_seq(out.forward_seq);
    t->in_flight = true;
    t->last_send_ms = clock_->NowMs();
    const size_t index = t->next++;
    peers_.Call(out.peer, std::move(msg), options_.piece_timeout_ms,
                [this, token, index](const Status& st, Message&& reply) {
                  Status s = st.ok() ? StatusFromProto(reply.header.status()) : st;
                  OnPieceReply(token, index, s);
                });
  }
}

void RangeMover::OnPieceReply(const std::string& token, size_t index, const Status& status) {
  auto it = outgoing_.find(token);
  if (it == outgoing_.end() ||
      (it->second.phase != Phase::kSending && it->second.phase != Phase::kCopying)) {
    return;
  }
  Outgoing& out = it->second;
  OutgoingTransfer* t = out.transfer.get();
  if (t == nullptr || index < out.acked) return;  // Stale.
  if (!status.ok()) {
    const Status why = FailsForGood(status);
    Abort(&out, why.WithPrefix(
                    "the destination did not take piece " + std::to_string(index) +
                    (out.phase == Phase::kCopying
                         ? " of copy round " + std::to_string(out.catchup_rounds) +
                               " (the copy phase: nothing was cut)"
                         : "")));
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
  if (out.phase == Phase::kCopying) {
    EndCopyRound(token);
    return;
  }
  if (out.forwards_acked != out.forward_seq) {  // One connection, answered in order: never expected.
    Abort(&out, InternalError("the last piece was acknowledged before " +
                              std::to_string(out.forward_seq - out.forwards_acked) +
                              " forwarded update(s)"));
    return;
  }
  LOG(INFO) << "moved " << Describe(out.move) << " (" << t->bytes()
            << " bytes): waiting for the map that publishes it";
  out.phase = Phase::kSent;
  if (out.bucket && out.carried_parts) host_->SparseLedger(out.move.table())->ClearCounts();
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
  // A bucket's rows stayed here, untouched since the cut; a range not cut
  // yet (the copy phase) is whole.
  if (out->bucket) return Status::OK();
  if (!out->cut) {
    StopTracking(*out);
    return Status::OK();
  }
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
  ASSIGN_OR_RETURN(RangeState * whole, host_->CreateRange(m.table(), b, e, /*initialize=*/true));
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
  StopTracking(out);
  if (out.coordinator_request != nullptr) {
    host_->SendError(*out.coordinator_request,
                     status.WithPrefix("moving " + Describe(out.move)));
  }
  for (Request& r : out.held) host_->Redispatch(std::move(r));
}

bool RangeMover::HoldIfMoving(Request* req) {
  const wire::Header& h = req->msg.header;
  const bool rows = h.type() == wire::PUSH_ROWS || h.type() == wire::PULL_ROWS;
  for (auto& [token, out] : outgoing_) {
    if (out.phase == Phase::kCopying || out.phase == Phase::kDraining || out.bucket != rows ||
        h.table() != out.move.table()) {
      continue;
    }
    if (rows) {
      // Malformed ids: not held (the data path refuses them).
      std::vector<uint64_t> scratch;
      StatusOr<const uint64_t*> ids =
          req->msg.frames.empty()
              ? StatusOr<const uint64_t*>(InvalidArgumentError("no ids"))
              : DecodeRowIds(req->msg.frames[0], h.key_count(), &scratch);
      if (!ids.ok() || !AnyRowIn(out.buckets, out.num_buckets, *ids, h.key_count())) {
        continue;
      }
    } else if (!Overlaps(out.move, h.table(), h.key_begin(),
                         std::max<uint64_t>(1, h.key_count()))) {
      continue;
    }
    out.held.push_back(std::move(*req));
    return true;
  }
  for (auto& [token, leave] : leaving_) {
    if (leave.phase == LeavePhase::kDraining ||
        !Overlaps(leave.move, h.table(), h.key_begin(), std::max<uint64_t>(1, h.key_count()))) {
      continue;
    }
    leave.held.push_back(std::move(*req));
    return true;
  }
  return false;
}

void RangeMover::OnMapInstalled(const wire::ShardMap& map) {
  DropLeftReplicas(map);
  // Leaves the map decided: this server is out of the chain (its held
  // requests are now answered "moved"), or the destination is (the move
  // failed: they are served here as before).
  std::vector<std::string> decided;
  for (const auto& [token, leave] : leaving_) {
    const std::vector<int> chain = ChainIn(map, leave.move);
    if (!Member(chain, host_->server_id()) || !Member(chain, leave.move.destination())) {
      decided.push_back(token);
    }
  }
  for (const std::string& token : decided) EndLeave(token, Status::OK());
  std::vector<std::string> published;
  for (const auto& [token, out] : outgoing_) {
    if (out.phase != Phase::kSent) continue;
    if (out.bucket) {
      const wire::TableShards* ts = TableIn(map, out.move.table());
      if (ts != nullptr && BucketsOf(*ts, host_->server_id(), out.move).empty()) {
        published.push_back(token);
      }
      continue;
    }
    const int holder = HolderIn(map, out.move);
    if (holder >= 0 && holder != host_->server_id()) published.push_back(token);
  }
  for (const std::string& token : published) {
    auto it = outgoing_.find(token);
    const Outgoing& out = it->second;
    if (out.bucket) {
      moved_out_[out.move.table()].insert(out.buckets.begin(), out.buckets.end());
    }
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
    ReportCutover(out, map.version());
    outgoing_.erase(it);
    for (Request& r : held) host_->Redispatch(std::move(r));
  }
}

bool RangeMover::MovedAway(const std::string& table, const uint64_t* ids, size_t n) const {
  auto it = moved_out_.find(table);
  if (it == moved_out_.end() || it->second.empty()) return false;
  const wire::TableShards* ts = TableIn(host_->installed_map(), table);
  return ts != nullptr && AnyRowIn(it->second, ts->buckets_size(), ids, n);
}

Status RangeMover::TakeBucketPiece(Incoming* in, const Request& req) {
  const wire::Header& h = req.msg.header;
  const wire::SnapshotPiece& p = h.snapshot_piece();
  const wire::RangeMove& m = in->move;
  const wire::ShardMap& map = host_->installed_map();
  const wire::TableShards* ts = TableIn(map, m.table());
  const int me = host_->server_id();
  if (ts == nullptr || host_->SparseTable(m.table()) == nullptr ||
      m.begin() >= static_cast<uint64_t>(ts->buckets_size())) {
    return FailedPreconditionError("no unreplicated sparse table '" + m.table() +
                                   "' with a bucket " + std::to_string(m.begin()) + " here");
  }
  const std::set<int> buckets = BucketsOf(*ts, m.source(), m);
  if (buckets.empty()) {
    return FailedPreconditionError("the map already gives " + Describe(m) + " to this server");
  }
  if (req.msg.frames.size() != 2) {
    return InvalidArgumentError("MOVE_STATE of a bucket expects 2 frames (ids, rows), got " +
                                std::to_string(req.msg.frames.size()));
  }
  RETURN_IF_ERROR(WriteBucketPiece(host_->store(), m.table(), buckets, ts->buckets_size(),
                                   req.msg.frames[0], req.msg.frames[1]));
  if (!p.last()) return Status::OK();
  const wire::ChainSnapshot& snap = h.chain_snapshot();
  // The table's step (Adam's bias correction) counts the steps applied to
  // its rows here: the source's when this server held none of them yet; its
  // own otherwise (the same when every round touched rows of both).
  int64_t* step = host_->store()->SparseStep(m.table());
  bool holds_rows = false;
  for (const wire::SparseBucket& b : ts->buckets()) holds_rows |= b.server() == me;
  if (step != nullptr && !holds_rows) {
    *step = snap.step();
  } else if (step != nullptr && *step != snap.step()) {
    LOG(WARNING) << "the rows of " << Describe(m) << " were at optimizer step " << snap.step()
                 << "; they go on at this server's step " << *step << " of the table";
  }
  host_->SparseLedger(m.table())->MergeMoved(snap.dedup());
  for (int k : buckets) moved_out_[m.table()].erase(k);
  return Status::OK();
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
  if (!h.has_snapshot_piece() && h.chain_seq() > 0) {  // A forwarded update.
    const Status s = TakeForward(&in, req);
    if (!s.ok()) {
      host_->SendError(req, s);
      return;
    }
    host_->SendReply(req, MakeReply(h, Status::OK()));
    return;
  }
  if (h.table() != m.table() || h.key_begin() != m.begin() ||
      h.key_count() != m.end() - m.begin() || !h.has_snapshot_piece()) {
    host_->SendError(req, InvalidArgumentError("MOVE_STATE does not match the move of " +
                                               Describe(m)));
    return;
  }
  const wire::SnapshotPiece& p = h.snapshot_piece();
  if (p.index() == 0) {  // The source (started over): nothing of its copy, no forward yet.
    in.next_piece = 0;
    in.received_keys = 0;
    in.forward_seq = 0;
  }
  if (p.index() != in.next_piece) {
    host_->SendError(req, FailedPreconditionError("MOVE_STATE piece " + std::to_string(p.index()) +
                                                  ", expected " + std::to_string(in.next_piece)));
    return;
  }
  if (h.snapshot_seq() != in.forward_seq) {
    host_->SendError(req, FailedPreconditionError(
                              "MOVE_STATE piece " + std::to_string(p.index()) +
                              " holds the forwarded updates up to " +
                              std::to_string(h.snapshot_seq()) + ", this server took " +
                              std::to_string(in.forward_seq)));
    return;
  }
  if (host_->SparseTable(m.table()) != nullptr) {
    Status s = TakeBucketPiece(&in, req);
    if (!s.ok()) {
      host_->SendError(req, s);
      return;
    }
    ++in.next_piece;
    if (p.last()) {
      LOG(INFO) << "received " << Describe(m) << " (" << p.total() << " rows)";
      incoming_.erase(it);
      Remember(token);
    }
    host_->SendReply(req, MakeReply(h, Status::OK()));
    return;
  }
  if (p.index() == 0 && !in.created) {
    if (HolderIn(host_->installed_map(), m) == host_->server_id()) {
      host_->SendError(req, FailedPreconditionError("the map already gives " + Describe(m) +
                                                    " to this server"));
      return;
    }
    // A range left from an earlier move of these keys that failed.
    if (RangeState* stale = host_->DenseRangeAt(m.table(), m.begin()); stale != nullptr) {
      host_->DropRange(m.table(), stale->key);
    }
    // Every key of every slot comes in this transfer's pieces before the
    // range serves (the copy's first round, or the cut's whole range): no
    // initial values.
    StatusOr<RangeState*> created =
        host_->CreateRange(m.table(), m.begin(), m.end(), /*initialize=*/false);
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
  // The copy round's pieces go key by key: the last frame's piece of a
  // stretch of keys completes it.
  if (!req.msg.frames.empty() && p.frame() + 1 == p.num_frames() &&
      p.offset() <= in.received_keys) {
    in.received_keys = std::max<uint64_t>(
        in.received_keys, p.offset() + req.msg.frames[0].size() / sizeof(float));
  }
  if (p.last()) {
    LOG(INFO) << "received " << Describe(m) << " (" << p.total() << " floats)";
    incoming_.erase(it);
    Remember(token);
  }
  host_->SendReply(req, MakeReply(h, Status::OK()));
}

Status RangeMover::TakeForward(Incoming* in, const Request& req) {
  const wire::Header& h = req.msg.header;
  const wire::RangeMove& m = in->move;
  if (h.chain_seq() != in->forward_seq + 1) {
    return FailedPreconditionError("forwarded update " + std::to_string(h.chain_seq()) +
                                   " of " + Describe(m) + ", expected " +
                                   std::to_string(in->forward_seq + 1));
  }
  const size_t frames = h.raw_delta() ? 1 : 2;
  if (h.table() != m.table() || h.key_begin() < m.begin() || h.key_begin() >= m.end() ||
      h.key_count() == 0 || h.key_count() > m.end() - h.key_begin() ||
      req.msg.frames.size() != frames ||
      req.msg.frames[0].size() != h.key_count() * sizeof(float) ||
      (frames == 2 && req.msg.frames[1].size() != sizeof(float))) {
    return InvalidArgumentError("a forwarded update that does not fit the move of " +
                                Describe(m));
  }
  in->forward_seq = h.chain_seq();
  // Keys whose copy has not arrived yet: their copy was taken after this
  // update (it holds it).
  const uint64_t offset = h.key_begin() - m.begin();
  if (offset >= in->received_keys) return Status::OK();
  const size_t n = static_cast<size_t>(std::min(h.key_count(), in->received_keys - offset));
  RangeState* range = in->created ? host_->DenseRangeAt(m.table(), m.begin()) : nullptr;
  if (range == nullptr || range->shard == nullptr || range->key != m.begin()) {
    return FailedPreconditionError("the moved range is gone");
  }
  const float* values = req.msg.frames[0].as<float>();
  if (h.raw_delta()) return range->shard->AddDelta(h.key_begin(), values, n);
  float lr_scale;
  std::memcpy(&lr_scale, req.msg.frames[1].as<float>(), sizeof(float));
  if (!std::isfinite(lr_scale)) {
    return InvalidArgumentError("a forwarded update with a learning-rate scale that is not finite");
  }
  return range->shard->ApplyForwardedStep(h.key_begin(), values, n, h.chain_snapshot().step(),
                                          lr_scale);
}

void RangeMover::LeaveChain(Request&& req, RangeState* range) {
  const wire::RangeMove& m = req.msg.header.range_move();
  const std::string token = m.token();
  if (auto it = leaving_.find(token); it != leaving_.end()) {
    if (it->second.phase == LeavePhase::kLeft) {
      host_->SendReply(req, MakeReply(req.msg.header, Status::OK()));
    } else {  // Asked again while it drains: answer the new request.
      it->second.coordinator_request = std::make_shared<Request>(std::move(req));
    }
    return;
  }
  Status s;
  if (m.source() != host_->server_id()) {
    s = InvalidArgumentError("MOVE_RANGE from server " + std::to_string(m.source()) +
                             " sent to " + std::to_string(host_->server_id()));
  } else if (range->shard == nullptr || range->shard->spec().begin != m.begin() ||
             range->shard->spec().end != m.end()) {
    s = FailedPreconditionError("a move of " + Describe(m) +
                                " must take the whole chained range (chained ranges are not cut)");
  } else if (!Member(range->members, host_->server_id()) || !range->chain->has_state()) {
    s = FailedPreconditionError("server " + std::to_string(host_->server_id()) +
                                " holds no replica with state of " + Describe(m));
  } else if (!Member(range->members, m.destination())) {
    s = FailedPreconditionError("server " + std::to_string(m.destination()) +
                                " is not in the chain of " + Describe(m) + " yet");
  }
  if (!s.ok()) {
    host_->SendError(req, s);
    return;
  }
  if (!range->chain->head()) {
    // A follower leaves as a failed one does: its predecessor resends to
    // its successor what the tail did not acknowledge, and nothing waits
    // here for a worker.
    LOG(INFO) << "moving " << Describe(m) << ": this follower may leave the chain";
    host_->SendReply(req, MakeReply(req.msg.header, Status::OK()));
    return;
  }
  Leaving& leave = leaving_[token];
  leave.move = m;
  leave.coordinator_request = std::make_shared<Request>(std::move(req));
  leave.deadline_ms = clock_->NowMs() + options_.drain_timeout_ms;
  LOG(INFO) << "moving " << Describe(m) << ": the head waits for the range to be quiescent";
  PollLeaving();
}

void RangeMover::PollLeaving() {
  const int64_t now = clock_->NowMs();
  std::vector<std::pair<std::string, Status>> ended;
  for (auto& [token, leave] : leaving_) {
    if (leave.phase == LeavePhase::kLeft) continue;
    RangeState* range = host_->DenseRangeAt(leave.move.table(), leave.move.begin());
    if (range == nullptr || range->chain == nullptr || range->shard == nullptr) {
      ended.push_back({token, FailedPreconditionError("the replica is gone (fenced)")});
      continue;
    }
    if (leave.phase == LeavePhase::kDraining && range->shard->Quiescent()) {
      // From here nothing new reaches the range here.
      leave.phase = LeavePhase::kAcking;
    }
    if (leave.phase == LeavePhase::kAcking && range->chain->unacked().empty() &&
        range->outgoing == nullptr) {
      // Everything this head applied is on every replica, and no worker
      // waits here: it may leave.
      leave.phase = LeavePhase::kLeft;
      LOG(INFO) << "moving " << Describe(leave.move) << ": the head holds " << leave.held.size()
                << " request(s) until the map splices it out";
      if (leave.coordinator_request != nullptr) {
        host_->SendReply(*leave.coordinator_request,
                         MakeReply(leave.coordinator_request->msg.header, Status::OK()));
        leave.coordinator_request.reset();
      }
      continue;
    }
    if (now >= leave.deadline_ms) {
      ended.push_back(
          {token, DeadlineExceededError(
                      leave.phase == LeavePhase::kDraining
                          ? "the range was not quiescent (a BSP round pending or a pull waiting) "
                            "within " + std::to_string(options_.drain_timeout_ms) +
                                " ms (--move_drain_timeout_ms)"
                          : "the tail did not acknowledge every forwarded update within " +
                                std::to_string(options_.drain_timeout_ms) +
                                " ms (--move_drain_timeout_ms)")});
    }
  }
  for (const auto& [token, status] : ended) EndLeave(token, status);
}

void RangeMover::EndLeave(const std::string& token, const Status& status) {
  auto it = leaving_.find(token);
  if (it == leaving_.end()) return;
  Leaving leave = std::move(it->second);
  leaving_.erase(it);
  if (status.ok()) Remember(token);
  if (leave.coordinator_request != nullptr) {
    if (status.ok()) {
      host_->SendReply(*leave.coordinator_request,
                       MakeReply(leave.coordinator_request->msg.header, Status::OK()));
    } else {
      host_->SendError(*leave.coordinator_request,
                       status.WithPrefix("moving " + Describe(leave.move)));
    }
  }
  for (Request& r : leave.held) host_->Redispatch(std::move(r));
}

void RangeMover::DropLeftReplicas(const wire::ShardMap& map) {
  const int me = host_->server_id();
  for (const wire::TableShards& ts : map.tables()) {
    for (const wire::DenseRange& r : ts.ranges()) {
      if (r.chain_size() == 0 || Member({r.chain().begin(), r.chain().end()}, me)) continue;
      RangeState* range = host_->DenseRangeAt(ts.table().name(), r.begin());
      // Still listed as a member with state: the map before held it here.
      if (range == nullptr || range->chain == nullptr || range->key != r.begin() ||
          !Member(range->members, me) || !range->chain->has_state()) {
        continue;
      }
      LOG(INFO) << "map " << map.version() << ": keys [" << r.begin() << ", " << r.end()
                << ") of table '" << ts.table().name()
                << "' moved off this server's chain; dropping its replica";
      host_->DropRange(ts.table().name(), r.begin());
    }
  }
}

}  // namespace server_internal
}  // namespace relaxps
