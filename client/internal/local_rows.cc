#include "client/internal/local_rows.h"

#include <cstring>

namespace relaxps {
namespace client_internal {

void LocalRows::Remember(const std::string& table, size_t width, const uint64_t* ids,
                         const float* values, size_t n) {
  MutexLock l(&mu_);
  Table& t = tables_[table];
  t.width = width;
  for (size_t i = 0; i < n; ++i) {
    Row& r = t.rows[ids[i]];
    if (!r.delta.empty()) continue;  // Changed locally: the local value stands.
    r.value.assign(values + i * width, values + (i + 1) * width);
  }
}

void LocalRows::Serve(int server, const std::string& table, const Initializer& init,
                      size_t width, float lr, const KeyBuffer& ids, const FloatBuffer& grads,
                      float* out, uint64_t doubtful_id) {
  MutexLock l(&mu_);
  Table& t = tables_[table];
  t.width = width;
  const size_t n = ids.size();
  const bool push = grads.size() > 0;
  for (size_t i = 0; i < n; ++i) {
    Row& r = t.rows[ids[i]];
    if (r.value.size() != width) {
      r.value.resize(width);
      init.FillRow(ids[i], width, r.value.data());
    }
    if (push) {
      if (r.delta.empty()) r.delta.assign(width, 0.0f);
      if (doubtful_id != 0 && r.doubtful_delta.empty()) r.doubtful_delta.assign(width, 0.0f);
      float* d = doubtful_id != 0 ? r.doubtful_delta.data() : r.delta.data();
      r.server = server;
      for (size_t j = 0; j < width; ++j) {
        const float before = r.value[j];
        r.value[j] = before - lr * grads[i * width + j];
        d[j] += r.value[j] - before;
      }
    } else {
      std::memcpy(out + i * width, r.value.data(), width * sizeof(float));
    }
  }
  if (!push) return;
  t.local_steps[server] += 1;
  // Copies: the caller may reuse its buffers once the push completed.
  if (doubtful_id != 0) {
    t.doubtful[server].push_back(DoubtfulRowPush{table, KeyBuffer::CopyOf(ids.data(), ids.size()),
                                                 FloatBuffer::CopyOf(grads.data(), grads.size()),
                                                 doubtful_id});
  }
}

void LocalRows::TakePending(int server, bool without_doubtful, Table* t, KeyBuffer* ids,
                            FloatBuffer* delta) {
  std::vector<uint64_t> pending;
  for (auto& [id, r] : t->rows) {
    if (r.delta.empty() || r.server != server) continue;
    if (!without_doubtful) {
      for (size_t j = 0; j < r.doubtful_delta.size(); ++j) r.delta[j] += r.doubtful_delta[j];
    }
    r.doubtful_delta.clear();
    pending.push_back(id);
  }
  *ids = KeyBuffer::Uninitialized(pending.size());
  *delta = FloatBuffer::Uninitialized(pending.size() * t->width);
  for (size_t i = 0; i < pending.size(); ++i) {
    Row& r = t->rows[pending[i]];
    (*ids)[i] = pending[i];
    std::memcpy(delta->data() + i * t->width, r.delta.data(), t->width * sizeof(float));
    r.delta.clear();
  }
  t->local_steps.erase(server);
  t->doubtful.erase(server);
}

void LocalRows::FillSeedCopy(int server, int64_t base_clock, wire::SeedData* data,
                             std::vector<Frame>* frames) {
  MutexLock l(&mu_);
  for (auto& [name, t] : tables_) {
    const int64_t steps = t.local_steps.count(server) ? t.local_steps[server] : 0;
    KeyBuffer ids;
    FloatBuffer delta;
    // A new server never saw the doubtful pushes: changes like any.
    TakePending(server, /*without_doubtful=*/false, &t, &ids, &delta);
    if (ids.size() == 0) continue;
    wire::SeedRows* sr = data->add_rows();
    sr->set_table(name);
    sr->set_count(ids.size());
    sr->set_base_clock(base_clock);
    sr->set_local_steps(steps);
    frames->push_back(Frame::Share(ids));
    frames->push_back(Frame::Share(delta));
  }
}

void LocalRows::TakeOver(int holder, int spare) {
  MutexLock l(&mu_);
  for (auto& [name, t] : tables_) {
    for (auto& [id, r] : t.rows) {
      if (r.server == holder && !r.delta.empty()) r.server = spare;
    }
    auto steps = t.local_steps.find(holder);
    if (steps != t.local_steps.end()) {
      t.local_steps[spare] += steps->second;
      t.local_steps.erase(holder);
    }
    auto doubtful = t.doubtful.find(holder);
    if (doubtful != t.doubtful.end()) {
      auto& to = t.doubtful[spare];
      for (DoubtfulRowPush& p : doubtful->second) to.push_back(std::move(p));
      t.doubtful.erase(holder);
    }
  }
}

std::vector<RowsDelta> LocalRows::Take(int server, bool same_server,
                                       std::vector<DoubtfulRowPush>* resend) {
  MutexLock l(&mu_);
  std::vector<RowsDelta> out;
  for (auto& [name, t] : tables_) {
    RowsDelta d;
    d.table = name;
    d.local_steps = t.local_steps.count(server) ? t.local_steps[server] : 0;
    if (same_server && t.doubtful.count(server)) {
      for (DoubtfulRowPush& p : t.doubtful[server]) resend->push_back(std::move(p));
    }
    TakePending(server, same_server, &t, &d.ids, &d.delta);
    if (d.ids.size() > 0) out.push_back(std::move(d));
  }
  return out;
}

}  // namespace client_internal
}  // namespace relaxps
