#include "server/internal/chain_replica.h"

#include <algorithm>
#include <vector>

namespace relaxps {
namespace server_internal {

void ChainReplica::SetRole(bool head, int successor) {
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

uint64_t ChainReplica::FindApplied(int worker, uint64_t incarnation, uint64_t push_id) const {
  auto it = applied_.find({worker, incarnation});
  if (it == applied_.end()) return 0;
  const std::map<uint64_t, uint64_t>& ids = it->second.ids;
  auto found = ids.find(push_id);
  if (found != ids.end()) return found->second;
  if (ids.size() >= kDedupWindow && push_id < ids.begin()->first) return 1;
  return 0;
}

void ChainReplica::RecordApplied(int worker, uint64_t incarnation, uint64_t push_id,
                                 uint64_t seq) {
  std::map<uint64_t, uint64_t>& ids = applied_[{worker, incarnation}].ids;
  ids[push_id] = seq;
  while (ids.size() > kDedupWindow) ids.erase(ids.begin());
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
  for (const auto& [key, applied] : applied_) {
    wire::DedupEntry* e = snap->add_dedup();
    e->set_worker(key.first);
    e->set_incarnation(key.second);
    for (const auto& [id, seq] : applied.ids) {
      e->add_push_ids(id);
      e->add_seqs(seq);
    }
  }
}

void ChainReplica::LoadDedup(const wire::ChainSnapshot& snap) {
  applied_.clear();
  for (const wire::DedupEntry& e : snap.dedup()) {
    std::map<uint64_t, uint64_t>& ids = applied_[{e.worker(), e.incarnation()}].ids;
    for (int i = 0; i < e.push_ids_size() && i < e.seqs_size(); ++i) ids[e.push_ids(i)] = e.seqs(i);
  }
}

}  // namespace server_internal
}  // namespace relaxps
