#include "recovery/hybrid_fallback.h"

#include <algorithm>

namespace relaxps {

SpliceResult SpliceOrStrand(wire::ShardMap* map, int server, const std::set<int>& syncing) {
  SpliceResult out;
  for (wire::TableShards& ts : *map->mutable_tables()) {
    for (wire::DenseRange& r : *ts.mutable_ranges()) {
      auto* chain = r.mutable_chain();
      auto it = std::find(chain->begin(), chain->end(), server);
      if (it == chain->end()) continue;
      const bool other_with_state = std::any_of(chain->begin(), chain->end(), [&](int c) {
        return c != server && !syncing.count(c);
      });
      if (!other_with_state) {
        if (chain->size() > 1) {
          chain->Clear();
          chain->Add(server);
          r.set_server(server);
          ++out.changed;
        }
        out.stranded.push_back(StrandedRange{ts.table().name(), r.begin(), r.end()});
        continue;
      }
      chain->erase(it);
      r.set_server(r.chain(0));
      ++out.changed;
    }
  }
  return out;
}

std::vector<StrandedRange> RangesHeldAlone(const wire::ShardMap& map, int server) {
  std::vector<StrandedRange> out;
  for (const wire::TableShards& ts : map.tables()) {
    for (const wire::DenseRange& r : ts.ranges()) {
      if (r.chain_size() == 1 && r.chain(0) == server) {
        out.push_back(StrandedRange{ts.table().name(), r.begin(), r.end()});
      }
    }
  }
  return out;
}

int LeaveStrandedChains(wire::ShardMap* map, int server, const std::set<int>& stranded_holders) {
  int left = 0;
  for (wire::TableShards& ts : *map->mutable_tables()) {
    for (wire::DenseRange& r : *ts.mutable_ranges()) {
      if (r.chain_size() < 2 || r.chain(0) == server || !stranded_holders.count(r.chain(0))) {
        continue;
      }
      auto* chain = r.mutable_chain();
      auto it = std::find(chain->begin() + 1, chain->end(), server);
      if (it == chain->end()) continue;
      chain->erase(it);
      ++left;
    }
  }
  return left;
}

std::string DescribeRanges(const std::vector<StrandedRange>& ranges) {
  std::string s;
  for (const StrandedRange& r : ranges) {
    if (!s.empty()) s += ";";
    s += r.table + "[" + std::to_string(r.begin) + "," + std::to_string(r.end) + ")";
  }
  return s.empty() ? "none" : s;
}

}  // namespace relaxps
