#include "coordinator/reseeder.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/payload_codec.h"
#include "common/table.h"

namespace relaxps {

std::string ReseedSummary::ToString() const {
  std::string s = "server=" + std::to_string(server) + " source=" + source +
                  " clock=" + std::to_string(clock) + " missing_workers=" +
                  std::to_string(missing_workers) + " contributions=";
  bool first = true;
  for (const auto& [worker, c] : contributions) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s%d:%lld:%.4g", first ? "" : ";", worker,
                  static_cast<long long>(c.first), c.second);
    s += buf;
    first = false;
  }
  if (first) s += "none";
  if (buckets > 0) s += " buckets=" + std::to_string(buckets);
  if (rows > 0 || buckets > 0) s += " rows=" + std::to_string(rows);
  if (changes_only > 0) s += " change_only_ranges=" + std::to_string(changes_only);
  if (velocities > 0) s += " velocity_ranges=" + std::to_string(velocities);
  return s;
}

void Reseeder::Begin(int server, uint64_t map_version, const std::vector<int>& workers,
                     int64_t now_ms) {
  Round& r = rounds_[server];
  r = Round();
  r.map_version = map_version;
  r.started_ms = now_ms;
  r.expected.insert(workers.begin(), workers.end());
}

std::vector<wire::ReseedRequest> Reseeder::RequestsFor(int worker) const {
  std::vector<wire::ReseedRequest> out;
  for (const auto& [server, r] : rounds_) {
    if (!r.expected.count(worker) || r.copies.count(worker)) continue;
    wire::ReseedRequest q;
    q.set_server(server);
    q.set_map_version(r.map_version);
    out.push_back(q);
  }
  return out;
}

Status Reseeder::AddCopy(Message msg) {
  if (!msg.header.has_seed_data()) return InvalidArgumentError("SEED_COPY without seed_data");
  const wire::SeedData& d = msg.header.seed_data();
  auto it = rounds_.find(d.server());
  if (it == rounds_.end() || it->second.map_version != d.map_version()) {
    return FailedPreconditionError("no re-seed of server " + std::to_string(d.server()) +
                                   " at map version " + std::to_string(d.map_version()) +
                                   " is in progress");
  }
  size_t frames = 0;
  for (const wire::SeedRange& r : d.ranges()) {
    if (r.end() <= r.begin()) return InvalidArgumentError("empty seed range");
    if (!r.has_copy()) continue;
    if (r.slots() > 1 || (r.slots() == 1 && r.change_only())) {
      return InvalidArgumentError("SEED_COPY: at most one optimizer slot, and none with a "
                                  "change-only copy");
    }
    const size_t bytes = (r.end() - r.begin()) * sizeof(float);
    const size_t need = 2 + r.slots();
    for (size_t k = 0; k < need; ++k) {
      if (frames + k >= msg.frames.size() || msg.frames[frames + k].size() != bytes) {
        return InvalidArgumentError("SEED_COPY frames do not match its ranges");
      }
    }
    frames += need;
  }
  for (const wire::SeedRows& r : d.rows()) {
    if (r.count() == 0) continue;
    if (frames + 2 > msg.frames.size() || msg.frames[frames].size() != r.count() * sizeof(uint64_t) ||
        msg.frames[frames + 1].size() % (r.count() * sizeof(float)) != 0) {
      return InvalidArgumentError("SEED_COPY row frames do not match its rows of '" + r.table() + "'");
    }
    frames += 2;
  }
  if (frames != msg.frames.size()) {
    return InvalidArgumentError("SEED_COPY has " + std::to_string(msg.frames.size()) +
                                " frames, its ranges and rows need " + std::to_string(frames));
  }
  const int worker = d.worker();
  it->second.copies[worker] = std::move(msg);
  return Status::OK();
}

std::vector<int> Reseeder::Ready(const std::vector<int>& live, int64_t now_ms) const {
  std::vector<int> out;
  for (const auto& [server, r] : rounds_) {
    bool all = true;
    for (int w : live) {
      if (r.expected.count(w) && !r.copies.count(w)) all = false;
    }
    if (all || now_ms - r.started_ms >= options_.timeout_ms) out.push_back(server);
  }
  return out;
}

StatusOr<Message> Reseeder::Finish(int server, const wire::ShardMap& map,
                                   ReseedSummary* summary) {
  auto it = rounds_.find(server);
  CHECK(it != rounds_.end()) << "no re-seed round for server " << server;
  Round round = std::move(it->second);
  rounds_.erase(it);
  *summary = ReseedSummary();
  summary->server = server;
  summary->source = "initializer";
  for (int w : round.expected) summary->missing_workers += round.copies.count(w) ? 0 : 1;

  Message seed;
  seed.header.set_type(wire::SEED);
  wire::SeedData* out = seed.header.mutable_seed_data();
  out->set_server(server);
  out->set_map_version(round.map_version);
  for (const wire::TableShards& ts : map.tables()) {
    if (ts.table().type() != static_cast<int>(TableType::kDense)) continue;
    for (const wire::DenseRange& range : ts.ranges()) {
      if (range.server() != server) continue;
      const size_t n = range.end() - range.begin();
      std::vector<WorkerCopy> copies;
      // Frames need not be float-aligned: unaligned ones are read from copies.
      std::vector<std::vector<float>> scratch(3 * round.copies.size());
      for (const auto& [worker, msg] : round.copies) {
        const wire::SeedData& d = msg.header.seed_data();
        size_t frame = 0;
        for (const wire::SeedRange& r : d.ranges()) {
          if (r.table() == ts.table().name() && r.begin() == range.begin() &&
              r.end() == range.end() && r.has_copy()) {
            std::vector<float>* tmp = &scratch[3 * copies.size()];
            ASSIGN_OR_RETURN(const float* params,
                             DecodeFloats(msg.frames[frame], n, wire::ENC_FP32, tmp));
            ASSIGN_OR_RETURN(const float* delta,
                             DecodeFloats(msg.frames[frame + 1], n, wire::ENC_FP32, tmp + 1));
            const float* velocity = nullptr;
            if (r.slots() == 1) {
              ASSIGN_OR_RETURN(velocity,
                               DecodeFloats(msg.frames[frame + 2], n, wire::ENC_FP32, tmp + 2));
            }
            copies.push_back(WorkerCopy{worker, d.worker_clock(), r.clock(), r.local_steps(),
                                        params, delta, r.change_only(), velocity});
            break;
          }
          if (r.has_copy()) frame += 2 + r.slots();
        }
      }
      wire::SeedRange* sr = out->add_ranges();
      sr->set_table(ts.table().name());
      sr->set_begin(range.begin());
      sr->set_end(range.end());
      if (copies.empty()) continue;  // No worker held it: the initializer's values stay.
      const bool any_base = std::any_of(copies.begin(), copies.end(),
                                        [](const WorkerCopy& c) { return !c.change_only; });
      if (!any_base) {
        // Only changes made on the initializer's values: added on top of what
        // the server loaded (its checkpoint or the initializer).
        std::vector<double> weights;
        ASSIGN_OR_RETURN(std::vector<float> sum,
                         MergeChanges(copies, n, options_.merge_rule, &weights));
        sr->set_has_copy(true);
        sr->set_change_only(true);
        for (const WorkerCopy& c : copies) sr->set_clock(std::max(sr->clock(), c.clock));
        seed.frames.push_back(Frame::Copy(sum.data(), n * sizeof(float)));
        summary->changes_only += 1;
        for (size_t i = 0; i < copies.size(); ++i) {
          auto& c = summary->contributions[copies[i].worker];
          c.first = std::max(c.first, copies[i].local_steps);
          c.second = weights[i];
        }
        continue;
      }
      ASSIGN_OR_RETURN(MergeResult merged,
                       MergeCopies(copies, n, options_.seed_rule, options_.merge_rule));
      sr->set_has_copy(true);
      sr->set_clock(merged.clock);
      seed.frames.push_back(Frame::Copy(merged.params.data(), n * sizeof(float)));
      if (!merged.velocity.empty()) {
        sr->set_slots(1);
        seed.frames.push_back(Frame::Copy(merged.velocity.data(), n * sizeof(float)));
        summary->velocities += 1;
      }
      summary->clock = std::max(summary->clock, merged.clock);
      summary->seed_worker = merged.seed_worker;
      summary->source = options_.seed_rule == SeedRule::kFreshest
                            ? "worker:" + std::to_string(merged.seed_worker)
                            : std::string("average");
      for (size_t i = 0; i < copies.size(); ++i) {
        auto& c = summary->contributions[copies[i].worker];
        c.first = std::max(c.first, copies[i].local_steps);
        c.second = merged.change_weights[i];
      }
    }
  }
  RETURN_IF_ERROR(MergeRows(round, map, &seed, summary));
  return seed;
}

Status Reseeder::MergeRows(const Round& round, const wire::ShardMap& map, Message* seed,
                           ReseedSummary* summary) const {
  wire::SeedData* out = seed->header.mutable_seed_data();
  for (const wire::TableShards& ts : map.tables()) {
    if (ts.table().type() != static_cast<int>(TableType::kSparse)) continue;
    const size_t width = ts.table().row_width();
    // Each worker's pending changes to this table's rows, and its weight.
    std::vector<WorkerCopy> workers;
    std::vector<std::pair<const Frame*, const Frame*>> changes;
    for (const auto& [worker, msg] : round.copies) {
      const wire::SeedData& d = msg.header.seed_data();
      size_t frame = 0;
      for (const wire::SeedRange& r : d.ranges()) frame += r.has_copy() ? 2 + r.slots() : 0;
      for (const wire::SeedRows& r : d.rows()) {
        if (r.count() == 0) continue;
        if (r.table() == ts.table().name()) {
          if (msg.frames[frame].size() != r.count() * sizeof(uint64_t) ||
              msg.frames[frame + 1].size() != r.count() * width * sizeof(float)) {
            return InvalidArgumentError("worker " + std::to_string(worker) + " sent rows of '" +
                                        r.table() + "' of the wrong count or width");
          }
          workers.push_back(WorkerCopy{worker, d.worker_clock(), r.base_clock(), r.local_steps(),
                                       nullptr, nullptr});
          changes.emplace_back(&msg.frames[frame], &msg.frames[frame + 1]);
        }
        frame += 2;
      }
    }
    // Hybrid: the buckets `server` holds alone get the changes and head
    // their chains once seeded (sent even without changes).
    std::vector<int> held;
    for (int b = 0; b < ts.buckets_size(); ++b) {
      const wire::SparseBucket& bucket = ts.buckets(b);
      if (bucket.chain_size() > 0 && bucket.server() == out->server()) held.push_back(b);
    }
    if (workers.empty() && held.empty()) continue;
    wire::SeedRows* sr = out->add_rows();
    sr->set_table(ts.table().name());
    for (int b : held) sr->add_buckets(b);
    summary->buckets += static_cast<int64_t>(held.size());
    if (workers.empty()) continue;
    const std::vector<double> a = ChangeWeights(workers, options_.merge_rule);
    std::map<uint64_t, std::vector<float>> merged;  // Sorted: deterministic SEED.
    std::vector<uint64_t> row_ids;  // Frames need not be aligned: copied.
    std::vector<float> scratch;
    for (size_t w = 0; w < workers.size(); ++w) {
      const size_t n = changes[w].first->size() / sizeof(uint64_t);
      row_ids.resize(n);
      if (n > 0) std::memcpy(row_ids.data(), changes[w].first->data(), n * sizeof(uint64_t));
      const uint64_t* ids = row_ids.data();
      ASSIGN_OR_RETURN(const float* delta,
                       DecodeFloats(*changes[w].second, n * width, wire::ENC_FP32, &scratch));
      for (size_t i = 0; i < n; ++i) {
        std::vector<float>& row = merged[ids[i]];
        row.resize(width, 0.0f);
        for (size_t j = 0; j < width; ++j) row[j] += static_cast<float>(a[w]) * delta[i * width + j];
      }
      auto& c = summary->contributions[workers[w].worker];
      c.first = std::max(c.first, workers[w].local_steps);
      if (c.second == 0) c.second = a[w];
    }
    sr->set_count(merged.size());
    std::vector<uint64_t> ids;
    std::vector<float> values;
    for (const auto& [id, row] : merged) {
      ids.push_back(id);
      values.insert(values.end(), row.begin(), row.end());
    }
    seed->frames.push_back(Frame::Copy(ids.data(), ids.size() * sizeof(uint64_t)));
    seed->frames.push_back(Frame::Copy(values.data(), values.size() * sizeof(float)));
    summary->rows += static_cast<int64_t>(merged.size());
  }
  return Status::OK();
}

}  // namespace relaxps
