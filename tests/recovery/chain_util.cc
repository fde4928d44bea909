#include "tests/recovery/chain_util.h"

#include <algorithm>
#include <chrono>
#include <regex>
#include <sstream>

#include "common/wire.h"

namespace relaxps {
namespace test {

namespace {

// The lines of `relaxps-ctl status` matching `line` (two numbers, then a
// chain) as ChainRanges.
std::vector<ChainRange> ParseChains(RecoveryCluster* cluster, const std::regex& line) {
  std::vector<ChainRange> out;
  StatusOr<CommandResult> st = cluster->Ctl({"status"});
  if (!st.ok() || st->exit_status != 0) return out;
  const std::regex num(R"(\d+)");
  std::istringstream in(st->output);
  std::string l;
  while (std::getline(in, l)) {
    std::smatch m;
    if (!std::regex_search(l, m, line)) continue;
    ChainRange r;
    r.begin = std::stoull(m[1]);
    r.end = std::stoull(m[2]);
    const std::string chain = m[3];
    for (auto it = std::sregex_iterator(chain.begin(), chain.end(), num);
         it != std::sregex_iterator(); ++it) {
      r.chain.push_back(std::stoi(it->str()));
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace

std::vector<ChainRange> Chains(RecoveryCluster* cluster, const std::string& table) {
  return ParseChains(cluster, std::regex("shard " + table +
                                         R"( \[(\d+), (\d+)\) -> server \d+ chain ([0-9 >-]+))"));
}

std::vector<ChainRange> BucketChains(RecoveryCluster* cluster, const std::string& table) {
  return ParseChains(cluster, std::regex("bucket " + table +
                                         R"( #(\d+) of (\d+) -> server \d+ chain ([0-9 >-]+))"));
}

StatusOr<std::vector<float>> WhenInSync(
    const std::function<StatusOr<std::vector<float>>()>& read) {
  const int64_t until = RealClock()->NowMs() + 10000 * TimeScale();
  StatusOr<std::vector<float>> got = read();
  while (!got.ok() && got.status().code() == StatusCode::kUnavailable && RealClock()->NowMs() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    got = read();
  }
  return got;
}

bool WaitForChains(RecoveryCluster* cluster, const std::string& table, int gone,
                   size_t replicas, int timeout_ms) {
  const int64_t until = RealClock()->NowMs() + int64_t{timeout_ms} * TimeScale();
  while (RealClock()->NowMs() < until) {
    std::vector<ChainRange> ranges = Chains(cluster, table);
    bool ok = !ranges.empty();
    for (const ChainRange& r : ranges) {
      ok = ok && (gone >= 0 ? std::find(r.chain.begin(), r.chain.end(), gone) == r.chain.end()
                            : r.chain.size() == replicas);
    }
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace test
}  // namespace relaxps
