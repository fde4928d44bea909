#include "recovery/replay/update_log.h"

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
  log_.push_back(std::move(e));
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

}  // namespace recovery
}  // namespace relaxps
