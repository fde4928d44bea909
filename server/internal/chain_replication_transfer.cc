// Chain replication (--recovery=chain): the state transfer to a replica
// joining a chain, streamed in pieces (state_transfer.h).
//
// Sender (the old tail): SendSnapshot copies the state at its applied seq S,
// drops the log (the snapshot stands for every update up to S) and sends the
// pieces one at a time; updates applied meanwhile are logged but held back
// (SendLogged) and sent, in order, once the last piece is answered. A piece
// that is not answered is resent by the timer (ResendStale); a joiner that
// lost track of the transfer (it restarted) answers FailedPrecondition and
// the transfer starts over from piece 0.
//
// Joiner: piece 0 of a transfer starts it (the replica holds no state until
// the last piece); each piece is applied in place and answered at once; the
// last one completes the state (metadata, exactly-once record, seq S) and is
// answered once every replica after the joiner holds it too.
#include <algorithm>

#include "common/payload_codec.h"
#include "server/internal/chain_replication.h"
#include "server/internal/request_codec.h"

namespace relaxps {
namespace server_internal {

namespace {
constexpr int kPieceTimeoutMs = 5000;
}  // namespace

void ChainReplication::SendSnapshot(RangeState* range) {
  wire::ChainSnapshot meta;
  const uint64_t seq = range->chain->applied_seq();
  const int successor = range->chain->successor();
  if (range->shard != nullptr) {
    std::vector<FloatBuffer> frames;
    range->shard->SaveState(&meta, &frames);
    range->chain->SaveDedup(&meta);
    meta.set_seq(seq);
    range->outgoing = OutgoingTransfer::Dense(seq, successor, std::move(meta), std::move(frames),
                                              range->shard->spec().end - range->shard->spec().begin,
                                              options_.transfer_chunk_bytes);
  } else {
    KeyBuffer ids;
    FloatBuffer rows;
    Status s = range->bucket->Save(&meta, &ids, &rows);
    if (!s.ok()) {
      // The successor stays without state and refuses updates. Never
      // expected: the store lost its own table.
      LOG(ERROR) << "cannot snapshot bucket " << range->key << " of '" << range->table
                 << "': " << s;
      return;
    }
    range->chain->SaveDedup(&meta);
    meta.set_seq(seq);
    range->outgoing =
        OutgoingTransfer::Sparse(seq, successor, std::move(meta), std::move(ids), std::move(rows),
                                 range->bucket->row_floats(), options_.transfer_chunk_bytes);
  }
  LOG(INFO) << "state transfer of table '" << range->table << "' "
            << (range->bucket ? "bucket " : "keys from ") << range->key << " ("
            << range->outgoing->bytes() << " bytes in " << range->outgoing->num_pieces()
            << " piece(s)) at seq " << seq << " to server " << successor;
  // The snapshot stands for every update up to seq: it replaces the log.
  range->chain->ClearLog();
  SendPiece(range);
}

void ChainReplication::SendPiece(RangeState* range) {
  OutgoingTransfer* t = range->outgoing.get();
  const int peer = PeerOf(t->successor());
  if (peer < 0) return;  // Resent by the timer once the successor is known.
  Message msg;
  msg.header.set_type(wire::CHAIN_SNAPSHOT);
  msg.header.set_forwarded(true);
  msg.header.set_table(range->table);
  msg.header.set_key_begin(range->key);
  msg.header.set_chain_seq(t->seq());
  msg.header.set_epoch(epoch());
  t->FillPiece(t->next, &msg);
  t->in_flight = true;
  t->last_send_ms = clock_->NowMs();
  stats()->set_forwarded(stats()->forwarded() + 1);
  const std::string table = range->table;
  const uint64_t key = range->key;
  const uint64_t seq = t->seq();
  const size_t index = t->next;
  CallPeer(peer, std::move(msg), kPieceTimeoutMs,
           [this, table, key, seq, index](const Status& st, Message&& reply) {
             OnPieceReply(table, key, seq, index, st, reply);
           });
}

void ChainReplication::OnPieceReply(const std::string& table, uint64_t key, uint64_t seq, size_t index,
                              const Status& status, const Message& reply) {
  RangeState* range = FindReplica(table, key);
  if (range == nullptr) return;
  OutgoingTransfer* t = range->outgoing.get();
  if (t == nullptr || t->seq() != seq || t->next != index) return;  // Stale or a duplicate.
  t->in_flight = false;
  if (!status.ok()) {
    if (status.code() == StatusCode::kFailedPrecondition) t->next = 0;  // The joiner starts over.
    VLOG(1) << "state transfer piece " << index << " failed: " << status;  // Resent by the timer.
    return;
  }
  if (reply.header.epoch() < epoch()) {
    // From a replica fenced since: its word no longer counts.
    stats()->set_stale_epoch_refused(stats()->stale_epoch_refused() + 1);
    return;
  }
  if (++t->next < t->num_pieces()) {
    SendPiece(range);
    return;
  }
  LOG(INFO) << "state transfer of table '" << table << "' " << (range->bucket ? "bucket " : "keys from ")
            << key << " at seq " << seq << " complete";
  range->outgoing.reset();
  range->chain->OnAcked(seq);
  // The updates applied during the transfer, held back until now.
  for (const auto& [s, op] : range->chain->unacked()) SendLogged(range, op);
}

void ChainReplication::HandleSnapshotPiece(RangeState* range, std::shared_ptr<Request> req) {
  const wire::Header& h = req->msg.header;
  ChainReplica* chain = range->chain.get();
  const uint64_t seq = h.chain_seq();
  auto ack = [this, req] { host_->ReplyWith(*req, MakeReply(req->msg.header, Status::OK())); };
  if (chain->has_state() && chain->applied_seq() >= seq) {
    chain->WhenAcked(seq, ack);  // Has it (a resend, or an older transfer).
    return;
  }
  if (!h.has_snapshot_piece()) {
    host_->Reject(*req, InvalidArgumentError("CHAIN_SNAPSHOT without snapshot_piece"));
    return;
  }
  const wire::SnapshotPiece& p = h.snapshot_piece();
  if (range->incoming == nullptr || range->incoming->seq != seq) {
    if (p.index() != 0) {
      host_->Reject(*req, FailedPreconditionError("state transfer at seq " + std::to_string(seq) +
                                           ": piece " + std::to_string(p.index()) +
                                           " before piece 0"));
      return;
    }
    range->incoming = std::make_unique<IncomingTransfer>();
    range->incoming->seq = seq;
    range->incoming->num_frames = p.num_frames();
    if (range->bucket != nullptr) range->bucket->BeginLoad();
    // The state is being replaced: none until the last piece.
    chain->set_has_state(false);
    UpdateAwaitingState();
  }
  IncomingTransfer* in = range->incoming.get();
  if (p.index() < in->next) {
    ack();  // A resend of a piece applied already.
    return;
  }
  if (p.index() > in->next) {
    host_->Reject(*req, FailedPreconditionError("state transfer at seq " + std::to_string(seq) +
                                         ": piece " + std::to_string(p.index()) +
                                         " while expecting " + std::to_string(in->next)));
    return;
  }
  Status s;
  if (range->shard != nullptr) {
    DenseShardState* shard = range->shard.get();
    const size_t size = shard->spec().end - shard->spec().begin;
    const size_t n = req->msg.frames.empty() ? 0 : req->msg.frames[0].size() / sizeof(float);
    std::vector<float> scratch;  // A frame that is not float-aligned.
    const float* values = nullptr;
    if (req->msg.frames.size() > 1 || p.num_frames() != in->num_frames ||
        p.frame() >= in->num_frames) {
      s = InvalidArgumentError("state transfer piece with a bad frame");
    } else if (n > 0) {
      StatusOr<const float*> v = DecodeFloats(req->msg.frames[0], n, wire::ENC_FP32, &scratch);
      s = v.status();
      if (v.ok()) values = *v;
    }
    if (s.ok() && n > 0) {
      if (p.frame() < shard->num_slots()) {
        s = shard->LoadSlotPiece(p.frame(), p.offset(), values, n);
      } else if (p.offset() > size || n > size - p.offset()) {
        s = InvalidArgumentError("state transfer piece past the end of a round sum");
      } else {
        // A pending BSP round's sum: staged until the last piece.
        in->staged.resize(in->num_frames - shard->num_slots());
        std::vector<float>& sum = in->staged[p.frame() - shard->num_slots()];
        sum.resize(size);
        std::copy(values, values + n, sum.begin() + p.offset());
      }
    }
    in->received += n;
  } else {
    s = req->msg.frames.size() == 2
            ? range->bucket->LoadPiece(req->msg.frames[0], req->msg.frames[1])
            : InvalidArgumentError("sparse state transfer piece without ids and rows");
    if (s.ok()) in->received += req->msg.frames[0].size() / sizeof(uint64_t);
  }
  if (s.ok() && p.last() && in->received != p.total()) {
    s = InvalidArgumentError("state transfer at seq " + std::to_string(seq) + " ended after " +
                             std::to_string(in->received) + " of " + std::to_string(p.total()));
  }
  if (s.ok() && p.last()) {
    const wire::ChainSnapshot& snap = h.chain_snapshot();
    if (range->shard != nullptr) {
      std::vector<const float*> sums;
      in->staged.resize(in->num_frames - std::min<size_t>(in->num_frames,
                                                          range->shard->num_slots()));
      for (const std::vector<float>& sum : in->staged) {
        sums.push_back(sum.size() == range->shard->spec().end - range->shard->spec().begin
                           ? sum.data()
                           : nullptr);
      }
      if (std::find(sums.begin(), sums.end(), nullptr) != sums.end()) {
        s = InvalidArgumentError("state transfer without every round sum");
      } else {
        s = range->shard->LoadMeta(snap, sums);
      }
      if (s.ok()) range->forwarded_applied_clock = range->shard->applied_clock();
    } else {
      s = range->bucket->FinishLoad(snap);
    }
  }
  if (!s.ok()) {
    range->incoming.reset();  // The sender starts over (FailedPrecondition from piece 1 on).
    host_->Reject(*req, s);
    return;
  }
  ++in->next;
  if (!p.last()) {
    ack();
    return;
  }
  chain->LoadDedup(h.chain_snapshot());
  chain->set_has_state(true);
  chain->SetApplied(seq);
  LOG(INFO) << "state of table '" << h.table() << "' " << (range->bucket ? "bucket " : "keys from ")
            << h.key_begin() << " received at seq " << seq << " in " << in->next
            << " piece(s); replica in sync";
  range->incoming.reset();
  UpdateAwaitingState();
  if (!chain->tail()) SendSnapshot(range);  // On to a successor joining behind.
  chain->WhenAcked(seq, ack);
}

}  // namespace server_internal
}  // namespace relaxps
