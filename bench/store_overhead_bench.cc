// relaxps-bench-store: what durability costs the data path. One in-process
// coordinator, one server and one client; the client runs PushPull of a
// whole dense table (sgd) followed by Clock() in a closed loop for
// --seconds per configuration:
//   memory             MemoryStore (no durability; the baseline)
//   rocksdb/flush1     RocksDbStore, Flush after every clock
//   rocksdb/flush10    RocksDbStore, Flush every 10 clocks (the default)
//   rocksdb/noflush    RocksDbStore, Flush only at exit
// The configurations are interleaved for --reps rounds and the best round of
// each is kept, so machine noise hits all of them alike.
//
// Prints one JSON object: {"bench":"store_overhead","mb":..,"results":[{"name":
//   "rocksdb/flush1","iters_per_s":..,"gb_per_s":..,"ratio_to_memory":..},...]}
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "coordinator/coordinator.h"
#include "server/server.h"

DEFINE_double(mb, 16, "Dense table size in MiB");
DEFINE_double(seconds, 3, "Measuring time per configuration and round");
DEFINE_int32(reps, 3, "Rounds (best kept)");
DEFINE_string(dir, "", "Scratch directory for RocksDB (default: $TMPDIR or /tmp)");

namespace relaxps {
namespace {

struct Config {
  std::string name;
  std::string store;
  int flush_every_clocks;
};

double RunOnce(const Config& cfg, const std::string& data_dir, uint64_t n) {
  std::filesystem::remove_all(data_dir);
  CoordinatorOptions co;
  co.consistency = "async";
  auto coordinator = Coordinator::Start(co);
  CHECK(coordinator.ok()) << coordinator.status();
  std::thread ct([&] { (*coordinator)->Run(); });
  ServerOptions so;
  so.coordinator = (*coordinator)->endpoint();
  so.store.kind = cfg.store;
  so.store.data_dir = data_dir;
  so.flush_every_clocks = cfg.flush_every_clocks;
  auto server = Server::Start(so);
  CHECK(server.ok()) << server.status();
  std::thread st([&] { (*server)->Run().IgnoreError(); });
  double iters_per_s = 0;
  {
    ClientOptions o;
    o.coordinator = (*coordinator)->endpoint();
    o.request_timeout_ms = 60000;
    auto client = Client::Connect(o);
    CHECK(client.ok()) << client.status();
    TableOptions t;
    t.name = "w";
    t.size = n;
    t.optimizer.name = "sgd";
    t.optimizer.lr = 0.01f;
    CHECK((*client)->CreateTable(t).ok());
    FloatBuffer g(n), out(n);
    for (uint64_t i = 0; i < n; ++i) g[i] = 0.001f * static_cast<float>(i % 7);
    // Warm-up.
    for (int i = 0; i < 3; ++i) {
      CHECK((*client)->PushPull("w", 0, g, out).get().ok());
      CHECK((*client)->Clock().ok());
    }
    const auto start = std::chrono::steady_clock::now();
    int iters = 0;
    double elapsed = 0;
    while (elapsed < FLAGS_seconds) {
      Status s = (*client)->PushPull("w", 0, g, out).get();
      CHECK(s.ok()) << s;
      CHECK((*client)->Clock().ok());
      ++iters;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    iters_per_s = iters / elapsed;
  }
  (*server)->Stop();
  st.join();
  server->reset();  // Closes the store: waits for its background flush.
  (*coordinator)->Stop();
  ct.join();
  std::filesystem::remove_all(data_dir);
  return iters_per_s;
}

}  // namespace
}  // namespace relaxps

int main(int argc, char** argv) {
  gflags::SetUsageMessage("Dense PushPull+Clock throughput: memory vs RocksDB store flush modes.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_minloglevel = 1;
  using relaxps::Config;
  std::string root = FLAGS_dir;
  if (root.empty()) root = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  root += "/relaxps-store-bench." + std::to_string(getpid());
  const uint64_t n = static_cast<uint64_t>(FLAGS_mb * (1 << 20) / sizeof(float));
  const std::vector<Config> configs = {{"memory", "memory", 0},
                                       {"rocksdb/flush1", "rocksdb", 1},
                                       {"rocksdb/flush10", "rocksdb", 10},
                                       {"rocksdb/noflush", "rocksdb", 0}};
  std::map<std::string, double> best;
  for (int rep = 0; rep < FLAGS_reps; ++rep) {
    for (const Config& c : configs) {
      const double v = relaxps::RunOnce(c, root + "/db", n);
      best[c.name] = std::max(best[c.name], v);
      std::fprintf(stderr, "rep %d %-16s %.2f iters/s\n", rep, c.name.c_str(), v);
    }
  }
  std::filesystem::remove_all(root);
  std::printf("{\"bench\":\"store_overhead\",\"mb\":%.1f,\"results\":[", FLAGS_mb);
  for (size_t i = 0; i < configs.size(); ++i) {
    const double v = best[configs[i].name];
    std::printf("%s{\"name\":\"%s\",\"iters_per_s\":%.3f,\"gb_per_s\":%.3f,\"ratio_to_memory\":%.3f}",
                i ? "," : "", configs[i].name.c_str(), v, v * 2 * n * 4 / 1e9, v / best["memory"]);
  }
  std::printf("]}\n");
  return 0;
}
