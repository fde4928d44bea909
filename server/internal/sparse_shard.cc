#include "server/internal/sparse_shard.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace relaxps {
namespace server_internal {

SparseShardState::SparseShardState(SparseTableSpec spec,
                                   std::unique_ptr<kernels::Optimizer> optimizer,
                                   const ConsistencyPolicy* policy, kernels::Device* device,
                                   ParamStore* store, BufferPool* pool)
    : spec_(std::move(spec)),
      optimizer_(std::move(optimizer)),
      policy_(policy),
      device_(device),
      store_(store),
      pool_(pool),
      gate_(policy, " of sparse table '" + spec_.table + "'",
            ConsistencyGate::Hooks{[this] { return visible_clock(); },
                                   [this] { return CompleteRounds(); }}) {}

StatusOr<FloatBuffer> SparseShardState::Read(const uint64_t* ids, size_t n, int slot) {
  const size_t rf = spec_.row_floats();
  FloatBuffer out = pool_ != nullptr ? pool_->Acquire<float>(n * spec_.width)
                                     : FloatBuffer::Uninitialized(n * spec_.width);
  // A read creates no rows: random ids must not grow the store.
  if (rf == spec_.width) {  // No optimizer state: the records are the reply.
    RETURN_IF_ERROR(store_->PeekRows(spec_.table, ids, n, out.data()));
    return out;
  }
  rows_.resize(n * rf);
  RETURN_IF_ERROR(store_->PeekRows(spec_.table, ids, n, rows_.data()));
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(out.data() + i * spec_.width, rows_.data() + i * rf + slot * spec_.width,
                spec_.width * sizeof(float));
  }
  return out;
}

int64_t SparseShardState::visible_clock() const {
  return aggregates() ? applied_clock_ : gate_.min_clock();
}

void SparseShardState::Pull(int64_t worker_clock, std::vector<uint64_t> ids,
                            int64_t deadline_ms, RowsReply done) {
  const int64_t required = gate_.RequiredClock(worker_clock);
  if (gate_.Passes(required)) {
    done(Read(ids.data(), ids.size()));
    return;
  }
  gate_.Park(required, deadline_ms,
             [this, ids = std::move(ids), done = std::move(done)](const Status& s, int64_t) {
               if (s.ok()) {
                 done(Read(ids.data(), ids.size()));
               } else {
                 done(s);
               }
             });
}

Status SparseShardState::ApplyRows(const uint64_t* ids, size_t u, const float* grads,
                                   int64_t clock) {
  const float lr_scale = static_cast<float>(rates_.LrScaleAt(clock));
  const size_t w = spec_.width;
  const size_t rf = spec_.row_floats();
  int64_t* step = store_->SparseStep(spec_.table);
  if (step == nullptr) return NotFoundError("no sparse table '" + spec_.table + "' in the store");
  state_.resize(spec_.num_slots - 1);
  const int64_t this_step = *step + 1;
  auto apply = [&](size_t i, float* row) {
    for (int s = 1; s < spec_.num_slots; ++s) state_[s - 1] = row + s * w;
    optimizer_->Apply(device_, row, state_.data(), grads + i * w, w, this_step, lr_scale);
  };
  // A memory store: one lookup per row and no copies.
  const bool in_place = store_->UpdatesRowsInPlace();
  if (in_place) {
    RETURN_IF_ERROR(store_->UpdateRowsInPlace(spec_.table, ids, u, apply));
  } else {
    rows_.resize(u * rf);
    RETURN_IF_ERROR(store_->ReadRows(spec_.table, ids, u, rows_.data()));
    for (size_t i = 0; i < u; ++i) apply(i, rows_.data() + i * rf);
  }
  *step = this_step;
  updates_applied_ += u;
  return in_place ? Status::OK() : store_->WriteRows(spec_.table, ids, u, rows_.data());
}

bool SparseShardState::PushCannotFail() {
  // ApplyRows fails only for a table the store lacks, and the in-place
  // update only for that too; a BSP push is only summed into its round.
  return store_->UpdatesRowsInPlace() && store_->SparseStep(spec_.table) != nullptr;
}

Status SparseShardState::AddDelta(const uint64_t* ids, size_t n, const float* deltas) {
  const size_t w = spec_.width;
  const size_t rf = spec_.row_floats();
  // Sum the changes of duplicate ids so every row is read and written once.
  std::unordered_map<uint64_t, size_t> index;
  std::vector<uint64_t> unique_ids;
  std::vector<float> summed;
  for (size_t i = 0; i < n; ++i) {
    auto [it, inserted] = index.emplace(ids[i], unique_ids.size());
    if (inserted) {
      unique_ids.push_back(ids[i]);
      summed.insert(summed.end(), deltas + i * w, deltas + (i + 1) * w);
    } else {
      device_->Axpy(w, 1.0f, deltas + i * w, summed.data() + it->second * w);
    }
  }
  const size_t u = unique_ids.size();
  rows_.resize(u * rf);
  RETURN_IF_ERROR(store_->ReadRows(spec_.table, unique_ids.data(), u, rows_.data()));
  for (size_t i = 0; i < u; ++i) device_->Axpy(w, 1.0f, summed.data() + i * w, rows_.data() + i * rf);
  RETURN_IF_ERROR(store_->WriteRows(spec_.table, unique_ids.data(), u, rows_.data()));
  gate_.ServeWaiters();
  return Status::OK();
}

Status SparseShardState::Push(int worker, int64_t clock, const uint64_t* ids, size_t n,
                              const float* grads) {
  const size_t w = spec_.width;
  const bool aggregate = aggregates() && clock >= applied_clock_;
  if (!aggregate) {
    // Applied now: one optimizer step per distinct row, duplicate ids of the
    // push summed. Scratch buffers are reused, so nothing is allocated per
    // row; without duplicates (the usual case) the gradients are applied
    // straight from the request.
    index_.Reset(n);
    size_t u = 0;
    for (; u < n && index_.Insert(ids[u], static_cast<uint32_t>(u)).second; ++u) {
    }
    if (u == n) {
      RETURN_IF_ERROR(ApplyRows(ids, n, grads, clock));
      gate_.ServeWaiters();
      return Status::OK();
    }
    index_.Reset(n);
    unique_ids_.clear();
    summed_.resize(n * w);
    for (size_t i = 0; i < n; ++i) {
      auto [pos, inserted] = index_.Insert(ids[i], static_cast<uint32_t>(unique_ids_.size()));
      if (inserted) {
        unique_ids_.push_back(ids[i]);
        std::memcpy(summed_.data() + pos * w, grads + i * w, w * sizeof(float));
      } else {
        device_->Axpy(w, 1.0f, grads + i * w, summed_.data() + pos * w);
      }
    }
    RETURN_IF_ERROR(ApplyRows(unique_ids_.data(), unique_ids_.size(), summed_.data(), clock));
    gate_.ServeWaiters();
    return Status::OK();
  }
  // Into the worker's part of the clock's round, duplicate ids summed.
  Rows& mine = rounds_[clock].workers[worker];
  mine.index.reserve(mine.index.size() + n);
  for (size_t i = 0; i < n; ++i) {
    auto [it, inserted] = mine.index.emplace(ids[i], mine.ids.size());
    if (inserted) {
      mine.ids.push_back(ids[i]);
      mine.sum.insert(mine.sum.end(), grads + i * w, grads + (i + 1) * w);
    } else {
      device_->Axpy(w, 1.0f, grads + i * w, mine.sum.data() + it->second * w);
    }
  }
  return Status::OK();  // Applied when the round completes.
}

void SparseShardState::ReduceRound(const Round& round, Rows* out) const {
  const size_t w = spec_.width;
  std::vector<int> contributors;
  for (const auto& [worker, rows] : round.workers) {
    contributors.push_back(worker);
    for (size_t i = 0; i < rows.ids.size(); ++i) {
      auto [it, inserted] = out->index.emplace(rows.ids[i], out->ids.size());
      const float* g = rows.sum.data() + i * w;
      if (inserted) {
        out->ids.push_back(rows.ids[i]);
        out->sum.insert(out->sum.end(), g, g + w);
      } else {
        device_->Axpy(w, 1.0f, g, out->sum.data() + it->second * w);
      }
    }
  }
  const size_t workers = gate_.RoundWorkers(contributors);
  device_->Scale(out->sum.size(), 1.0f / static_cast<float>(workers), out->sum.data());
}

Status SparseShardState::CompleteRounds() {
  const int64_t before = applied_clock_;
  Status s = ApplyCompleteRounds();
  if (applied_clock_ > before && on_rounds_applied_) on_rounds_applied_(applied_clock_);
  return s;
}

Status SparseShardState::ApplyCompleteRounds() {
  // Round c is complete once every live worker has completed clock c.
  while (!rounds_.empty() && gate_.min_clock() > rounds_.begin()->first) {
    auto it = rounds_.begin();
    Rows r;
    ReduceRound(it->second, &r);
    Status s = r.ids.empty() ? Status::OK()
                             : ApplyRows(r.ids.data(), r.ids.size(), r.sum.data(), it->first);
    applied_clock_ = it->first + 1;
    rounds_.erase(it);
    RETURN_IF_ERROR(s);
  }
  if (rounds_.empty()) applied_clock_ = std::max(applied_clock_, gate_.min_clock());
  return Status::OK();
}

void SparseShardState::SetLiveWorkers(const std::vector<int>& ids,
                                      const std::vector<int64_t>& clocks) {
  gate_.SetLiveWorkers(ids, clocks);
}

void SparseShardState::HoldWorkerClocks(const std::vector<int>& ids, int64_t start) {
  gate_.HoldWorkerClocks(ids, start);
}

void SparseShardState::ReleaseWorkerClock(int worker) { gate_.ReleaseWorkerClock(worker); }

void SparseShardState::AdvanceClock(int worker, int64_t clock) {
  gate_.AdvanceClock(worker, clock);
}

void SparseShardState::ExpireWaiters(int64_t now_ms) { gate_.ExpireWaiters(now_ms); }

}  // namespace server_internal
}  // namespace relaxps
