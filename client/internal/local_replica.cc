#include "client/internal/local_replica.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace relaxps {
namespace client_internal {
namespace {

// Sizes `v` to n zeros.
void Zero(std::vector<float>* v, size_t n) { v->assign(n, 0.0f); }

}  // namespace

void LocalReplica::Remember(int server, const std::string& table, uint64_t range_begin,
                            uint64_t range_end, uint64_t begin, const float* values, size_t n,
                            int64_t params_clock) {
  MutexLock l(&mu_);
  if (lost_.count(server)) return;
  Range& r = ranges_[{table, range_begin}];
  if (r.params.size() != range_end - range_begin) {
    r = Range();
    r.params.assign(range_end - range_begin, 0.0f);
  }
  r.server = server;
  r.begin = range_begin;
  r.end = range_end;
  std::memcpy(r.params.data() + (begin - range_begin), values, n * sizeof(float));
  if (!r.have || r.from_init) {
    // Merge [from, to) into the covered pieces; whole once one covers all.
    uint64_t from = begin - range_begin, to = from + n;
    auto it = r.covered.upper_bound(from);
    if (it != r.covered.begin() && std::prev(it)->second >= from) --it;
    while (it != r.covered.end() && it->first <= to) {
      from = std::min(from, it->first);
      to = std::max(to, it->second);
      it = r.covered.erase(it);
    }
    r.covered.emplace(from, to);
    if (from == 0 && to == range_end - range_begin) {
      r.have = true;
      r.from_init = false;
      r.covered.clear();
    }
  }
  r.base_clock = params_clock;
  r.local_steps = 0;
  r.unsent_steps = 0;
}

bool LocalReplica::GoLocal(int server, const std::string& endpoint, bool stalled,
                           int64_t clock) {
  MutexLock l(&mu_);
  if (lost_.count(server)) return false;
  lost_[server] = Lost{endpoint, stalled, clock};
  for (auto& [key, r] : ranges_) {
    if (r.server != server) continue;
    Zero(&r.delta, r.params.size());
    Zero(&r.doubtful_delta, r.params.size());
    r.doubtful.clear();
    r.velocity.clear();
    r.local_steps = 0;
    r.unsent_steps = 0;
  }
  return true;
}

void LocalReplica::Reassign(const std::string& table, uint64_t range_begin, int server) {
  MutexLock l(&mu_);
  auto it = ranges_.find({table, range_begin});
  if (it == ranges_.end() || it->second.server == server) return;
  Range& r = it->second;
  r.server = server;
  if (lost_.count(server) && r.delta.size() != r.params.size()) {
    Zero(&r.delta, r.params.size());
    Zero(&r.doubtful_delta, r.params.size());
    r.local_steps = 0;
    r.unsent_steps = 0;
  }
}

int LocalReplica::FollowMoves(const ShardMap& map) {
  MutexLock l(&mu_);
  int changed = 0;
  std::map<Key, Range> next;
  for (auto& [key, r] : ranges_) {
    StatusOr<std::vector<DenseSlice>> slices =
        r.end > r.begin ? map.SplitDense(key.first, r.begin, r.end - r.begin)
                        : StatusOr<std::vector<DenseSlice>>(std::vector<DenseSlice>());
    const bool same = slices.ok() && slices->size() == 1 && (*slices)[0].server == r.server &&
                      (*slices)[0].range_begin == r.begin && (*slices)[0].range_end == r.end;
    if (!slices.ok() || slices->empty() || same || lost_.count(r.server) ||
        !r.doubtful.empty()) {
      next.emplace(key, std::move(r));
      continue;
    }
    ++changed;
    for (const DenseSlice& s : *slices) {
      // A slice is all of its range in `map` unless the copy held only
      // part of it (a range that grew back: a drain into a neighbour).
      Range piece;
      piece.server = s.server;
      piece.begin = s.begin;
      piece.end = s.begin + s.count;
      piece.have = r.have && s.begin == s.range_begin && s.count == s.range_end - s.range_begin;
      piece.from_init = r.from_init;
      piece.base_clock = r.base_clock;
      piece.params.assign(r.params.begin() + s.offset, r.params.begin() + s.offset + s.count);
      next.emplace(Key{key.first, s.begin}, std::move(piece));
    }
  }
  ranges_.swap(next);
  return changed;
}

bool LocalReplica::TakeOver(int holder, int spare) {
  MutexLock l(&mu_);
  auto it = lost_.find(holder);
  if (it == lost_.end() || holder == spare) return false;
  Lost lost = it->second;
  lost.endpoint.clear();  // Never seen alive: used again once the map says so.
  lost.stalled = false;
  lost_.erase(it);
  lost_.emplace(spare, lost);
  for (auto& [key, r] : ranges_) {
    if (r.server == holder) r.server = spare;
  }
  return true;
}

void LocalReplica::StartFromInitializer(int server, const std::string& table,
                                        uint64_t range_begin, uint64_t range_end,
                                        const Initializer& init) {
  MutexLock l(&mu_);
  Range& r = ranges_[{table, range_begin}];
  if (r.have && r.params.size() == range_end - range_begin) return;
  auto lost = lost_.find(server);
  r = Range();
  r.server = server;
  r.begin = range_begin;
  r.end = range_end;
  r.have = true;
  r.from_init = true;
  r.base_clock = lost == lost_.end() ? 0 : lost->second.clock;
  r.params.resize(range_end - range_begin);
  init.Fill(range_begin, r.params.size(), r.params.data());
  Zero(&r.delta, r.params.size());
  Zero(&r.doubtful_delta, r.params.size());
}

int64_t LocalReplica::LocalSince(int server) const {
  MutexLock l(&mu_);
  auto it = lost_.find(server);
  return it == lost_.end() ? 0 : it->second.clock;
}

bool LocalReplica::IsLocal(int server) const {
  MutexLock l(&mu_);
  return lost_.count(server) > 0;
}

bool LocalReplica::LostAt(int server, std::string* endpoint, bool* stalled) const {
  MutexLock l(&mu_);
  auto it = lost_.find(server);
  if (it == lost_.end()) return false;
  *endpoint = it->second.endpoint;
  *stalled = it->second.stalled;
  return true;
}

StatusOr<int64_t> LocalReplica::Serve(int server, const std::string& table, uint64_t range_begin,
                                      const LocalStep& step, uint64_t begin,
                                      const float* grads, float* out, size_t n,
                                      uint64_t doubtful_id, const FloatBuffer& doubtful_grads,
                                      bool continues) {
  MutexLock l(&mu_);
  auto it = ranges_.find({table, range_begin});
  if (it == ranges_.end() || !it->second.have || it->second.server != server) {
    return UnavailableError("server " + std::to_string(server) + " is lost and this worker holds "
                            "no copy of table '" + table + "' at key " +
                            std::to_string(range_begin) + " to train on");
  }
  Range& r = it->second;
  const size_t offset = begin - r.begin;
  if (offset > r.params.size() || n > r.params.size() - offset) {
    return InvalidArgumentError("keys outside the range held locally");
  }
  if (grads != nullptr) {
    if (r.delta.size() != r.params.size()) Zero(&r.delta, r.params.size());
    if (r.doubtful_delta.size() != r.params.size()) Zero(&r.doubtful_delta, r.params.size());
    float* w = r.params.data() + offset;
    float* d = (doubtful_id != 0 ? r.doubtful_delta.data() : r.delta.data()) + offset;
    // The server's momentum update (kernels: v = mu * v + g; w -= lr * v);
    // plain SGD (no velocity kept) when mu is 0.
    float* v = nullptr;
    if (step.momentum != 0.0f) {
      if (r.velocity.size() != r.params.size()) Zero(&r.velocity, r.params.size());
      v = r.velocity.data() + offset;
    }
    for (size_t i = 0; i < n; ++i) {
      const float before = w[i];
      const float g = v != nullptr ? (v[i] = step.momentum * v[i] + grads[i]) : grads[i];
      w[i] = before - step.lr * g;
      d[i] += w[i] - before;
    }
    // A copy: the caller may reuse its buffer once the push completed.
    if (doubtful_id != 0) {
      r.doubtful.push_back(DoubtfulPush{
          table, begin, doubtful_id,
          FloatBuffer::CopyOf(doubtful_grads.data(), doubtful_grads.size()), continues});
    }
    if (!continues) {
      r.local_steps += 1;
      r.unsent_steps += 1;
    }
  }
  if (out != nullptr) std::memcpy(out, r.params.data() + offset, n * sizeof(float));
  return r.base_clock;
}

void LocalReplica::FillSeedCopy(int server, wire::SeedData* data, std::vector<Frame>* frames) {
  MutexLock l(&mu_);
  for (auto& [key, r] : ranges_) {
    if (r.server != server) continue;
    wire::SeedRange* sr = data->add_ranges();
    sr->set_table(key.first);
    sr->set_begin(r.begin);
    sr->set_end(r.end);
    sr->set_has_copy(r.have);
    if (!r.have) continue;
    sr->set_change_only(r.from_init);
    sr->set_clock(r.base_clock);
    sr->set_local_steps(r.local_steps);
    // A new server never saw the doubtful pushes: they are changes like any.
    std::vector<float> change = AllChanges(r);
    frames->push_back(Frame::Copy(r.params.data(), r.params.size() * sizeof(float)));
    frames->push_back(Frame::Copy(change.data(), change.size() * sizeof(float)));
    if (!r.from_init && r.velocity.size() == r.params.size()) {
      sr->set_slots(1);
      frames->push_back(Frame::Copy(r.velocity.data(), r.velocity.size() * sizeof(float)));
    }
    Zero(&r.delta, r.params.size());
    Zero(&r.doubtful_delta, r.params.size());
    r.doubtful.clear();
    r.unsent_steps = 0;
  }
}

std::vector<RangeDelta> LocalReplica::Rejoin(int server, bool same_server,
                                             std::vector<DoubtfulPush>* resend) {
  MutexLock l(&mu_);
  std::vector<RangeDelta> out;
  if (lost_.erase(server) == 0) return out;
  for (auto& [key, r] : ranges_) {
    if (r.server != server) continue;
    if (r.unsent_steps > 0 && r.delta.size() == r.params.size()) {
      const std::vector<float> change = same_server ? r.delta : AllChanges(r);
      RangeDelta d;
      d.table = key.first;
      d.begin = r.begin;
      d.delta = FloatBuffer::Uninitialized(change.size());
      std::memcpy(d.delta.data(), change.data(), change.size() * sizeof(float));
      d.local_steps = r.unsent_steps;
      out.push_back(std::move(d));
    }
    if (same_server) {
      for (DoubtfulPush& p : r.doubtful) resend->push_back(std::move(p));
    }
    r.doubtful.clear();
    r.doubtful_delta.clear();
    r.delta.clear();
    r.velocity.clear();  // The server keeps its own (seeded or kept) from here on.
    r.local_steps = 0;
    r.unsent_steps = 0;
  }
  return out;
}

std::vector<float> LocalReplica::AllChanges(const Range& r) {
  std::vector<float> change = r.delta;
  change.resize(r.params.size(), 0.0f);
  for (size_t i = 0; i < r.doubtful_delta.size() && i < change.size(); ++i) {
    change[i] += r.doubtful_delta[i];
  }
  return change;
}

void LocalReplica::CountLocalStep() {
  MutexLock l(&mu_);
  local_steps_ += 1;
}

uint64_t LocalReplica::local_steps() const {
  MutexLock l(&mu_);
  return local_steps_;
}

}  // namespace client_internal
}  // namespace relaxps
