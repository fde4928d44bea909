// relaxps-bench-wal: what WAL group commit buys under --wal_per_update. One
// in-process coordinator, one RocksDB server with wal_per_update (no
// periodic flush) and --workers clients, each keeping --in_flight pushes
// outstanding for --seconds:
//   dense: Push of --dense_bytes to a dense table;
//   rows:  PushRows of --rows rows of width --row_width (fresh ids).
// Each is measured with group commit (one WAL sync per batch of received
// requests, then the batch's acknowledgements) and with one sync per update
// (the yardstick), interleaved over --reps rounds; the median of the
// per-round ratios is reported. Every push is acknowledged only once
// durable in both modes.
//
// Each figure also carries the process's CPU time per push in each mode
// (cpu_us_per_push, yardstick_cpu_us_per_push; medians over the rounds): the
// work a push costs, which machine load disturbs less than pushes/s.
//
// Prints one JSON object: {"bench":"wal","results":[{"name":
//   "wal/group_commit/dense_4KiB/w2/if8/pushes_per_s","value":..,"yardstick":
//   "wal/sync_per_push/dense_4KiB/w2/if8/pushes_per_s","yardstick_value":..,
//   "ratio":..,"better":"higher","cpu_us_per_push":..,
//   "yardstick_cpu_us_per_push":..},...]}
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "coordinator/coordinator.h"
#include "server/server.h"
#include "common/flag_help.h"

DEFINE_int32(workers, 2, "Clients pushing concurrently");
DEFINE_int32(in_flight, 8, "Pushes each client keeps outstanding");
DEFINE_int32(dense_bytes, 4096, "Bytes per dense push");
DEFINE_int32(rows, 16, "Rows per PushRows");
DEFINE_int32(row_width, 16, "Floats per row");
DEFINE_double(seconds, 2, "Measuring time per mode and round");
DEFINE_int32(reps, 3, "Rounds (the median ratio is reported)");
DEFINE_string(dir, "", "Scratch directory for RocksDB (default: $TMPDIR or /tmp)");

namespace relaxps {
namespace {

// Keeps `limit` operations outstanding; Acquire blocks while all are.
class Window {
 public:
  explicit Window(int limit) : free_(limit) {}
  void Acquire() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return free_ > 0; });
    --free_;
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    ++free_;
    cv_.notify_one();
  }
  void Drain(int limit) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return free_ == limit; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;
};

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Rate {
  double pushes_per_s = 0;
  double cpu_us_per_push = 0;
};

// Pushes/s of one mode (`rows`: PushRows, else dense Push).
Rate RunOnce(bool group_commit, bool rows, const std::string& data_dir) {
  std::filesystem::remove_all(data_dir);
  CoordinatorOptions co;
  co.consistency = ConsistencyModel::kAsync;
  co.num_workers = FLAGS_workers;
  auto coordinator = Coordinator::Start(co);
  CHECK(coordinator.ok()) << coordinator.status();
  std::thread ct([&] { (*coordinator)->Run(); });
  ServerOptions so;
  so.coordinator = (*coordinator)->endpoint();
  so.store.kind = "rocksdb";
  so.store.data_dir = data_dir;
  so.store.wal_per_update = true;
  so.store.wal_group_commit = group_commit;
  // Acknowledged once synced in both modes (not --wal_reply=applied's
  // answer before the sync): what the grouping of syncs buys.
  so.wal_reply = WalReply::kDurable;
  so.flush_every_clocks = 0;
  auto server = Server::Start(so);
  CHECK(server.ok()) << server.status();
  std::thread st([&] { (*server)->Run().IgnoreError(); });
  std::vector<std::unique_ptr<Client>> clients;
  for (int w = 0; w < FLAGS_workers; ++w) {
    ClientOptions o;
    o.coordinator = (*coordinator)->endpoint();
    o.request_timeout_ms = 60000;
    auto c = Client::Connect(o);
    CHECK(c.ok()) << c.status();
    clients.push_back(std::move(c).value());
  }
  TableOptions t;
  t.name = "t";
  t.type = rows ? TableType::kSparse : TableType::kDense;
  t.size = static_cast<uint64_t>(FLAGS_dense_bytes) / sizeof(float);
  t.row_width = FLAGS_row_width;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 0.01f;
  CHECK(clients[0]->CreateTable(t).ok());
  for (auto& c : clients) CHECK(c->GetTable("t").ok());  // Every client learns the map.

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> done{0}, failed{0};
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = CpuSeconds();
  std::vector<std::thread> threads;
  for (int w = 0; w < FLAGS_workers; ++w) {
    threads.emplace_back([&, w] {
      Client* c = clients[w].get();
      Window window(FLAGS_in_flight);
      FloatBuffer g(rows ? size_t(FLAGS_rows) * FLAGS_row_width : t.size);
      std::fill(g.begin(), g.end(), 0.001f);
      uint64_t next_id = uint64_t(w) << 40;
      auto on_done = [&](const Status& s) {
        if (!s.ok() && failed.fetch_add(1) == 0) LOG(ERROR) << "push failed: " << s;
        done.fetch_add(1);
        window.Release();
      };
      while (!stop.load()) {
        window.Acquire();
        if (rows) {
          KeyBuffer ids(FLAGS_rows);
          for (auto& id : ids) id = next_id++;
          c->PushRows("t", ids, g, on_done);
        } else {
          c->Push("t", 0, g, on_done);
        }
      }
      window.Drain(FLAGS_in_flight);
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(FLAGS_seconds));
  const uint64_t counted = done.load();
  const double cpu = CpuSeconds() - cpu_start;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stop.store(true);
  for (auto& th : threads) th.join();
  CHECK_EQ(failed.load(), 0u) << "pushes failed";
  clients.clear();
  (*server)->Stop();
  st.join();
  server->reset();
  (*coordinator)->Stop();
  ct.join();
  std::filesystem::remove_all(data_dir);
  return {counted / elapsed, counted > 0 ? 1e6 * cpu / counted : 0.0};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string KiB(int bytes) { return std::to_string(bytes / 1024) + "KiB"; }

int Main() {
  std::string root = FLAGS_dir;
  if (root.empty()) root = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  root += "/relaxps-wal-bench." + std::to_string(getpid());
  const std::string shape =
      "/w" + std::to_string(FLAGS_workers) + "/if" + std::to_string(FLAGS_in_flight);
  std::string out = "{\"bench\":\"wal\",\"results\":[";
  bool first = true;
  for (bool rows : {false, true}) {
    const std::string what =
        rows ? "rows" + std::to_string(FLAGS_rows) + "x" + std::to_string(FLAGS_row_width)
             : "dense_" + KiB(FLAGS_dense_bytes);
    std::vector<double> group, single, ratios, group_cpu, single_cpu;
    for (int rep = 0; rep < FLAGS_reps; ++rep) {
      // Alternate which mode goes first; write back the page cache before each.
      Rate g, s;
      for (int k = 0; k < 2; ++k) {
        const bool gc = (rep + k) % 2 == 0;
        sync();
        (gc ? g : s) = RunOnce(gc, rows, root + "/db");
      }
      std::fprintf(stderr,
                   "round %d %-12s group commit %.0f/s (%.0f us CPU each), sync per push %.0f/s "
                   "(%.0f us CPU each)\n",
                   rep, what.c_str(), g.pushes_per_s, g.cpu_us_per_push, s.pushes_per_s,
                   s.cpu_us_per_push);
      group.push_back(g.pushes_per_s);
      single.push_back(s.pushes_per_s);
      ratios.push_back(g.pushes_per_s / s.pushes_per_s);
      group_cpu.push_back(g.cpu_us_per_push);
      single_cpu.push_back(s.cpu_us_per_push);
    }
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"name\":\"wal/group_commit/%s%s/pushes_per_s\",\"value\":%.1f,\"unit\":"
                  "\"pushes/s\",\"yardstick\":\"wal/sync_per_push/%s%s/pushes_per_s\","
                  "\"yardstick_value\":%.1f,\"ratio\":%.3f,\"better\":\"higher\","
                  "\"cpu_us_per_push\":%.1f,\"yardstick_cpu_us_per_push\":%.1f}",
                  first ? "" : ",", what.c_str(), shape.c_str(), Median(group), what.c_str(),
                  shape.c_str(), Median(single), Median(ratios), Median(group_cpu),
                  Median(single_cpu));
    out += buf;
    first = false;
  }
  out += "]}";
  std::filesystem::remove_all(root);
  std::printf("%s\n", out.c_str());
  return 0;
}

}  // namespace
}  // namespace relaxps

int main(int argc, char** argv) {
  gflags::SetUsageMessage("Pushes/s under --wal_per_update: group commit vs one sync per push.");
  relaxps::ParseFlagsWithHelp(&argc, &argv);
  FLAGS_minloglevel = 1;
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_workers < 1 || FLAGS_in_flight < 1 || FLAGS_seconds <= 0 || FLAGS_reps < 1 ||
      FLAGS_dense_bytes < 4 || FLAGS_rows < 1 || FLAGS_row_width < 1) {
    std::fprintf(stderr, "relaxps-bench-wal: sizes, counts and --seconds must be positive\n");
    return 2;
  }
  return relaxps::Main();
}
