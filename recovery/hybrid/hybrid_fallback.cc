#include "recovery/hybrid/hybrid_fallback.h"

#include <algorithm>

namespace relaxps {
namespace {

// Calls fn(chain_owner, stranded_range_template) for every dense range and
// sparse bucket of `map`: both carry `server` (the head) and `chain`.
template <typename Map, typename Fn>
void ForEachChain(Map* map, Fn fn) {
  for (auto& ts : *map->mutable_tables()) {
    for (auto& r : *ts.mutable_ranges()) {
      fn(&r, StrandedRange{ts.table().name(), r.begin(), r.end(), -1});
    }
    for (int b = 0; b < ts.buckets_size(); ++b) {
      fn(ts.mutable_buckets(b), StrandedRange{ts.table().name(), 0, 0, b});
    }
  }
}

// The same, read-only.
template <typename Fn>
void ForEachChainOf(const wire::ShardMap& map, Fn fn) {
  for (const auto& ts : map.tables()) {
    for (const auto& r : ts.ranges()) fn(r, StrandedRange{ts.table().name(), r.begin(), r.end(), -1});
    for (int b = 0; b < ts.buckets_size(); ++b) {
      fn(ts.buckets(b), StrandedRange{ts.table().name(), 0, 0, b});
    }
  }
}

}  // namespace

SpliceResult SpliceOrStrand(wire::ShardMap* map, int server, const std::set<int>& syncing) {
  SpliceResult out;
  ForEachChain(map, [&](auto* r, const StrandedRange& where) {
    auto* chain = r->mutable_chain();
    auto it = std::find(chain->begin(), chain->end(), server);
    if (it == chain->end()) return;
    const bool other_with_state = std::any_of(chain->begin(), chain->end(), [&](int c) {
      return c != server && !syncing.count(c);
    });
    if (!other_with_state) {
      if (chain->size() > 1) {
        chain->Clear();
        chain->Add(server);
        r->set_server(server);
        ++out.changed;
      }
      out.stranded.push_back(where);
      return;
    }
    chain->erase(it);
    r->set_server(r->chain(0));
    ++out.changed;
  });
  return out;
}

std::vector<StrandedRange> RangesHeldAlone(const wire::ShardMap& map, int server) {
  std::vector<StrandedRange> out;
  ForEachChainOf(map, [&](const auto& r, const StrandedRange& where) {
    if (r.chain_size() == 1 && r.chain(0) == server) out.push_back(where);
  });
  return out;
}

std::vector<StrandedRange> MoveStranded(wire::ShardMap* map, int holder, int spare) {
  std::vector<StrandedRange> out;
  ForEachChain(map, [&](auto* r, const StrandedRange& where) {
    if (r->chain_size() != 1 || r->chain(0) != holder) return;
    r->set_chain(0, spare);
    r->set_server(spare);
    out.push_back(where);
  });
  return out;
}

int LeaveStrandedChains(wire::ShardMap* map, int server, const std::set<int>& stranded_holders) {
  int left = 0;
  ForEachChain(map, [&](auto* r, const StrandedRange&) {
    if (r->chain_size() < 2 || r->chain(0) == server || !stranded_holders.count(r->chain(0))) {
      return;
    }
    auto* chain = r->mutable_chain();
    auto it = std::find(chain->begin() + 1, chain->end(), server);
    if (it == chain->end()) return;
    chain->erase(it);
    ++left;
  });
  return left;
}

int PickStrandedForSpare(const std::map<int, int64_t>& stranded_at, const std::set<int>& busy,
                         int spare, int64_t now_ms, int64_t grace_ms) {
  int best = -1;
  for (const auto& [holder, since] : stranded_at) {
    if (holder == spare || busy.count(holder) || now_ms - since < grace_ms) continue;
    if (best < 0 || since < stranded_at.at(best)) best = holder;
  }
  return best;
}

std::string DescribeRanges(const std::vector<StrandedRange>& ranges) {
  std::string s;
  for (const StrandedRange& r : ranges) {
    if (!s.empty()) s += ";";
    s += r.bucket >= 0 ? r.table + "#" + std::to_string(r.bucket)
                       : r.table + "[" + std::to_string(r.begin) + "," + std::to_string(r.end) + ")";
  }
  return s.empty() ? "none" : s;
}

}  // namespace relaxps
