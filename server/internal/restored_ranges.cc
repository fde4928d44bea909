// Dense ranges assembled from a restored checkpoint's shards
// (restored_ranges.h).
#include "server/internal/restored_ranges.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <glog/logging.h>

namespace relaxps {
namespace server_internal {

namespace {

std::string Keys(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// Keys of [begin, end) not in any of `covered` (sorted, disjoint).
std::vector<std::pair<uint64_t, uint64_t>> Gaps(
    uint64_t begin, uint64_t end, const std::vector<std::pair<uint64_t, uint64_t>>& covered) {
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  uint64_t at = begin;
  for (const auto& [b, e] : covered) {
    if (b > at) gaps.emplace_back(at, b);
    at = std::max(at, e);
  }
  if (at < end) gaps.emplace_back(at, end);
  return gaps;
}

}  // namespace

Status AssembleRestoredRange(ParamStore* store, const std::string& table,
                             const DenseShardSpec& target) {
  // The restored shards of the table overlapping the target, newest first.
  std::vector<DenseShard*> sources;
  bool table_restored = false;
  for (const std::string& name : store->Tables()) {
    if (name == target.table || (name != table && name.rfind(table + "@", 0) != 0)) continue;
    DenseShard* shard = store->GetDense(name);
    if (shard == nullptr) continue;  // A sparse table of that name, or unreadable (logged).
    table_restored = true;
    if (shard->spec.begin < target.end && target.begin < shard->spec.end) {
      sources.push_back(shard);
    }
  }
  if (!table_restored) return Status::OK();
  std::stable_sort(sources.begin(), sources.end(), [](const DenseShard* a, const DenseShard* b) {
    return a->clock > b->clock;
  });
  // Which part of the target each source gives: what no newer one gave.
  struct Part {
    const DenseShard* from;
    uint64_t begin, end;
  };
  std::vector<Part> parts;
  std::vector<std::pair<uint64_t, uint64_t>> covered;
  for (const DenseShard* s : sources) {
    const uint64_t b = std::max(s->spec.begin, target.begin);
    const uint64_t e = std::min(s->spec.end, target.end);
    std::sort(covered.begin(), covered.end());
    for (const auto& [gb, ge] : Gaps(b, e, covered)) parts.push_back({s, gb, ge});
    covered.emplace_back(b, e);
  }
  std::sort(covered.begin(), covered.end());
  const auto gaps = Gaps(target.begin, target.end, covered);
  const std::string what = "table '" + table + "' keys " + Keys(target.begin, target.end);
  if (!gaps.empty()) {
    std::string missing;
    for (const auto& [b, e] : gaps) missing += (missing.empty() ? "" : ", ") + Keys(b, e);
    return FailedPreconditionError(
        "the restored checkpoint was taken before a range move: the map gives this server " +
        what + ", but its part of the checkpoint lacks keys " + missing +
        " (another server held them when it was taken, and a server restores only its own "
        "part); restore a checkpoint taken after the move");
  }
  const DenseShard* first = parts.front().from;
  for (const Part& p : parts) {
    const DenseShard* s = p.from;
    if (s->spec.num_slots != target.num_slots) {
      return FailedPreconditionError("the restored checkpoint's store shard '" + s->spec.table +
                                     "' has " + std::to_string(s->spec.num_slots) +
                                     " slot(s), the map's " + what + " needs " +
                                     std::to_string(target.num_slots));
    }
    if (s->step != first->step || s->clock != first->clock) {
      return FailedPreconditionError(
          "the restored checkpoint was taken before a range move, and the map's " + what +
          " spans its store shards '" + first->spec.table + "' (step " +
          std::to_string(first->step) + ", clock " + std::to_string(first->clock) + ") and '" +
          s->spec.table + "' (step " + std::to_string(s->step) + ", clock " +
          std::to_string(s->clock) +
          "), whose optimizer states cannot be joined; restore a checkpoint taken after the move");
    }
  }
  ASSIGN_OR_RETURN(DenseShard * shard, store->CreateDense(target));
  store->BeforeDenseWrite(shard);
  for (const Part& p : parts) {
    for (int slot = 0; slot < target.num_slots; ++slot) {
      std::memcpy(shard->slots[slot] + (p.begin - target.begin),
                  p.from->slots[slot] + (p.begin - p.from->spec.begin),
                  (p.end - p.begin) * sizeof(float));
    }
  }
  shard->step = first->step;
  shard->clock = first->clock;
  RETURN_IF_ERROR(store->DenseUpdated(shard, 0, shard->size()));
  std::string from;
  for (const Part& p : parts) {
    from += (from.empty() ? "" : ", ") + Keys(p.begin, p.end) + " from '" + p.from->spec.table + "'";
  }
  LOG(INFO) << "the restored checkpoint was taken before a range move: " << what
            << " assembled from its store shards (" << from << "; step " << shard->step
            << ", clock " << shard->clock << ")";
  return Status::OK();
}

}  // namespace server_internal
}  // namespace relaxps
