#include "recovery/seed_merge.h"

#include <algorithm>

namespace relaxps {

StatusOr<SeedRule> ParseSeedRule(const std::string& name) {
  if (name == "freshest") return SeedRule::kFreshest;
  if (name == "average") return SeedRule::kWeightedAverage;
  return InvalidArgumentError("unknown seed rule '" + name + "' (expected freshest or average)");
}

const char* SeedRuleName(SeedRule rule) {
  return rule == SeedRule::kFreshest ? "freshest" : "average";
}

StatusOr<MergeRule> ParseMergeRule(const std::string& name) {
  if (name == "staleness") return MergeRule::kStaleness;
  if (name == "average") return MergeRule::kAverage;
  if (name == "sum") return MergeRule::kSum;
  return InvalidArgumentError("unknown merge rule '" + name +
                              "' (expected staleness, average or sum)");
}

const char* MergeRuleName(MergeRule rule) {
  switch (rule) {
    case MergeRule::kStaleness:
      return "staleness";
    case MergeRule::kAverage:
      return "average";
    case MergeRule::kSum:
      return "sum";
  }
  return "?";
}

namespace {

// Index of the freshest copy: a real copy before a change-only one, then
// highest clock, then most local steps, then lowest worker id.
size_t Freshest(const std::vector<WorkerCopy>& copies) {
  size_t best = 0;
  for (size_t i = 1; i < copies.size(); ++i) {
    const WorkerCopy& a = copies[i];
    const WorkerCopy& b = copies[best];
    if (a.change_only != b.change_only ? !a.change_only
        : a.clock != b.clock ? a.clock > b.clock
                           : a.local_steps != b.local_steps ? a.local_steps > b.local_steps
                                                            : a.worker < b.worker) {
      best = i;
    }
  }
  return best;
}

}  // namespace

std::vector<double> ChangeWeights(const std::vector<WorkerCopy>& copies, MergeRule merge_rule) {
  const size_t k = copies.size();
  std::vector<double> a(k, 0.0);
  if (k == 0) return a;
  const size_t s = Freshest(copies);
  for (size_t i = 0; i < k; ++i) {
    switch (merge_rule) {
      case MergeRule::kStaleness: {
        const int64_t staleness = copies[s].clock - copies[i].base_clock;
        a[i] = i == s ? 1.0 : 1.0 / static_cast<double>(std::max<int64_t>(1, staleness));
        break;
      }
      case MergeRule::kAverage:
        a[i] = 1.0 / static_cast<double>(k);
        break;
      case MergeRule::kSum:
        a[i] = 1.0;
        break;
    }
  }
  return a;
}

StatusOr<MergeResult> MergeCopies(const std::vector<WorkerCopy>& copies, size_t n,
                                  SeedRule seed_rule, MergeRule merge_rule) {
  if (copies.empty()) return InvalidArgumentError("no worker copy to merge");
  for (const WorkerCopy& c : copies) {
    if (c.params == nullptr || c.delta == nullptr) {
      return InvalidArgumentError("copy of worker " + std::to_string(c.worker) +
                                  " has no parameters or change");
    }
  }
  const size_t k = copies.size();
  const size_t s = Freshest(copies);
  if (copies[s].change_only) {
    return InvalidArgumentError("every copy is change-only: no base to seed from");
  }
  MergeResult r;
  r.seed_worker = copies[s].worker;
  r.clock = copies[s].clock;
  r.seed_weights.assign(k, 0.0);

  if (seed_rule == SeedRule::kFreshest) {
    r.seed_weights[s] = 1.0;
  } else {
    double total = 0;
    for (size_t i = 0; i < k; ++i) {
      if (copies[i].change_only) continue;
      r.seed_weights[i] = 1.0 / static_cast<double>(1 + r.clock - copies[i].clock);
      total += r.seed_weights[i];
    }
    for (double& e : r.seed_weights) e /= total;
  }
  r.change_weights = ChangeWeights(copies, merge_rule);

  // x = sum e_w x_w + sum (a_w - e_w) d_w, in worker order; a single seed
  // copy is taken as is.
  if (seed_rule == SeedRule::kFreshest) {
    r.params.assign(copies[s].params, copies[s].params + n);
  } else {
    r.params.assign(n, 0.0f);
    for (size_t i = 0; i < k; ++i) {
      if (copies[i].change_only) continue;
      const float e = static_cast<float>(r.seed_weights[i]);
      for (size_t j = 0; j < n; ++j) r.params[j] += e * copies[i].params[j];
    }
  }
  for (size_t i = 0; i < k; ++i) {
    const float a = static_cast<float>(r.change_weights[i] - r.seed_weights[i]);
    if (a == 0.0f) continue;
    for (size_t j = 0; j < n; ++j) r.params[j] += a * copies[i].delta[j];
  }
  for (const WorkerCopy& c : copies) r.clock = std::max(r.clock, c.clock);
  bool velocities = true;
  for (size_t i = 0; i < k; ++i) velocities &= r.seed_weights[i] == 0 || copies[i].velocity;
  if (velocities) {
    r.velocity.assign(n, 0.0f);
    for (size_t i = 0; i < k; ++i) {
      if (r.seed_weights[i] == 0) continue;
      const float e = static_cast<float>(r.seed_weights[i]);
      for (size_t j = 0; j < n; ++j) r.velocity[j] += e * copies[i].velocity[j];
    }
  }
  return r;
}

StatusOr<std::vector<float>> MergeChanges(const std::vector<WorkerCopy>& copies, size_t n,
                                          MergeRule merge_rule, std::vector<double>* weights) {
  if (copies.empty()) return InvalidArgumentError("no worker change to merge");
  for (const WorkerCopy& c : copies) {
    if (c.delta == nullptr) {
      return InvalidArgumentError("copy of worker " + std::to_string(c.worker) + " has no change");
    }
  }
  *weights = ChangeWeights(copies, merge_rule);
  std::vector<float> sum(n, 0.0f);
  for (size_t i = 0; i < copies.size(); ++i) {
    const float a = static_cast<float>((*weights)[i]);
    for (size_t j = 0; j < n; ++j) sum[j] += a * copies[i].delta[j];
  }
  return sum;
}

}  // namespace relaxps
