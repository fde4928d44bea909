// Chain replication through real processes (--recovery=chain --replicas=2 on
// 3 servers): workers push as fast as they can while servers are SIGKILLed
// and restarted; afterwards every replica of every range holds exactly the
// initial value minus every acknowledged push, once (SGD, lr 1, integer
// gradients: float sums are exact), and, under Adam, exactly what one
// process applying the same pushes in order computes, slots included.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/wire.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#include "tests/recovery/recovery_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kSize = 3 * 4096 + 1000;  // Three ranges, one per server.

std::vector<std::string> CoordinatorFlags() {
  return {"--recovery=chain", "--replicas=2", "--consistency=async",
          "--heartbeat_timeout_ms=1000"};
}

TableOptions Table(const std::string& optimizer, float init) {
  TableOptions t;
  t.name = "w";
  t.type = TableType::kDense;
  t.size = kSize;
  t.optimizer.name = optimizer;
  t.optimizer.lr = optimizer == "sgd" ? 1.0f : 0.01f;
  t.init.seed = 5;
  t.init.segments.push_back(InitSegment{0, kSize, InitKind::kConstant, init, 0.0f});
  return t;
}

// Integer gradient of push `k` by worker `w`: values in {-1, 0, 1, 2}.
FloatBuffer Gradient(int w, int k) {
  FloatBuffer g(kSize);
  for (uint64_t i = 0; i < kSize; ++i) g[i] = static_cast<float>((i * 3 + k + 7 * w) % 4) - 1.0f;
  return g;
}

struct Range {
  uint64_t begin, end;
  std::vector<int> chain;
};

// The chains of table "w" as relaxps-ctl status prints them.
std::vector<Range> Chains(RecoveryCluster* cluster) {
  std::vector<Range> out;
  StatusOr<CommandResult> st = cluster->Ctl({"status"});
  if (!st.ok()) return out;
  std::regex line(R"(shard w \[(\d+), (\d+)\) -> server \d+ chain ([0-9 >-]+))");
  std::istringstream in(st->output);
  std::string l;
  while (std::getline(in, l)) {
    std::smatch m;
    if (!std::regex_search(l, m, line)) continue;
    Range r{std::stoull(m[1]), std::stoull(m[2]), {}};
    std::regex num(R"(\d+)");
    const std::string chain = m[3];
    for (auto it = std::sregex_iterator(chain.begin(), chain.end(), num);
         it != std::sregex_iterator(); ++it) {
      r.chain.push_back(std::stoi(it->str()));
    }
    out.push_back(r);
  }
  return out;
}

// Waits until no chain holds server `gone` (gone >= 0), or until every chain
// has `replicas` replicas again (gone < 0).
bool WaitForChains(RecoveryCluster* cluster, int gone, size_t replicas, int timeout_ms) {
  const int64_t until = MonotonicMs() + timeout_ms;
  while (MonotonicMs() < until) {
    std::vector<Range> ranges = Chains(cluster);
    bool ok = !ranges.empty();
    for (const Range& r : ranges) {
      if (gone >= 0) {
        ok = ok && std::find(r.chain.begin(), r.chain.end(), gone) == r.chain.end();
      } else {
        ok = ok && r.chain.size() == replicas;
      }
    }
    if (ok) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Stops and joins pushing threads however the test ends.
class Pushers {
 public:
  ~Pushers() { Join(); }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  void Join() {
    stop = true;
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }
};

class ChainExactlyOnceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    ASSERT_OK_AND_ASSIGN(cluster_, RecoveryCluster::Start(dir_, 3, CoordinatorFlags()));
    for (int id = 0; id < 3; ++id) ASSERT_OK(cluster_->StartServer(id, ServerFlags()));
  }
  static std::vector<std::string> ServerFlags() { return {"--store=memory", "--heartbeat_ms=100"}; }

  // Kills server `id`, waits for the failover, restarts it and waits until
  // it is back in all its chains.
  void KillAndRestart(int id) {
    cluster_->server(id)->Kill(SIGKILL);
    ASSERT_TRUE(WaitForChains(cluster_.get(), id, 0, 10000)) << "no failover after killing " << id;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ASSERT_OK(cluster_->StartServer(id, ServerFlags()));
    ASSERT_TRUE(WaitForChains(cluster_.get(), -1, 2, 10000)) << "server " << id << " did not rejoin";
  }

  // Every slot of every range on every replica of its chain.
  void ExpectReplicas(int slots, const std::vector<std::vector<float>>& expected) {
    std::vector<Range> ranges = Chains(cluster_.get());
    ASSERT_FALSE(ranges.empty());
    for (const Range& r : ranges) {
      for (int server : r.chain) {
        for (int slot = 0; slot < slots; ++slot) {
          ASSERT_OK_AND_ASSIGN(std::vector<float> got,
                               ReadDenseSlot(cluster_->server_endpoint(server), "w", r.begin,
                                             r.end - r.begin, slot));
          for (uint64_t i = r.begin; i < r.end; ++i) {
            ASSERT_EQ(got[i - r.begin], expected[slot][i])
                << "server " << server << " slot " << slot << " key " << i;
          }
        }
      }
    }
  }

  std::string dir_;
  std::unique_ptr<RecoveryCluster> cluster_;
};

TEST_F(ChainExactlyOnceTest, SgdPushesAppliedExactlyOnceOnEveryReplica) {
  constexpr float kInit = 1000.0f;
  std::vector<std::unique_ptr<Client>> workers;
  for (int w = 0; w < 2; ++w) {
    ASSERT_OK_AND_ASSIGN(auto c, cluster_->Connect("worker"));
    workers.push_back(std::move(c));
  }
  ASSERT_OK(workers[0]->CreateTable(Table("sgd", kInit)));
  ASSERT_OK(workers[1]->CreateTable(Table("sgd", kInit)));
  std::vector<std::vector<double>> sums(2, std::vector<double>(kSize, 0.0));
  std::vector<int> pushes(2, 0);
  std::vector<Status> errors(2);
  Pushers pushers;
  for (int w = 0; w < 2; ++w) {
    pushers.threads.emplace_back([&, w] {
      for (int k = 0; !pushers.stop.load(); ++k) {
        FloatBuffer g = Gradient(w, k);
        // The client resends a lost push (same exactly-once key) until the
        // new head acknowledges it.
        Status s = workers[w]->Push("w", 0, g).get();
        if (!s.ok()) {
          errors[w] = s;
          return;
        }
        for (uint64_t i = 0; i < kSize; ++i) sums[w][i] += g[i];
        ++pushes[w];
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  KillAndRestart(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  cluster_->server(2)->Kill(SIGKILL);
  ASSERT_TRUE(WaitForChains(cluster_.get(), 2, 0, 10000));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  pushers.Join();
  for (int w = 0; w < 2; ++w) ASSERT_OK(errors[w]) << "worker " << w;
  LOG(INFO) << "pushes acknowledged: " << pushes[0] << " + " << pushes[1];
  ASSERT_GT(pushes[0] + pushes[1], 20);
  std::vector<std::vector<float>> expected(1, std::vector<float>(kSize));
  for (uint64_t i = 0; i < kSize; ++i) {
    const double v = kInit - sums[0][i] - sums[1][i];
    ASSERT_LT(std::abs(v), 1 << 24);
    expected[0][i] = static_cast<float>(v);
  }
  ExpectReplicas(1, expected);
}

TEST_F(ChainExactlyOnceTest, AdamSlotsIdenticalToOneProcessAfterFailover) {
  ASSERT_OK_AND_ASSIGN(auto worker, cluster_->Connect("worker"));
  const TableOptions table = Table("adam", 0.5f);
  ASSERT_OK(worker->CreateTable(table));
  std::vector<FloatBuffer> applied;  // Acknowledged pushes, in order.
  Status error;
  Pushers pushers;
  pushers.threads.emplace_back([&] {
    for (int k = 0; !pushers.stop.load(); ++k) {
      FloatBuffer g = Gradient(0, k);
      Status s = worker->Push("w", 0, g).get();
      if (!s.ok()) {
        error = s;
        return;
      }
      applied.push_back(g);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  KillAndRestart(0);  // The head of range 0 dies mid-stream.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  pushers.Join();
  ASSERT_OK(error);
  ASSERT_GT(applied.size(), 10u);
  // One process applying the same pushes in order on the CPU device.
  ASSERT_OK_AND_ASSIGN(auto device, kernels::NewDevice(kernels::DeviceOptions()));
  ASSERT_OK_AND_ASSIGN(auto adam, kernels::NewOptimizer(table.optimizer));
  std::vector<std::vector<float>> expected(3, std::vector<float>(kSize, 0.0f));
  expected[0].assign(kSize, 0.5f);
  // Range by range, as the servers apply it (same vector loop boundaries).
  for (const Range& r : Chains(cluster_.get())) {
    std::vector<float*> state = {expected[1].data() + r.begin, expected[2].data() + r.begin};
    for (size_t t = 0; t < applied.size(); ++t) {
      adam->Apply(device.get(), expected[0].data() + r.begin, state.data(),
                  applied[t].data() + r.begin, r.end - r.begin, static_cast<int64_t>(t + 1),
                  1.0f);
    }
  }
  ExpectReplicas(3, expected);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
