#include "server/internal/dense_shard.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "common/optimizer_rules.h"

namespace relaxps {
namespace server_internal {

DenseShardState::DenseShardState(DenseShard* shard,
                                 std::unique_ptr<kernels::Optimizer> optimizer,
                                 const ConsistencyPolicy* policy, kernels::Device* device,
                                 ParamStore* store, BufferPool* pool)
    : shard_(shard),
      optimizer_(std::move(optimizer)),
      policy_(policy),
      device_(device),
      store_(store),
      pool_(pool),
      state_scratch_(shard->slots.size(), nullptr),
      gate_(policy, /*label=*/"",
            ConsistencyGate::Hooks{[this] { return visible_clock(); },
                                   [this] { return CompleteRounds(); }}) {
  CHECK_EQ(static_cast<int>(shard->slots.size()), 1 + optimizer_->num_state_slots());
  applied_clock_ = shard->clock;
  loaded_clock_ = shard->clock;
}

Status DenseShardState::CheckRange(uint64_t begin, uint64_t count) const {
  const DenseShardSpec& s = shard_->spec;
  if (count == 0 || begin < s.begin || begin > s.end || count > s.end - begin) {
    return WrongShardError("keys [" + std::to_string(begin) + ", " +
                                std::to_string(begin + count) + ") are not in this shard [" +
                                std::to_string(s.begin) + ", " + std::to_string(s.end) +
                                ") of table '" + s.table + "'");
  }
  return Status::OK();
}

int64_t DenseShardState::visible_clock() const {
  // A shard loaded from disk (a restart, a restored checkpoint) holds every
  // worker's updates up to the clock it was stored at, even before the live
  // set and its clocks have arrived.
  return policy_->AggregatesPushes() ? applied_clock_ : std::max(gate_.min_clock(), loaded_clock_);
}

Status DenseShardState::Apply(uint64_t offset, const float* grads, size_t n, float lr_scale,
                              bool new_step, float* copy) {
  store_->BeforeDenseWrite(shard_);  // A background flush may still be copying the slots.
  float* w = shard_->slots[0] + offset;
  for (size_t s = 1; s < shard_->slots.size(); ++s) state_scratch_[s - 1] = shard_->slots[s] + offset;
  if (new_step || shard_->step == 0) shard_->step += 1;
  NoteWrite(Write::kStep, offset, n, grads, lr_scale);
  // A store that logs updates logs this one as its gradient and replays it
  // through ReplayStep. Logged before the optimizer runs (the record holds
  // only the gradient, step, clock and scale, all known now), so that the
  // log's sync of a large record runs while the optimizer does. A refused
  // record refuses the update, which is applied as it was before (the
  // store's next flush persists it without the log).
  const Status logged = store_->DenseStepped(shard_, DenseStep{offset, n, grads, lr_scale});
  if (copy != nullptr) {
    optimizer_->ApplyAndCopy(device_, w, state_scratch_.data(), grads, n, shard_->step, lr_scale,
                             copy);
  } else {
    optimizer_->Apply(device_, w, state_scratch_.data(), grads, n, shard_->step, lr_scale);
  }
  ++updates_applied_;
  return logged;
}

Status DenseShardState::ApplyForwardedStep(uint64_t begin, const float* grads, size_t n,
                                           int64_t step, float lr_scale) {
  const uint64_t offset = begin - shard_->spec.begin;
  store_->BeforeDenseWrite(shard_);
  for (size_t s = 1; s < shard_->slots.size(); ++s) state_scratch_[s - 1] = shard_->slots[s] + offset;
  shard_->step = step;
  optimizer_->Apply(device_, shard_->slots[0] + offset, state_scratch_.data(), grads, n, step,
                    lr_scale);
  ++updates_applied_;
  return store_->DenseUpdated(shard_, offset, n);
}

Status ReplayStep(const kernels::Optimizer& optimizer, kernels::Device* device, DenseShard* shard,
                  const DenseStep& step) {
  std::vector<float*> state(shard->slots.size() - 1);
  for (size_t s = 1; s < shard->slots.size(); ++s) state[s - 1] = shard->slots[s] + step.offset;
  optimizer.Apply(device, shard->slots[0] + step.offset, state.data(), step.grads, step.n,
                  shard->step, step.lr_scale);
  return Status::OK();
}

bool DenseShardState::Coverage::Add(uint64_t begin, uint64_t end) {
  auto next = intervals.lower_bound(begin);
  if (next != intervals.end() && next->first < end) return false;
  if (next != intervals.begin() && std::prev(next)->second > begin) return false;
  intervals.emplace(begin, end);
  keys += end - begin;
  return true;
}

bool DenseShardState::CoveredByPushes(int worker, int64_t clock, size_t n) {
  auto& [at, keys] = pushed_keys_[worker];
  if (at != clock) {
    at = clock;
    keys = 0;
  }
  keys += n;
  return keys >= CoverageKeys();
}

Status DenseShardState::Push(int worker, int64_t clock, uint64_t begin, const float* grads,
                             size_t n, bool new_step) {
  const uint64_t offset = begin - shard_->spec.begin;
  if (AppliesOnArrival(clock)) {
    return ApplyOnArrival(worker, clock, offset, grads, n, new_step, nullptr);
  }
  Contribution& mine = rounds_[clock].workers[worker];
  if (!mine.covered.Add(offset, offset + n)) {
    return InvalidArgumentError("worker " + std::to_string(worker) + " pushed keys [" +
                                std::to_string(begin) + ", " + std::to_string(begin + n) +
                                ") of table '" + spec().table + "' twice for clock " +
                                std::to_string(clock));
  }
  if (mine.grads.empty()) {
    mine.grads = NewSnapshot(shard_->size());
    std::fill(mine.grads.begin(), mine.grads.end(), 0.0f);
  }
  std::memcpy(mine.grads.data() + offset, grads, n * sizeof(float));
  if (mine.covered.keys >= CoverageKeys()) gate_.RecordCompleted(worker, clock);
  RETURN_IF_ERROR(CompleteRounds());
  gate_.ServeWaiters();
  return Status::OK();
}

Status DenseShardState::ApplyOnArrival(int worker, int64_t clock, uint64_t offset,
                                       const float* grads, size_t n, bool new_step, float* copy) {
  // Async / SSP, or a BSP push for a round already closed (a worker that
  // fell behind and rejoined).
  RETURN_IF_ERROR(Apply(offset, grads, n, LrScale(clock), new_step, copy));
  shard_->clock = std::max(shard_->clock, clock + 1);
  if (CoveredByPushes(worker, clock, n)) gate_.RecordCompleted(worker, clock);
  gate_.ServeWaiters();
  return Status::OK();
}

Status DenseShardState::PushPull(int worker, int64_t clock, uint64_t begin, const float* grads,
                                 size_t n, bool new_step, int64_t pull_clock,
                                 int64_t deadline_ms, PullReply done) {
  // The gate only opens further with the push, so a pull it lets through
  // now is answered right after it.
  const int64_t required = gate_.RequiredClock(pull_clock);
  if (!AppliesOnArrival(clock) || !gate_.Passes(required)) {
    RETURN_IF_ERROR(Push(worker, clock, begin, grads, n, new_step));
    Pull(pull_clock, begin, n, deadline_ms, std::move(done));
    return Status::OK();
  }
  FloatBuffer snapshot = NewSnapshot(n);
  RETURN_IF_ERROR(ApplyOnArrival(worker, clock, begin - shard_->spec.begin, grads, n, new_step,
                                 snapshot.data()));
  done(Status::OK(), std::move(snapshot), visible_clock());
  return Status::OK();
}

Status DenseShardState::AddDelta(uint64_t begin, const float* delta, size_t n) {
  const uint64_t offset = begin - shard_->spec.begin;
  store_->BeforeDenseWrite(shard_);
  NoteWrite(Write::kDelta, offset, n, delta);
  device_->Axpy(n, 1.0f, delta, shard_->slots[0] + offset);
  ++updates_applied_;
  RETURN_IF_ERROR(store_->DenseUpdated(shard_, offset, n));
  gate_.ServeWaiters();
  return Status::OK();
}

Status DenseShardState::Seed(const float* params, size_t n, int64_t clock,
                             const float* velocity) {
  if (n != shard_->size()) {
    return InvalidArgumentError("seed of " + std::to_string(n) + " floats for a shard of " +
                                std::to_string(shard_->size()));
  }
  const OptimizerRule* rule = FindOptimizerRule(optimizer_->Name());
  if (velocity != nullptr && (rule == nullptr || !rule->velocity_slot)) {
    return InvalidArgumentError("a velocity seeds only a momentum table's slot, not " +
                                std::string(optimizer_->Name()) + "'s");
  }
  store_->BeforeDenseWrite(shard_);
  NoteWrite(Write::kReset, 0, n, params);
  std::memcpy(shard_->slots[0], params, n * sizeof(float));
  for (size_t s = 1; s < shard_->slots.size(); ++s) {
    if (velocity != nullptr) {
      std::memcpy(shard_->slots[s], velocity, n * sizeof(float));
      continue;
    }
    std::fill(shard_->slots[s], shard_->slots[s] + n,
              optimizer_->state_init(static_cast<int>(s) - 1));
  }
  shard_->step = 0;
  shard_->clock = std::max(shard_->clock, clock);
  loaded_clock_ = std::max(loaded_clock_, clock);
  applied_clock_ = std::max(applied_clock_, clock);
  rounds_.clear();
  // The dropped rounds' pushes count as reflected, as the seed replaces them.
  NotifyRoundsApplied();
  RETURN_IF_ERROR(store_->DenseUpdated(shard_, 0, n));
  gate_.ServeWaiters();
  return Status::OK();
}

size_t DenseShardState::RoundWorkers(const Round& round) const {
  std::vector<int> contributors;
  for (const auto& [worker, mine] : round.workers) contributors.push_back(worker);
  return gate_.RoundWorkers(contributors);
}

Status DenseShardState::ApplyRound(Round* round, int64_t clock, size_t workers) {
  round_workers_[clock] = static_cast<uint32_t>(workers);
  while (round_workers_.size() > kRoundHistory) round_workers_.erase(round_workers_.begin());
  if (round->workers.empty()) return Status::OK();  // Nobody pushed: no step.
  // In worker-id order (the map's), into the lowest id's buffer: the same
  // float additions whatever order the pushes arrived in.
  auto it = round->workers.begin();
  FloatBuffer& sum = it->second.grads;
  for (++it; it != round->workers.end(); ++it) {
    device_->Axpy(sum.size(), 1.0f, it->second.grads.data(), sum.data());
  }
  device_->Scale(sum.size(), 1.0f / static_cast<float>(workers), sum.data());
  return Apply(0, sum.data(), sum.size(), LrScale(clock));
}

void DenseShardState::DescribeRoundsApplied(int64_t from, wire::RoundsApplied* out) const {
  for (auto it = round_workers_.lower_bound(from); it != round_workers_.end(); ++it) {
    out->add_clocks(it->first);
    out->add_workers(it->second);
  }
}

void DenseShardState::NotifyRoundsApplied() {
  if (on_rounds_applied_) on_rounds_applied_(applied_clock_);
}

Status DenseShardState::CompleteRounds() {
  const int64_t before = applied_clock_;
  Status s = ApplyCompleteRounds();
  if (applied_clock_ > before) NotifyRoundsApplied();
  return s;
}

Status DenseShardState::ApplyCompleteRounds() {
  if (follower_) return Status::OK();  // The head decides (CompleteRoundsBelow).
  // Round c is complete once every live worker has completed clock c.
  while (!rounds_.empty() && gate_.min_clock() > rounds_.begin()->first) {
    auto it = rounds_.begin();
    RETURN_IF_ERROR(ApplyRound(&it->second, it->first, RoundWorkers(it->second)));
    applied_clock_ = it->first + 1;
    shard_->clock = applied_clock_;
    rounds_.erase(it);
  }
  // No pending round: everything every live worker completed is applied.
  if (rounds_.empty()) applied_clock_ = std::max(applied_clock_, gate_.min_clock());
  return Status::OK();
}

void DenseShardState::SetFollower(bool follower) {
  follower_ = follower;
  if (!follower_ && policy_->AggregatesPushes()) {
    Status s = CompleteRounds();
    if (!s.ok()) LOG(ERROR) << "completing BSP rounds after promotion: " << s;
  }
  gate_.ServeWaiters();
}

Status DenseShardState::CompleteRoundsBelow(int64_t clock, const wire::RoundsApplied& applied) {
  std::map<int64_t, size_t> head_workers;
  for (int i = 0; i < applied.clocks_size() && i < applied.workers_size(); ++i) {
    if (applied.workers(i) > 0) head_workers[applied.clocks(i)] = applied.workers(i);
  }
  while (!rounds_.empty() && rounds_.begin()->first < clock) {
    auto it = rounds_.begin();
    auto head = head_workers.find(it->first);
    Status s = ApplyRound(&it->second, it->first,
                          head != head_workers.end() ? head->second : RoundWorkers(it->second));
    if (!s.ok()) {
      NotifyRoundsApplied();
      return s;
    }
    applied_clock_ = std::max(applied_clock_, it->first + 1);
    rounds_.erase(it);
  }
  applied_clock_ = std::max(applied_clock_, clock);
  NotifyRoundsApplied();
  shard_->clock = std::max(shard_->clock, applied_clock_);
  gate_.ServeWaiters();
  return Status::OK();
}

void DenseShardState::SaveMeta(wire::ChainSnapshot* snap) const {
  snap->set_step(shard_->step);
  snap->set_shard_clock(shard_->clock);
  snap->set_applied_clock(applied_clock_);
  for (const auto& [worker, clock] : gate_.clocks().entries()) {
    snap->mutable_clocks()->add_ids(worker);
    snap->mutable_clocks()->add_clocks(clock);
  }
}

void DenseShardState::SaveState(wire::ChainSnapshot* snap,
                                std::vector<FloatBuffer>* frames) const {
  SaveMeta(snap);
  for (size_t s = 0; s < shard_->slots.size(); ++s) frames->push_back(CopySlot(s, spec().begin, shard_->size()));
  for (const auto& [clock, round] : rounds_) {
    snap->add_round_clocks(clock);
    wire::RoundContributors* rc = snap->add_rounds();
    for (const auto& [w, mine] : round.workers) {
      rc->add_workers(w);
      wire::KeyIntervals* keys = rc->add_covered();
      for (const auto& [b, e] : mine.covered.intervals) {
        keys->add_begin(b);
        keys->add_end(e);
      }
      FloatBuffer grads = FloatBuffer::Uninitialized(mine.grads.size());
      std::memcpy(grads.data(), mine.grads.data(), grads.bytes());
      frames->push_back(std::move(grads));  // A copy: the round goes on here.
    }
  }
}

Status DenseShardState::LoadState(const wire::ChainSnapshot& snap,
                                  const std::vector<const float*>& frames,
                                  const std::vector<size_t>& sizes) {
  const size_t slots = shard_->slots.size();
  if (snap.rounds_size() != snap.round_clocks_size() ||
      frames.size() != slots + RoundFrames(snap)) {
    return InvalidArgumentError("chain snapshot of table '" + spec().table + "' has " +
                                std::to_string(frames.size()) + " frames, expected " +
                                std::to_string(slots + RoundFrames(snap)));
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    if (sizes[i] != shard_->size()) {
      return InvalidArgumentError("chain snapshot frame " + std::to_string(i) + " holds " +
                                  std::to_string(sizes[i]) + " floats, the shard " +
                                  std::to_string(shard_->size()));
    }
  }
  for (size_t s = 0; s < slots; ++s) {
    RETURN_IF_ERROR(LoadSlotPiece(s, 0, frames[s], shard_->size()));
  }
  return LoadMeta(snap, std::vector<const float*>(frames.begin() + slots, frames.end()));
}

Status DenseShardState::LoadSlotPiece(size_t slot, uint64_t offset, const float* values,
                                      size_t n) {
  if (slot >= shard_->slots.size() || offset > shard_->size() || n > shard_->size() - offset) {
    return InvalidArgumentError("state transfer piece of slot " + std::to_string(slot) + " [" +
                                std::to_string(offset) + ", +" + std::to_string(n) +
                                ") does not fit table '" + spec().table + "' (" +
                                std::to_string(shard_->slots.size()) + " slots of " +
                                std::to_string(shard_->size()) + " floats)");
  }
  if (n == 0) return Status::OK();
  store_->BeforeDenseWrite(shard_);
  NoteWrite(Write::kReset, offset, n, values);
  float* to = shard_->slots[slot] + offset;
  // A range taken back loads its own memory (a view of it) onto itself.
  if (to != values) std::memcpy(to, values, n * sizeof(float));
  return store_->DenseUpdated(shard_, offset, n);
}

size_t DenseShardState::RoundFrames(const wire::ChainSnapshot& snap) {
  size_t n = 0;
  for (const wire::RoundContributors& rc : snap.rounds()) n += rc.workers_size();
  return n;
}

Status DenseShardState::LoadMeta(const wire::ChainSnapshot& snap,
                                 const std::vector<const float*>& round_grads) {
  if (snap.rounds_size() != snap.round_clocks_size() || round_grads.size() != RoundFrames(snap)) {
    return InvalidArgumentError("chain snapshot of table '" + spec().table + "' has " +
                                std::to_string(round_grads.size()) + " round gradients for " +
                                std::to_string(snap.round_clocks_size()) +
                                " rounds that name " + std::to_string(RoundFrames(snap)) +
                                " contributions");
  }
  shard_->step = snap.step();
  shard_->clock = snap.shard_clock();
  applied_clock_ = snap.applied_clock();
  rounds_.clear();
  round_workers_.clear();  // The predecessor forwards what it applies from here on.
  size_t frame = 0;
  for (int r = 0; r < snap.round_clocks_size(); ++r) {
    Round& round = rounds_[snap.round_clocks(r)];
    const wire::RoundContributors& rc = snap.rounds(r);
    for (int i = 0; i < rc.workers_size(); ++i) {
      const float* grads = round_grads[frame++];
      if (round.workers.count(rc.workers(i)) > 0) {
        return InvalidArgumentError("chain snapshot of table '" + spec().table +
                                    "' names worker " + std::to_string(rc.workers(i)) +
                                    " twice in the round of clock " +
                                    std::to_string(snap.round_clocks(r)));
      }
      Contribution& mine = round.workers[rc.workers(i)];
      mine.grads = NewSnapshot(shard_->size());
      std::memcpy(mine.grads.data(), grads, mine.grads.bytes());
      Coverage& covered = mine.covered;
      if (i >= rc.covered_size()) {  // A snapshot of whole-shard pushes only.
        covered.Add(0, shard_->size());
        continue;
      }
      const wire::KeyIntervals& keys = rc.covered(i);
      for (int k = 0; k < keys.begin_size() && k < keys.end_size(); ++k) {
        if (keys.begin(k) >= keys.end(k) || keys.end(k) > shard_->size() ||
            !covered.Add(keys.begin(k), keys.end(k))) {
          return InvalidArgumentError("chain snapshot of table '" + spec().table +
                                      "' has bad key intervals for worker " +
                                      std::to_string(rc.workers(i)));
        }
      }
    }
  }
  for (int i = 0; i < snap.clocks().ids_size(); ++i) {
    gate_.RecordCompleted(snap.clocks().ids(i), snap.clocks().clocks(i) - 1);  // Stores clock + 1.
  }
  return Status::OK();
}

FloatBuffer DenseShardState::Copy(uint64_t begin, size_t n) const { return CopySlot(0, begin, n); }

FloatBuffer DenseShardState::NewSnapshot(size_t n) const {
  return pool_ != nullptr ? pool_->Acquire<float>(n) : FloatBuffer::Uninitialized(n);
}

FloatBuffer DenseShardState::CopySlot(int slot, uint64_t begin, size_t n) const {
  // One copy: the snapshot ZeroMQ sends while the next update may change
  // the shard.
  FloatBuffer out = NewSnapshot(n);
  std::memcpy(out.data(), shard_->slots[slot] + (begin - shard_->spec.begin), n * sizeof(float));
  return out;
}

FloatBuffer DenseShardState::ViewSlot(int slot, uint64_t begin, size_t n) const {
  std::shared_ptr<const void> pin = store_->PinDense(shard_);
  if (pin == nullptr) return CopySlot(slot, begin, n);
  return FloatBuffer::Wrap(shard_->slots[slot] + (begin - shard_->spec.begin), n,
                           [pin = std::move(pin)] {});
}

FloatBuffer DenseShardState::LendSlot(int slot, uint64_t begin, size_t n, int64_t wait_ms) {
  std::shared_ptr<const void> pin = store_->PinDense(shard_);
  if (pin == nullptr) return CopySlot(slot, begin, n);
  if (lent_ == nullptr) lent_ = std::make_unique<LentSpans>();
  lend_wait_ms_ = wait_ms;
  std::shared_ptr<void> lent = lent_->Lend(begin - shard_->spec.begin, n);
  return FloatBuffer::Wrap(shard_->slots[slot] + (begin - shard_->spec.begin), n,
                           [pin = std::move(pin), lent = std::move(lent)] {});
}

void DenseShardState::ReleaseTail() {
  if (lent_ != nullptr) lent_->WaitUntilReturned(shard_->size(), uint64_t{1} << 62, lend_wait_ms_);
  store_->ReleaseDenseTail(shard_);
}

Status DenseShardState::Reshape(const std::string& store_name, uint64_t end) {
  const size_t old_size = shard_->size();
  if (end < spec().end && !rounds_.empty()) {
    return FailedPreconditionError("range [" + std::to_string(spec().begin) + ", " +
                                   std::to_string(spec().end) + ") of '" + spec().table +
                                   "' has a BSP round pending: it cannot shrink");
  }
  // The pending rounds' gradients grow with the range first (zeros: nobody
  // pushed the new keys for them yet), so a failure leaves them fitting.
  const size_t new_size = end > spec().begin ? end - spec().begin : 0;
  std::vector<FloatBuffer> grown;
  if (new_size > old_size) {
    for (auto& [clock, round] : rounds_) {
      for (auto& [worker, mine] : round.workers) {
        FloatBuffer g = NewSnapshot(new_size);
        std::memcpy(g.data(), mine.grads.data(), mine.grads.bytes());
        std::fill(g.begin() + old_size, g.end(), 0.0f);
        grown.push_back(std::move(g));
      }
    }
  }
  RETURN_IF_ERROR(store_->ReshapeDense(shard_, store_name, end));
  StopTrackingWrites();  // Its offsets were the old range's.
  size_t i = 0;
  for (auto& [clock, round] : rounds_) {
    for (auto& [worker, mine] : round.workers) {
      if (i < grown.size()) mine.grads = std::move(grown[i++]);
    }
  }
  return Status::OK();
}

void DenseShardState::set_coverage_keys(uint64_t keys) {
  const uint64_t before = CoverageKeys();
  coverage_keys_ = keys;
  // A lower target: the async counts may hold keys the range no longer has.
  if (CoverageKeys() < before) pushed_keys_.clear();
  for (const auto& [clock, round] : rounds_) {
    for (const auto& [worker, mine] : round.workers) {
      if (mine.covered.keys >= CoverageKeys()) gate_.RecordCompleted(worker, clock);
    }
  }
  Status s = CompleteRounds();
  if (!s.ok()) LOG(ERROR) << "completing BSP rounds of '" << spec().table << "': " << s;
  gate_.ServeWaiters();
}

void DenseShardState::Pull(int64_t worker_clock, uint64_t begin, size_t n, int64_t deadline_ms,
                           PullReply done) {
  const int64_t required = gate_.RequiredClock(worker_clock);
  if (gate_.Passes(required)) {
    done(Status::OK(), Copy(begin, n), visible_clock());
    return;
  }
  gate_.Park(required, deadline_ms,
             [this, begin, n, done = std::move(done)](const Status& s, int64_t visible) {
               done(s, s.ok() ? Copy(begin, n) : FloatBuffer(), visible);
             });
}

void DenseShardState::SetLiveWorkers(const std::vector<int>& ids,
                                     const std::vector<int64_t>& clocks) {
  gate_.SetLiveWorkers(ids, clocks);
}

void DenseShardState::HoldWorkerClocks(const std::vector<int>& ids) {
  gate_.HoldWorkerClocks(ids, loaded_clock_);
}

void DenseShardState::ReleaseWorkerClock(int worker) { gate_.ReleaseWorkerClock(worker); }

void DenseShardState::AdvanceClock(int worker, int64_t clock) { gate_.AdvanceClock(worker, clock); }

void DenseShardState::ExpireWaiters(int64_t now_ms) { gate_.ExpireWaiters(now_ms); }

}  // namespace server_internal
}  // namespace relaxps
