#include "recovery/replay/update_log.h"

#include <map>
#include <utility>

namespace relaxps {
namespace recovery {

void UpdateLog::SetMarker(std::shared_ptr<const Entry>* e, uint64_t snapshot_seq, bool pending) {
  auto next = std::make_shared<Entry>(**e);
  next->push.snapshot_seq = snapshot_seq;
  next->push.pending = pending;
  *e = std::move(next);
}

void UpdateLog::Append(const AckedPush& push) {
  auto e = std::make_shared<Entry>();
  e->push = push;
  e->push.grads = FloatBuffer::CopyOf(push.grads.data(), push.grads.size());
  e->push.ids = KeyBuffer::CopyOf(push.ids.data(), push.ids.size());
  const int64_t size = e->push.bytes();
  MutexLock l(&mu_);
  if (!push.pending) {
    for (auto& old : log_) {
      if (old->push.pending && old->push.server == push.server && old->push.clock <= push.clock) {
        SetMarker(&old, push.snapshot_seq, false);
      }
    }
    for (Dropped& d : dropped_) {
      if (d.pending && d.server == push.server && d.clock <= push.clock) {
        d.pending = false;
        d.snapshot_seq = push.snapshot_seq;
      }
    }
  }
  auto drop = [&](const AckedPush& p) {
    ++dropped_entries_;
    dropped_bytes_ += static_cast<uint64_t>(p.bytes());
    if (dropped_.size() >= kMaxDroppedMarkers) {
      dropped_.pop_front();
      ++lost_entries_;
    }
    dropped_.push_back({p.server, p.clock, p.snapshot_seq, p.pending});
  };
  if (size > max_bytes_) {  // Would push everything else out and still not fit.
    drop(e->push);
    return;
  }
  // An acknowledgement of a part routed by an older map (it was applied
  // before a move's cut and answered after the new map came): its keys'
  // state is wherever the newest map puts them.
  for (auto& piece : Route(std::move(e))) log_.push_back(std::move(piece));
  bytes_ += size;
  while (bytes_ > max_bytes_ && !log_.empty()) {
    bytes_ -= log_.front()->push.bytes();
    drop(log_.front()->push);
    log_.pop_front();
  }
}

uint64_t UpdateLog::TakeLost(int server, uint64_t restored_seq) {
  MutexLock l(&mu_);
  uint64_t lost = 0;
  std::deque<Dropped> kept;
  for (const Dropped& d : dropped_) {
    if (d.server != server) {
      kept.push_back(d);
    } else if (!Contained(d.snapshot_seq, d.pending, restored_seq)) {
      ++lost;
    }
  }
  dropped_.swap(kept);
  lost_entries_ += lost;
  return lost;
}

void UpdateLog::Replayed(int server, uint64_t push_id, uint64_t snapshot_seq, bool pending) {
  MutexLock l(&mu_);
  for (auto& e : log_) {
    if (e->push.server == server && e->push.push_id == push_id) {
      SetMarker(&e, snapshot_seq, pending);
      return;
    }
  }
}

void UpdateLog::Trim(uint64_t seq) {
  MutexLock l(&mu_);
  std::deque<std::shared_ptr<const Entry>> kept;
  for (auto& e : log_) {
    if (Contained(e->push.snapshot_seq, e->push.pending, seq)) {
      bytes_ -= e->push.bytes();
      ++trimmed_entries_;
    } else {
      kept.push_back(std::move(e));
    }
  }
  log_.swap(kept);
  std::deque<Dropped> uncovered;
  for (const Dropped& d : dropped_) {
    if (!Contained(d.snapshot_seq, d.pending, seq)) uncovered.push_back(d);
  }
  dropped_.swap(uncovered);
}

std::vector<std::shared_ptr<const UpdateLog::Entry>> UpdateLog::Route(
    std::shared_ptr<const Entry> e) const {
  const AckedPush& p = e->push;
  const wire::TableShards* ts = map_ == nullptr ? nullptr : map_->FindTable(p.table);
  if (ts == nullptr) return {std::move(e)};
  // The pieces by server, in key (dense) or id (rows) order.
  struct Piece {
    int server;
    uint64_t begin;               // Dense: first key.
    std::vector<float> grads;
    std::vector<uint64_t> ids;    // Rows.
  };
  std::vector<Piece> pieces;
  if (p.type == wire::PUSH_ROWS) {
    const size_t width = p.ids.size() == 0 ? 0 : p.grads.size() / p.ids.size();
    std::map<int, size_t> at;  // Server -> index in pieces.
    for (size_t i = 0; i < p.ids.size(); ++i) {
      const int server = map_->SparseServer(*ts, p.ids.data()[i]);
      auto [it, added] = at.emplace(server, pieces.size());
      if (added) pieces.push_back({server, 0, {}, {}});
      Piece& piece = pieces[it->second];
      piece.ids.push_back(p.ids.data()[i]);
      piece.grads.insert(piece.grads.end(), p.grads.data() + i * width,
                         p.grads.data() + (i + 1) * width);
    }
  } else {
    StatusOr<std::vector<DenseSlice>> slices = map_->SplitDense(p.table, p.key_begin,
                                                                p.grads.size());
    if (!slices.ok()) return {std::move(e)};  // Not a range of this map's table.
    for (const DenseSlice& s : *slices) {
      // A part spanning two ranges of one server stays one part (a server
      // takes a part across its ranges; the key is per part).
      if (!pieces.empty() && pieces.back().server == s.server) {
        pieces.back().grads.insert(pieces.back().grads.end(), p.grads.data() + s.offset,
                                   p.grads.data() + s.offset + s.count);
        continue;
      }
      pieces.push_back({s.server, s.begin,
                        std::vector<float>(p.grads.data() + s.offset,
                                           p.grads.data() + s.offset + s.count),
                        {}});
    }
  }
  if (pieces.size() == 1 && pieces[0].server == p.server) return {std::move(e)};
  std::vector<std::shared_ptr<const Entry>> out;
  for (Piece& piece : pieces) {
    auto next = std::make_shared<Entry>();
    next->push = p;
    next->push.server = piece.server;
    if (p.type == wire::PUSH_ROWS) {
      next->push.ids = KeyBuffer::CopyOf(piece.ids);
    } else {
      next->push.key_begin = piece.begin;
      // A piece after the cut starts a range of its own: its keys take a
      // step there, as the server counted them (new_step of a later range).
      next->push.push_continues = p.push_continues && piece.begin == p.key_begin;
    }
    next->push.grads = FloatBuffer::CopyOf(piece.grads);
    out.push_back(std::move(next));
  }
  return out;
}

uint64_t UpdateLog::Reroute(std::shared_ptr<const ShardMap> map) {
  MutexLock l(&mu_);
  map_ = std::move(map);
  uint64_t moved = 0;
  std::deque<std::shared_ptr<const Entry>> routed;
  for (auto& e : log_) {
    const int server = e->push.server;
    std::vector<std::shared_ptr<const Entry>> pieces = Route(std::move(e));
    if (pieces.size() != 1 || pieces[0]->push.server != server) ++moved;
    for (auto& piece : pieces) routed.push_back(std::move(piece));
  }
  log_.swap(routed);
  rerouted_entries_ += moved;
  return moved;
}

std::vector<std::shared_ptr<const UpdateLog::Entry>> UpdateLog::EntriesFor(int server) const {
  std::vector<std::shared_ptr<const Entry>> out;
  MutexLock l(&mu_);
  for (const auto& e : log_) {
    if (e->push.server == server) out.push_back(e);
  }
  return out;
}

int64_t UpdateLog::bytes() const {
  MutexLock l(&mu_);
  return bytes_;
}
uint64_t UpdateLog::entries() const {
  MutexLock l(&mu_);
  return log_.size();
}
uint64_t UpdateLog::dropped_entries() const {
  MutexLock l(&mu_);
  return dropped_entries_;
}
uint64_t UpdateLog::dropped_bytes() const {
  MutexLock l(&mu_);
  return dropped_bytes_;
}
uint64_t UpdateLog::trimmed_entries() const {
  MutexLock l(&mu_);
  return trimmed_entries_;
}
uint64_t UpdateLog::uncovered_entries() const {
  MutexLock l(&mu_);
  return dropped_.size();
}
uint64_t UpdateLog::lost_entries() const {
  MutexLock l(&mu_);
  return lost_entries_;
}
uint64_t UpdateLog::rerouted_entries() const {
  MutexLock l(&mu_);
  return rerouted_entries_;
}

}  // namespace recovery
}  // namespace relaxps
