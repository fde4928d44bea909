#include "server/internal/chain_replica.h"

#include <algorithm>
#include <vector>

namespace relaxps {
namespace server_internal {

void ChainReplica::SetRole(bool head, int successor, uint64_t epoch) {
  if (head && !head_) {
    head_since_seq_ = applied_seq_;
    head_since_epoch_ = epoch;
  }
  head_ = head;
  successor_ = successor;
  if (tail()) {
    unacked_.clear();
    OnAcked(applied_seq_);
  }
}

void ChainReplica::SetApplied(uint64_t seq) {
  applied_seq_ = std::max(applied_seq_, seq);
  if (tail()) OnAcked(applied_seq_);
}

void ChainReplica::WhenAcked(uint64_t seq, std::function<void()> fn) {
  if (seq <= acked_seq_ || (tail() && seq <= applied_seq_)) {
    fn();
    return;
  }
  waiting_.emplace(seq, std::move(fn));
}

void ChainReplica::OnAcked(uint64_t seq) {
  seq = std::min(seq, applied_seq_);
  if (seq > acked_seq_) acked_seq_ = seq;
  while (!unacked_.empty() && unacked_.front().first <= acked_seq_) unacked_.pop_front();
  std::vector<std::function<void()>> ready;
  for (auto it = waiting_.begin(); it != waiting_.end() && it->first <= acked_seq_;) {
    ready.push_back(std::move(it->second));
    it = waiting_.erase(it);
  }
  for (auto& fn : ready) fn();
}

LoggedOp LoggedOp::From(Message* msg) {
  LoggedOp op;
  op.header = msg->header;
  for (Frame& f : msg->frames) op.payload.push_back(f.ShareBytes());
  return op;
}

Message LoggedOp::ToMessage() const {
  Message m;
  m.header = header;
  for (const Buffer<uint8_t>& b : payload) m.frames.push_back(Frame::Share(b));
  return m;
}

void ChainReplica::Logged(uint64_t seq, LoggedOp op, int64_t now_ms) {
  unacked_.emplace_back(seq, std::move(op));
  last_send_ms_ = now_ms;
}

void ChainReplica::SaveDedup(wire::ChainSnapshot* snap) const {
  // The snapshot carries the pending BSP rounds: their parts go as applied.
  ledger_.Save(snap->mutable_dedup(), /*max_ids=*/0, /*with_seqs=*/true,
               /*include_pending=*/true);
}

void ChainReplica::LoadDedup(const wire::ChainSnapshot& snap) { ledger_.Load(snap.dedup()); }

}  // namespace server_internal
}  // namespace relaxps
