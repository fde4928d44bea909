// relaxps-bench-store: what durability costs the data path. One in-process
// coordinator, one server and one client; the client runs PushPull of a
// whole dense table (sgd) followed by Clock() in a closed loop for
// --seconds per configuration:
//   memory             MemoryStore (no durability; the baseline)
//   rocksdb/flush1     RocksDbStore, Flush after every clock
//   rocksdb/flush10    RocksDbStore, Flush every 10 clocks (the default)
//   rocksdb/noflush    RocksDbStore, Flush only at exit
// The configurations are interleaved for --reps rounds (rotating which goes
// first) and each one's ratio to the memory store is taken within a round,
// then the median over rounds is reported, so machine noise hits all of them
// alike; so is each flushing configuration's ratio to rocksdb/noflush (what
// the flushes cost). --only=NAME runs just NAME, rocksdb/noflush and the
// memory baseline.
//
// --push_mb=M: each PushPull covers only the last M MiB of the table (a model
// of which only a part is trained, e.g. a head fine-tuned on a frozen
// backbone); the flushes then write only the chunks that changed
// (dirty-chunk flushes) where the store tracks them.
//
// --flush_cost=N prints {"bench":"store_flush_cost",...,"cpu_ms_per_flush":..,
//   "wall_ms_per_flush":..,"raw_write_cpu_ms":..,"raw_write_wall_ms":..}.
//
// Prints one JSON object: {"bench":"store_overhead","mb":..,"push_mb":..,
//   "results":[{"name":"rocksdb/flush1","iters_per_s":..,"gb_per_s":..,
//   "ratio_to_memory":..,"ratio_to_noflush":..,"cpu_ms_per_iter":..,
//   "flush_every_clocks":..,"flush_cpu_ms":..},...]}
// flush_cpu_ms (flushing configurations only): the process CPU one flush
// costs, from the CPU per iteration over rocksdb/noflush's; a steadier
// figure on a shared machine than the rate ratios.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/internal/bench_util.h"
#include "client/client.h"
#include "common/buffer_pool.h"
#include "coordinator/coordinator.h"
#include "server/server.h"
#include "storage/param_store.h"
#include "common/flag_help.h"

DEFINE_double(mb, 16, "Dense table size in MiB");
DEFINE_double(seconds, 2, "Measuring time per configuration and round");
DEFINE_int32(reps, 5, "Rounds (the median ratio is reported)");
DEFINE_string(only, "", "Run only the configuration with this name (e.g. rocksdb/flush1), "
              "rocksdb/noflush and memory");
DEFINE_double(push_mb, 0, "MiB each PushPull covers, at the end of the table (0: all of it)");
DEFINE_string(dir, "", "Scratch directory for RocksDB (default: $TMPDIR or /tmp)");
DEFINE_int32(flush_cost, 0,
             "If > 0: instead of the PushPull runs, time this many flushes of a RocksDbStore "
             "alone (a dense table of --mb, its last --push_mb rewritten before each flush, "
             "waited for) and print the process CPU and wall time per flush, with those of a "
             "plain write + fdatasync of the same bytes (the yardstick).");
DEFINE_bool(tune_malloc, true,
            "Call TuneMallocForLargeMessages() as relaxps-server does (false: glibc's defaults, "
            "for comparison).");

namespace relaxps {
namespace {

struct Config {
  std::string name;
  std::string store;
  int flush_every_clocks;
};

struct RunResult {
  double iters_per_s = 0;
  // Process CPU (every thread: the loop, the store's flush thread, RocksDB's
  // background threads, ZeroMQ's) per PushPull + Clock. Machine noise moves
  // it less than the rate.
  double cpu_ms_per_iter = 0;
};

double ProcessCpuSeconds() { return bench::ProcessUsage::Now().cpu_s; }

RunResult RunOnce(const Config& cfg, const std::string& data_dir, uint64_t n, uint64_t push_n) {
  std::filesystem::remove_all(data_dir);
  CoordinatorOptions co;
  co.consistency = ConsistencyModel::kAsync;
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
  RunResult result;
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
    FloatBuffer g(push_n), out(push_n);
    for (uint64_t i = 0; i < push_n; ++i) g[i] = 0.001f * static_cast<float>(i % 7);
    const auto next_offset = [&] { return n - push_n; };
    // Warm-up.
    for (int i = 0; i < 3; ++i) {
      CHECK((*client)->PushPull("w", next_offset(), g, out).get().ok());
      CHECK((*client)->Clock().ok());
    }
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = ProcessCpuSeconds();
    int iters = 0;
    double elapsed = 0;
    while (elapsed < FLAGS_seconds) {
      Status s = (*client)->PushPull("w", next_offset(), g, out).get();
      CHECK(s.ok()) << s;
      CHECK((*client)->Clock().ok());
      ++iters;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    result.iters_per_s = iters / elapsed;
    result.cpu_ms_per_iter = (ProcessCpuSeconds() - cpu_start) * 1e3 / iters;
  }
  (*server)->Stop();
  st.join();
  server->reset();  // Closes the store: waits for its background flush.
  (*coordinator)->Stop();
  ct.join();
  std::filesystem::remove_all(data_dir);
  return result;
}

// Process CPU (every thread) and wall time per call of `body(i)`, i in
// [0, reps).
struct PerRepCost {
  double cpu_ms = 0;
  double wall_ms = 0;
};
PerRepCost TimePerRep(int reps, const std::function<void(int)>& body) {
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = ProcessCpuSeconds();
  for (int i = 0; i < reps; ++i) body(i);
  PerRepCost cost;
  cost.cpu_ms = (ProcessCpuSeconds() - cpu_start) * 1e3 / reps;
  cost.wall_ms = bench::SecondsSince(start) * 1e3 / reps;
  return cost;
}

// The yardstick of --flush_cost: what any durable flush of `bytes` costs on
// this machine's file system, whatever the store: one write(2) of the bytes
// into a new file and fdatasync(2), `reps` times, rotating over four files as
// generations do. On a virtual disk the kernel's part is not small (0.8 ms of
// CPU per MiB on the 2-vCPU test machines), and no store can go below it.
PerRepCost MeasureRawWrites(const std::string& root, size_t bytes, int reps) {
  std::filesystem::create_directories(root);
  const std::vector<char> buf(bytes, 1);
  return TimePerRep(reps, [&](int i) {
    const std::string path = root + "/raw." + std::to_string(i % 4);
    const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    PCHECK(fd >= 0) << "open " << path;
    for (size_t done = 0; done < bytes;) {
      const ssize_t w = ::write(fd, buf.data() + done, bytes - done);
      PCHECK(w > 0) << "write " << path;
      done += static_cast<size_t>(w);
    }
    PCHECK(::fdatasync(fd) == 0) << "fdatasync " << path;
    ::close(fd);
  });
}

// --flush_cost: the flush alone, without a server or client around it. Its
// CPU per flush repeats within about 10% on a shared machine. Printed with
// the raw write + fdatasync of the same bytes (MeasureRawWrites).
int RunFlushCost(const std::string& root, uint64_t n, uint64_t push_n) {
  std::filesystem::remove_all(root);
  ParamStoreOptions options;
  options.kind = "rocksdb";
  options.data_dir = root + "/db";
  auto store = NewParamStore(options);
  CHECK(store.ok()) << store.status();
  DenseShardSpec spec;
  spec.table = "w";
  spec.end = n;
  StatusOr<DenseShard*> shard = (*store)->CreateDense(spec);
  CHECK(shard.ok()) << shard.status();
  DenseShard* d = *shard;
  const auto flush = [&](int64_t clock) {
    (*store)->BeforeDenseWrite(d);
    for (uint64_t i = n - push_n; i < n; i += 1024) d->slots[0][i] += 1.0f;
    CHECK((*store)->DenseUpdated(d, n - push_n, push_n).ok());
    Status s = (*store)->Flush(clock);
    if (s.ok()) s = (*store)->WaitForFlush();
    CHECK(s.ok()) << s;
  };
  for (int i = 0; i < 3; ++i) flush(i);  // Warm-up, with the first base.
  const PerRepCost cost = TimePerRep(FLAGS_flush_cost, [&](int i) { flush(3 + i); });
  store->reset();
  const PerRepCost raw = MeasureRawWrites(root, push_n * sizeof(float), FLAGS_flush_cost);
  std::filesystem::remove_all(root);
  std::printf("{\"bench\":\"store_flush_cost\",\"mb\":%.1f,\"push_mb\":%.2f,\"flushes\":%d,"
              "\"cpu_ms_per_flush\":%.3f,\"wall_ms_per_flush\":%.3f,"
              "\"raw_write_cpu_ms\":%.3f,\"raw_write_wall_ms\":%.3f}\n",
              FLAGS_mb, static_cast<double>(push_n) * sizeof(float) / (1 << 20), FLAGS_flush_cost,
              cost.cpu_ms, cost.wall_ms, raw.cpu_ms, raw.wall_ms);
  return 0;
}

}  // namespace
}  // namespace relaxps

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("Dense PushPull+Clock throughput: memory vs RocksDB store flush modes.");
  relaxps::ParseFlagsWithHelp(&argc, &argv);
  google::InitGoogleLogging(argv[0]);
  FLAGS_minloglevel = 1;
  if (FLAGS_tune_malloc) relaxps::TuneMallocForLargeMessages();
  using relaxps::Config;
  if (FLAGS_mb <= 0 || FLAGS_seconds <= 0 || FLAGS_reps < 1 || FLAGS_push_mb < 0 ||
      FLAGS_push_mb > FLAGS_mb || FLAGS_flush_cost < 0) {
    std::fprintf(stderr,
                 "relaxps-bench-store: --mb and --seconds must be > 0, --reps >= 1, "
                 "0 <= --push_mb <= --mb, --flush_cost >= 0\n");
    return 2;
  }
  std::string root = FLAGS_dir;
  if (root.empty()) root = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  root += "/relaxps-store-bench." + std::to_string(getpid());
  const uint64_t n = static_cast<uint64_t>(FLAGS_mb * (1 << 20) / sizeof(float));
  const uint64_t push_n =
      FLAGS_push_mb > 0 ? static_cast<uint64_t>(FLAGS_push_mb * (1 << 20) / sizeof(float)) : n;
  if (FLAGS_flush_cost > 0) return relaxps::RunFlushCost(root, n, push_n);
  std::vector<Config> configs = {{"memory", "memory", 0},
                                 {"rocksdb/flush1", "rocksdb", 1},
                                 {"rocksdb/flush10", "rocksdb", 10},
                                 {"rocksdb/noflush", "rocksdb", 0}};
  if (!FLAGS_only.empty()) {
    configs.erase(std::remove_if(configs.begin(), configs.end(),
                                 [](const Config& c) {
                                   return c.name != FLAGS_only && c.name != "memory" &&
                                          c.name != "rocksdb/noflush";
                                 }),
                  configs.end());
    if (configs.size() < 2 || (configs.size() < 3 && FLAGS_only != "rocksdb/noflush")) {
      std::fprintf(stderr, "relaxps-bench-store: unknown --only=%s\n", FLAGS_only.c_str());
      return 2;
    }
  }
  // Each round runs every configuration once, starting at a different one so
  // that no configuration always follows the same neighbour; the page cache
  // is written back (sync) before each, so one run's writeback does not land
  // in the next one's time. A configuration's figure is the median over the
  // rounds of its ratio to the memory store in the same round. A flushing
  // configuration's CPU per flush is its CPU per iteration over
  // rocksdb/noflush's in the same round, times the clocks between flushes
  // (the CPU per flush asked for: flushes coalesced while one runs count
  // as asked).
  std::map<std::string, std::vector<double>> rates, ratios, noflush_ratios, cpu, flush_cpu;
  for (int rep = 0; rep < FLAGS_reps; ++rep) {
    std::map<std::string, relaxps::RunResult> round;
    for (size_t k = 0; k < configs.size(); ++k) {
      const Config& c = configs[(rep + k) % configs.size()];
      sync();
      const relaxps::RunResult r = relaxps::RunOnce(c, root + "/db", n, push_n);
      round[c.name] = r;
      rates[c.name].push_back(r.iters_per_s);
      cpu[c.name].push_back(r.cpu_ms_per_iter);
      std::fprintf(stderr, "round %d %-16s %.2f iters/s %.3f CPU ms/iter\n", rep, c.name.c_str(),
                   r.iters_per_s, r.cpu_ms_per_iter);
    }
    const relaxps::RunResult& noflush = round["rocksdb/noflush"];
    for (const Config& c : configs) {
      ratios[c.name].push_back(round[c.name].iters_per_s / round["memory"].iters_per_s);
      noflush_ratios[c.name].push_back(round[c.name].iters_per_s / noflush.iters_per_s);
      if (c.flush_every_clocks > 0 && noflush.iters_per_s > 0) {
        flush_cpu[c.name].push_back((round[c.name].cpu_ms_per_iter - noflush.cpu_ms_per_iter) *
                                    c.flush_every_clocks);
      }
    }
  }
  std::filesystem::remove_all(root);
  std::printf("{\"bench\":\"store_overhead\",\"mb\":%.1f,\"push_mb\":%.2f,\"rounds\":%d,"
              "\"results\":[",
              FLAGS_mb, static_cast<double>(push_n) * sizeof(float) / (1 << 20), FLAGS_reps);
  for (size_t i = 0; i < configs.size(); ++i) {
    const std::string& name = configs[i].name;
    const double v = Median(rates[name]);
    std::printf("%s{\"name\":\"%s\",\"iters_per_s\":%.3f,\"gb_per_s\":%.3f,"
                "\"ratio_to_memory\":%.3f,\"ratio_to_noflush\":%.3f,\"cpu_ms_per_iter\":%.3f",
                i ? "," : "", name.c_str(), v, v * 2 * push_n * 4 / 1e9, Median(ratios[name]),
                Median(noflush_ratios[name]), Median(cpu[name]));
    if (!flush_cpu[name].empty()) {
      std::printf(",\"flush_every_clocks\":%d,\"flush_cpu_ms\":%.3f", configs[i].flush_every_clocks,
                  Median(flush_cpu[name]));
    }
    std::printf("}");
  }
  std::printf("]}\n");
  return 0;
}
