// relaxps-bench-ps: data-path throughput and latency of relaxps against bare
// ZeroMQ, in one process. For each (W workers, S servers) it starts a
// coordinator and S memory-store servers on threads and W client threads,
// each with its own relaxps::Client, and measures
//   - dense PushPull and separate Push-then-Pull on a dense table (sgd) of
//     4 KiB .. 64 MiB with 1 and 8 operations in flight: GB/s (bytes pushed +
//     bytes pulled) and ops/s; with 1 in flight also PushPullZeroCopy
//     (pushpull_zero_copy: the parameters handed over, not copied into a
//     buffer of the caller's);
//   - dense Pull of 4 KiB, one in flight: p50/p99 latency;
//   - sparse PullRows / PushRows of batches of 1024 rows of width 64, ids
//     uniform or Zipf(1.0) over 1M ids: rows/s.
// Every figure is measured right next to its yardstick, the bare ZeroMQ echo
// (bench/internal/zmq_echo.h, zero-copy variant) with the same clients,
// servers, bytes each way and operations in flight, repetition by repetition
// so that both see the same machine load; the best of --reps time-boxed
// repetitions is kept for each, and the figure carries `ratio` = relaxps /
// yardstick (for latencies: relaxps p50 / echo p50, lower is better).
//
// Prints one JSON object on stdout: {"bench":"ps", ..., "results":[{"name":
//   "dense/pushpull/w1s1/16MiB/if1","value":1.2,"unit":"GB/s","ops_per_s":36,
//   "yardstick":"zmq_echo/zerocopy/w1s1/16MiB/if1","yardstick_value":1.4,
//   "ratio":0.86,"better":"higher"},...]}
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/internal/bench_util.h"
#include "bench/internal/zmq_echo.h"
#include "client/client.h"
#include "common/curve_auth.h"
#include "common/buffer_pool.h"
#include "common/metrics.h"
#include "coordinator/coordinator.h"
#include "server/server.h"
#include "common/flag_help.h"

DEFINE_double(seconds, 1.0, "Time box of one repetition, in seconds.");
DEFINE_bool(metrics, false,
            "Keep Prometheus metrics in the servers and the coordinator, scraped (Expose) "
            "every 100 ms as a busy Prometheus would: the metrics' hot-path cost");
DEFINE_int32(reps, 3, "Repetitions per configuration; the best one is reported.");
DEFINE_bool(quick, false,
            "Short run: --seconds=0.2 --reps=2 --configs=1x1 --deep_max_bytes=1048576 unless given "
            "explicitly.");
DEFINE_string(configs, "1x1,1x2,2x1,2x2,4x2",
              "Comma-separated WxS (workers x servers) to run; 1x1 first (the other "
              "configurations' CPU and page faults per GB are compared with it).");
DEFINE_int32(replicas, 1,
             "Chain replication: servers per range (1: none; >= 2 runs the cluster with "
             "--recovery=chain --replicas=N, every push crossing N servers)");
DEFINE_string(sizes, "4096,1048576,16777216,67108864", "Dense table sizes in bytes.");
DEFINE_string(in_flight, "1,8", "Operations kept in flight per client.");
DEFINE_uint64(deep_max_bytes, 0,
              "Run in-flight depths > 1 only for sizes up to this many bytes (0: all sizes).");
DEFINE_string(dense_modes, "pushpull,push_then_pull,pull,push,pushpull_zero_copy",
              "Dense operations to measure (a subset, to profile one of them alone).");
DEFINE_bool(echo, true,
            "Measure the ZeroMQ echo yardstick (false: relaxps alone, e.g. to count its system "
            "calls per operation; the ratios are then meaningless).");
DEFINE_bool(drive, true,
            "Each client's driving thread waits in Client::Drive() (replies read and callbacks run "
            "on it); false: on a condition variable, the callbacks running on the client's I/O "
            "thread.");
DEFINE_bool(sparse, true, "Run the sparse PullRows/PushRows measurements.");
DEFINE_int32(rows_per_batch, 1024, "Rows per sparse request.");
DEFINE_int32(row_width, 64, "Floats per sparse row.");
DEFINE_uint64(sparse_ids, 1 << 20, "Sparse ids are drawn from [0, sparse_ids).");
DEFINE_double(zipf_s, 1.0, "Exponent of the Zipf id distribution.");
DEFINE_uint64(seed, 1, "Seed of the sparse id streams.");
DEFINE_string(security, "plain",
              "plain or curve (every socket CurveZMQ with fresh keys; scripts/bench.sh compares)");
DEFINE_int64(dense_part_bytes, -1,
             "ClientOptions::dense_part_bytes of every client (-1: its default; 0: no split).");
DEFINE_int64(dense_split_bytes, -1,
             "ClientOptions::dense_split_bytes of every client (-1: its default).");
DEFINE_int64(pull_rows_part, -1,
             "ClientOptions::pull_rows_part of every client (-1: its default; 0: no split).");
DEFINE_int64(pull_rows_split, -1,
             "ClientOptions::pull_rows_split of every client (-1: its default).");
DEFINE_bool(tune_malloc, true,
            "Call TuneMallocForLargeMessages() as relaxps-server and relaxps-worker do (false: "
            "glibc's defaults, for comparison).");

namespace relaxps {
namespace bench {
namespace {

std::vector<std::string> SplitCsv(const std::string& csv) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t end = csv.find(',', pos);
    if (end == std::string::npos) end = csv.size();
    if (end > pos) out.push_back(csv.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

// ---- In-process cluster ---------------------------------------------------------

class Cluster {
 public:
  Cluster(int servers, int workers) {
    CurveOptions curve;
    if (FLAGS_security == "curve") {
      char tmpl[] = "/tmp/relaxps-bench-keys-XXXXXX";
      CHECK(mkdtemp(tmpl) != nullptr);
      curve.keys_dir = tmpl;
      Status k = GenerateCurveKeys(curve.keys_dir, JobPrincipals(servers, workers));
      CHECK(k.ok()) << k.ToString();
    }
    CoordinatorOptions co;
    co.curve = curve;
    if (curve.enabled()) co.curve.name = "coordinator";
    co.num_servers = servers;
    co.num_workers = workers;
    co.consistency = ConsistencyModel::kAsync;
    if (FLAGS_replicas > 1) {
      co.recovery = "chain";
      co.replicas = FLAGS_replicas;
    }
    if (FLAGS_metrics) co.metrics = &registry_;
    auto c = Coordinator::Start(co);
    CHECK(c.ok()) << c.status().ToString();
    coordinator_ = std::move(c).value();
    threads_.emplace_back([this] { coordinator_->Run(); });
    for (int i = 0; i < servers; ++i) {
      ServerOptions so;
      so.coordinator = coordinator_->endpoint();
      so.store.kind = "memory";
      if (FLAGS_metrics) so.metrics = &registry_;
      if (curve.enabled()) {
        so.server_id = i;
        so.curve = CurveOptions{curve.keys_dir, "server-" + std::to_string(i)};
      }
      auto s = Server::Start(so);
      CHECK(s.ok()) << s.status().ToString();
      servers_.push_back(std::move(s).value());
      Server* raw = servers_.back().get();
      threads_.emplace_back([raw] { raw->Run().IgnoreError(); });
    }
    for (int i = 0; i < workers; ++i) {
      ClientOptions o;
      o.coordinator = coordinator_->endpoint();
      o.request_timeout_ms = 120000;
      if (FLAGS_dense_part_bytes >= 0) o.dense_part_bytes = FLAGS_dense_part_bytes;
      if (FLAGS_dense_split_bytes >= 0) o.dense_split_bytes = FLAGS_dense_split_bytes;
      if (FLAGS_pull_rows_part >= 0) o.pull_rows_part = FLAGS_pull_rows_part;
      if (FLAGS_pull_rows_split >= 0) o.pull_rows_split = FLAGS_pull_rows_split;
      if (curve.enabled()) {
        o.worker_id = i;
        o.curve = CurveOptions{curve.keys_dir, "worker-" + std::to_string(i)};
      }
      auto client = Client::Connect(o);
      CHECK(client.ok()) << client.status().ToString();
      clients_.push_back(std::move(client).value());
    }
    if (FLAGS_metrics) {
      scraper_ = std::thread([this] {
        while (!stop_scraping_.load()) {
          scraped_bytes_ += registry_.Expose().size();
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      });
    }
  }
  ~Cluster() {
    stop_scraping_.store(true);
    if (scraper_.joinable()) scraper_.join();
    clients_.clear();
    for (auto& s : servers_) s->Stop();
    coordinator_->Stop();
    for (auto& t : threads_) t.join();
  }

  Client* client(int i) { return clients_[i].get(); }
  int num_clients() const { return int(clients_.size()); }

  // Creates a table through client 0 and waits until every client's shard
  // map has it (the others learn of it from the coordinator a moment later;
  // an op sent before that fails with NotFound).
  void CreateTable(const TableOptions& t) {
    Status st = clients_[0]->CreateTable(t);
    CHECK(st.ok()) << st.ToString();
    const auto give_up = Clock::now() + std::chrono::seconds(30);
    for (const auto& c : clients_) {
      while (true) {
        Status s = t.type == TableType::kDense
                       ? c->Pull(t.name, 0, FloatBuffer(1)).get()
                       : c->PullRows(t.name, KeyBuffer(1),
                                     FloatBuffer(t.row_width))
                             .get();
        if (s.code() != StatusCode::kNotFound) {
          CHECK(s.ok()) << s.ToString();
          break;
        }
        CHECK(Clock::now() < give_up) << "table " << t.name << " never reached a client";
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }

 private:
  // --metrics: declared first, so it outlives the processes it collects from.
  metrics::Registry registry_;
  std::thread scraper_;
  std::atomic<bool> stop_scraping_{false};
  size_t scraped_bytes_ = 0;  // Scraper thread only.
  std::unique_ptr<Coordinator> coordinator_;
  std::vector<std::unique_ptr<Server>> servers_;
  std::vector<std::thread> threads_;
  std::vector<std::unique_ptr<Client>> clients_;
};

// ---- Closed-loop driver ------------------------------------------------------------

// Callback completions handed from the client's I/O thread to the driving
// thread (callbacks must not block, so they only enqueue).
class CompletionQueue {
 public:
  void Push(int slot, Status s) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.emplace_back(slot, std::move(s));
    }
    // After unlocking: a waiter woken under the lock blocks on the mutex at
    // once and needs a second wake-up (two more context switches and futex
    // calls per op, which the single-threaded echo client never pays). The
    // caller keeps the queue alive (Driver::Done shares it).
    cv_.notify_one();
  }
  bool ready() {
    std::lock_guard<std::mutex> l(mu_);
    return !q_.empty();
  }
  std::pair<int, Status> Pop() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return !q_.empty(); });
    auto r = std::move(q_.front());
    q_.pop_front();
    return r;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int, Status>> q_;
};

// One kind of operation, issued in stages: stage 0 starts an op; Issue()
// returns false when the op is complete after `stage` stages.
class Workload {
 public:
  virtual ~Workload() = default;
  // Starts stage `stage` of an op in slot `slot`; returns false (and starts
  // nothing) if the op already completed all its stages.
  virtual bool Issue(int slot, int stage, Client::Callback done) = 0;
  // Payload bytes (pushed + pulled) and items of one op.
  virtual uint64_t bytes_per_op() const = 0;
  // The client the ops go through.
  virtual Client* client() const = 0;
  virtual uint64_t items_per_op() const { return 1; }
};

struct RunOptions {
  int in_flight = 1;
  double seconds = 1;
  int min_ops = 3;
  // Untimed rounds of in_flight ops before the window opens: enough for the
  // servers' buffer pools and the allocator's heaps to reach the sizes the
  // workload needs, so the window sees the steady state (CPU and page faults
  // per GB are figures).
  int warmup_rounds = 3;
  bool record_latency = false;
};

struct ClientRun {
  Clock::time_point end;
  uint64_t ops = 0;
  uint64_t drained = 0;  // Ops completed after the window (for CPU per byte).
  std::vector<double> latencies_us;
  Status status;
};

// Issues the stages of ops of one Workload on one client and collects their
// completions. Used by a single thread.
class Driver {
 public:
  Driver(Workload* w, int in_flight) : w_(w), stage_(in_flight), started_(in_flight) {}

  void StartOp(int slot) {
    stage_[slot] = 0;
    started_[slot] = Clock::now();
    CHECK(w_->Issue(slot, 0, Done(slot)));
    ++outstanding_;
  }
  // Waits for one completion and starts the op's next stage, if any. Returns
  // the slot whose op just completed (or failed), -1 if it moved on a stage.
  int Step() {
    // Driving returns false at once when it cannot (e.g. another thread
    // drives this client); Pop() then waits as without it.
    if (FLAGS_drive) w_->client()->Drive([this] { return cq_->ready(); }, 60 * 1000);
    auto [slot, s] = cq_->Pop();
    --outstanding_;
    if (!s.ok() && status_.ok()) status_ = s;
    if (status_.ok() && w_->Issue(slot, ++stage_[slot], Done(slot))) {
      ++outstanding_;
      return -1;
    }
    return slot;
  }
  // Waits for every op in flight; returns how many completed.
  uint64_t Drain() {
    uint64_t completed = 0;
    while (outstanding_ > 0) completed += Step() >= 0 ? 1 : 0;
    return completed;
  }
  double MicrosSinceStart(int slot) const {
    return std::chrono::duration<double, std::micro>(Clock::now() - started_[slot]).count();
  }
  const Status& status() const { return status_; }

 private:
  Client::Callback Done(int slot) {
    return [cq = cq_, slot](const Status& s) { cq->Push(slot, s); };
  }

  Workload* const w_;
  // Shared with the callbacks: the last one may still be inside Push() when
  // the driver has taken its completion and is gone.
  const std::shared_ptr<CompletionQueue> cq_ = std::make_shared<CompletionQueue>();
  std::vector<int> stage_;
  std::vector<Clock::time_point> started_;
  int outstanding_ = 0;
  Status status_;
};

// Warms up, waits for `go`, then keeps in_flight ops of `w` outstanding on
// one client until `stop` is set and min_ops are counted, then drains.
ClientRun DriveClient(Workload* w, const RunOptions& o, std::atomic<int>* ready,
                      const std::atomic<bool>* go, const std::atomic<bool>* stop) {
  Driver d(w, o.in_flight);
  ClientRun r;
  for (int round = 0; round < o.warmup_rounds && d.status().ok(); ++round) {
    for (int i = 0; i < o.in_flight; ++i) d.StartOp(i);
    d.Drain();
  }
  ready->fetch_add(1);
  while (!go->load()) std::this_thread::yield();
  if (d.status().ok()) {
    for (int i = 0; i < o.in_flight; ++i) d.StartOp(i);
    while (true) {
      const int slot = d.Step();
      if (slot < 0) continue;
      if (!d.status().ok()) break;
      ++r.ops;
      if (o.record_latency) r.latencies_us.push_back(d.MicrosSinceStart(slot));
      if (stop->load() && r.ops >= uint64_t(o.min_ops)) break;
      d.StartOp(slot);
    }
  }
  r.end = Clock::now();
  r.drained = d.Drain();
  r.status = d.status();
  return r;
}

// Runs one time-boxed measurement of workloads[i] on client i.
Measurement Drive(const std::vector<Workload*>& workloads, const RunOptions& o) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<ClientRun> runs(workloads.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < workloads.size(); ++i) {
    threads.emplace_back([&, i] { runs[i] = DriveClient(workloads[i], o, &ready, &go, &stop); });
  }
  while (ready.load() < int(workloads.size())) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const ProcessUsage usage = ProcessUsage::Now();
  const auto start = Clock::now();
  go = true;
  while (SecondsSince(start) < o.seconds) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop = true;
  for (auto& t : threads) t.join();
  Measurement m;
  m.SetUsageSince(usage);
  // The usage covers the drained ops too: scale it to the counted ones.
  uint64_t counted = 0, drained = 0;
  for (const ClientRun& r : runs) {
    counted += r.ops;
    drained += r.drained;
  }
  if (counted + drained > 0) {
    const double share = double(counted) / double(counted + drained);
    m.cpu_s *= share;
    m.faults = uint64_t(m.faults * share);
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    CHECK(runs[i].status.ok()) << "relaxps request failed: " << runs[i].status.ToString();
    m.seconds = std::max(m.seconds, std::chrono::duration<double>(runs[i].end - start).count());
    m.ops += runs[i].ops;
    m.bytes += runs[i].ops * workloads[i]->bytes_per_op();
    m.items += runs[i].ops * workloads[i]->items_per_op();
    m.latencies_us.insert(m.latencies_us.end(), runs[i].latencies_us.begin(),
                          runs[i].latencies_us.end());
  }
  return m;
}

// ---- Workloads ---------------------------------------------------------------------

enum class DenseMode { kPushPull, kPushThenPull, kPull, kPush, kPushPullZeroCopy };

const char* DenseModeName(DenseMode m) {
  switch (m) {
    case DenseMode::kPushPull: return "pushpull";
    case DenseMode::kPushThenPull: return "push_then_pull";
    case DenseMode::kPull: return "pull";
    case DenseMode::kPush: return "push";
    case DenseMode::kPushPullZeroCopy: return "pushpull_zero_copy";
  }
  return "?";
}

bool DenseModeWanted(DenseMode m) {
  const std::vector<std::string> wanted = SplitCsv(FLAGS_dense_modes);
  return std::find(wanted.begin(), wanted.end(), DenseModeName(m)) != wanted.end();
}

class DenseWorkload : public Workload {
 public:
  DenseWorkload(Client* client, std::string table, size_t floats, int in_flight, DenseMode mode)
      : client_(client), table_(std::move(table)), grads_(floats), mode_(mode) {
    std::fill(grads_.begin(), grads_.end(), 1e-3f);
    for (int i = 0; i < in_flight; ++i) out_.emplace_back(floats);
  }
  bool Issue(int slot, int stage, Client::Callback done) override {
    switch (mode_) {
      case DenseMode::kPushPull:
        if (stage > 0) return false;
        client_->PushPull(table_, 0, grads_, out_[slot], std::move(done));
        return true;
      case DenseMode::kPushThenPull:
        if (stage == 0) client_->Push(table_, 0, grads_, std::move(done));
        else if (stage == 1) client_->Pull(table_, 0, out_[slot], std::move(done));
        else return false;
        return true;
      case DenseMode::kPull:
        if (stage > 0) return false;
        client_->Pull(table_, 0, out_[slot], std::move(done));
        return true;
      case DenseMode::kPush:
        if (stage > 0) return false;
        client_->Push(table_, 0, grads_, std::move(done));
        return true;
      case DenseMode::kPushPullZeroCopy:
        if (stage > 0) return false;
        client_->PushPullZeroCopy(table_, 0, grads_,
                                  [done = std::move(done)](const Status& s, FloatBuffer) { done(s); });
        return true;
    }
    return false;
  }
  Client* client() const override { return client_; }
  uint64_t bytes_per_op() const override {
    return grads_.bytes() * (mode_ == DenseMode::kPull || mode_ == DenseMode::kPush ? 1 : 2);
  }

 private:
  Client* const client_;
  const std::string table_;
  FloatBuffer grads_;
  std::vector<FloatBuffer> out_;
  const DenseMode mode_;
};

class SparseWorkload : public Workload {
 public:
  // `batches` id batches are drawn from `dist` and cycled through.
  SparseWorkload(Client* client, std::string table, bool push, std::vector<KeyBuffer> batches,
                 int row_width, int in_flight)
      : client_(client), table_(std::move(table)), push_(push), batches_(std::move(batches)),
        rows_(batches_.front().size()), width_(row_width),
        grads_(batches_.front().size() * row_width) {
    std::fill(grads_.begin(), grads_.end(), 1e-3f);
    for (int i = 0; i < in_flight; ++i) out_.emplace_back(rows_ * width_);
  }
  bool Issue(int slot, int stage, Client::Callback done) override {
    if (stage > 0) return false;
    const KeyBuffer& ids = batches_[next_++ % batches_.size()];
    if (push_) client_->PushRows(table_, ids, grads_, std::move(done));
    else client_->PullRows(table_, ids, out_[slot], std::move(done));
    return true;
  }
  Client* client() const override { return client_; }
  uint64_t bytes_per_op() const override {
    return rows_ * (sizeof(uint64_t) + width_ * sizeof(float));
  }
  uint64_t items_per_op() const override { return rows_; }

 private:
  Client* const client_;
  const std::string table_;
  const bool push_;
  const std::vector<KeyBuffer> batches_;
  const size_t rows_;
  const size_t width_;
  FloatBuffer grads_;
  std::vector<FloatBuffer> out_;
  size_t next_ = 0;
};

// Batches of `rows` ids in [0, n): uniform, or Zipf(s) by inverse CDF.
std::vector<KeyBuffer> MakeIdBatches(bool zipf, uint64_t n, double s, size_t rows, int batches,
                                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> cdf;
  if (zipf) {
    cdf.resize(n);
    double sum = 0;
    for (uint64_t i = 0; i < n; ++i) cdf[i] = (sum += 1.0 / std::pow(double(i + 1), s));
    for (double& c : cdf) c /= sum;
  }
  std::uniform_real_distribution<double> u01(0, 1);
  std::uniform_int_distribution<uint64_t> uid(0, n - 1);
  std::vector<KeyBuffer> out;
  for (int b = 0; b < batches; ++b) {
    KeyBuffer ids(rows);
    for (size_t r = 0; r < rows; ++r) {
      ids[r] = zipf ? uint64_t(std::lower_bound(cdf.begin(), cdf.end(), u01(rng)) - cdf.begin())
                    : uid(rng);
    }
    out.push_back(std::move(ids));
  }
  return out;
}

// ---- Reporting -----------------------------------------------------------------------

struct Figure {
  std::string name;
  double value = 0;
  std::string unit;
  std::string yardstick;
  double yardstick_value = 0;
  bool higher_is_better = true;
  // Extra numeric fields (ops_per_s, p99_us, ...).
  std::vector<std::pair<std::string, double>> extra;
};

void WriteFigure(JsonWriter* json, const Figure& f) {
  json->BeginObject()
      .Field("name", f.name)
      .Field("value", f.value)
      .Field("unit", f.unit)
      .Field("yardstick", f.yardstick)
      .Field("yardstick_value", f.yardstick_value)
      .Field("ratio", f.yardstick_value > 0 ? f.value / f.yardstick_value : 0.0)
      .Field("better", f.higher_is_better ? "higher" : "lower");
  for (const auto& [k, v] : f.extra) json->Field(k, v);
  json->EndObject();
  std::fprintf(stderr, "%-44s %10.4g %-6s (%s %.4g) ratio %.3f\n", f.name.c_str(), f.value,
               f.unit.c_str(), f.yardstick.c_str(), f.yardstick_value,
               f.yardstick_value > 0 ? f.value / f.yardstick_value : 0.0);
}

std::string ConfigLabel(int w, int s) { return "w" + std::to_string(w) + "s" + std::to_string(s); }

class PsBench {
 public:
  explicit PsBench(JsonWriter* json) : json_(json) {}

  void RunConfig(int workers, int servers) {
    Cluster cluster(servers, workers);
    const std::string cfg = ConfigLabel(workers, servers);
    std::vector<int> in_flights;
    for (const auto& s : SplitCsv(FLAGS_in_flight)) in_flights.push_back(std::stoi(s));

    for (const auto& size_str : SplitCsv(FLAGS_sizes)) {
      const size_t bytes = std::stoull(size_str);
      const std::string table = "dense_" + SizeLabel(bytes);
      TableOptions t;
      t.name = table;
      t.type = TableType::kDense;
      t.size = bytes / sizeof(float);
      t.optimizer.name = "sgd";
      t.optimizer.lr = 1e-3f;
      cluster.CreateTable(t);
      std::vector<int> depths;
      for (int d : in_flights) {
        if (d == 1 || FLAGS_deep_max_bytes == 0 || bytes <= FLAGS_deep_max_bytes) depths.push_back(d);
      }
      for (int in_flight : depths) {
        RunOptions ro = Base(in_flight);
        ro.record_latency = in_flight == 1 && bytes <= 4096;
        EchoOptions eo = Echo(workers, servers, bytes, bytes, in_flight, ro.record_latency);
        std::vector<DenseMode> modes = {DenseMode::kPushPull, DenseMode::kPushThenPull};
        if (in_flight == 1 && bytes <= 4096) modes.push_back(DenseMode::kPull);
        if (in_flight == 1) modes.push_back(DenseMode::kPushPullZeroCopy);
        // Pushes alone (an ack back): against an echo of the same request
        // bytes with a 16-byte answer per server, compared by ops/s.
        if (bytes <= 4096) modes.push_back(DenseMode::kPush);
        modes.erase(std::remove_if(modes.begin(), modes.end(),
                                   [](DenseMode m) { return !DenseModeWanted(m); }),
                    modes.end());
        const EchoOptions push_eo = Echo(workers, servers, bytes, 16 * servers, in_flight, false);
        std::vector<std::vector<std::unique_ptr<DenseWorkload>>> loads(modes.size());
        for (size_t m = 0; m < modes.size(); ++m) {
          for (int c = 0; c < workers; ++c) {
            loads[m].push_back(std::make_unique<DenseWorkload>(cluster.client(c), table,
                                                               t.size, in_flight, modes[m]));
          }
        }
        BestOf echo, push_echo;
        std::vector<BestOf> ps(modes.size());
        for (int rep = 0; rep < FLAGS_reps; ++rep) {
          if (FLAGS_echo) echo.Add(RunEcho(eo));
          if (FLAGS_echo && bytes <= 4096) push_echo.Add(RunEcho(push_eo));
          for (size_t m = 0; m < modes.size(); ++m) ps[m].Add(Drive(Raw(loads[m]), ro));
        }
        const std::string suffix = cfg + "/" + SizeLabel(bytes) + "/if" + std::to_string(in_flight);
        const std::string yname = "zmq_echo/zerocopy/" + suffix;
        for (size_t m = 0; m < modes.size(); ++m) {
          const std::string name = std::string("dense/") + DenseModeName(modes[m]) + "/" + suffix;
          if (modes[m] == DenseMode::kPush) {
            Figure f{name + "/ops_per_s", ps[m].best().ops_per_s(), "ops/s",
                     "zmq_echo/zerocopy/" + cfg + "/" + SizeLabel(bytes) + "_to_" +
                         SizeLabel(push_eo.reply_bytes) + "/if" + std::to_string(in_flight) +
                         "/ops_per_s",
                     push_echo.best().ops_per_s(), true, {}};
            WriteFigure(json_, f);
            WriteCpuPerOp(name, ps[m], push_echo,
                          "zmq_echo/zerocopy/" + cfg + "/" + SizeLabel(bytes) + "_to_" +
                              SizeLabel(push_eo.reply_bytes) + "/if" + std::to_string(in_flight));
            continue;
          }
          if (modes[m] != DenseMode::kPull) {
            Figure f{name + "/gbps", ps[m].best().gbps(), "GB/s", yname + "/gbps",
                     echo.best().gbps(), true, {}};
            f.extra = {{"ops_per_s", ps[m].best().ops_per_s()},
                       {"yardstick_ops_per_s", echo.best().ops_per_s()}};
            WriteFigure(json_, f);
            ops_per_s_[name] = ps[m].best().ops_per_s();
            ops_per_s_[yname] = echo.best().ops_per_s();
            if (bytes >= (1u << 20)) WriteUsage(name, workers, servers, ps[m], echo);
            if (bytes <= 4096) WriteCpuPerOp(name, ps[m], echo, yname);
          }
          if (ro.record_latency) {
            Figure f{name + "/p50_us", ps[m].p50_us(), "us", yname + "/p50_us", echo.p50_us(),
                     false, {}};
            f.extra = {{"p99_us", ps[m].p99_us()}, {"yardstick_p99_us", echo.p99_us()}};
            WriteFigure(json_, f);
          }
        }
      }
      // ops/s with the deepest window relative to one in flight.
      if (depths.size() >= 2) {
        const int lo = depths.front(), hi = depths.back();
        for (DenseMode mode : {DenseMode::kPushPull, DenseMode::kPushThenPull}) {
          const std::string base = std::string("dense/") + DenseModeName(mode) + "/" + cfg + "/" +
                                   SizeLabel(bytes) + "/if";
          const std::string ybase = "zmq_echo/zerocopy/" + cfg + "/" + SizeLabel(bytes) + "/if";
          if (ops_per_s_.count(base + std::to_string(hi)) == 0) continue;  // Not measured.
          const double v = ops_per_s_[base + std::to_string(hi)] / ops_per_s_[base + std::to_string(lo)];
          const double y =
              ops_per_s_[ybase + std::to_string(hi)] / ops_per_s_[ybase + std::to_string(lo)];
          Figure f{std::string("dense/") + DenseModeName(mode) + "/" + cfg + "/" + SizeLabel(bytes) +
                       "/ops_speedup_if" + std::to_string(hi) + "_vs_if" + std::to_string(lo),
                   v, "x", ybase + std::to_string(hi) + "_vs_if" + std::to_string(lo), y, true, {}};
          WriteFigure(json_, f);
        }
      }
    }

    if (FLAGS_sparse) RunSparse(&cluster, workers, servers);
  }

 private:
  static std::vector<Workload*> Raw(const std::vector<std::unique_ptr<DenseWorkload>>& v) {
    std::vector<Workload*> out;
    for (const auto& p : v) out.push_back(p.get());
    return out;
  }

  RunOptions Base(int in_flight) const {
    RunOptions ro;
    ro.in_flight = in_flight;
    ro.seconds = FLAGS_seconds;
    return ro;
  }

  EchoOptions Echo(int workers, int servers, size_t req, size_t reply, int in_flight,
                   bool latency) const {
    EchoOptions eo;
    eo.request_bytes = req;
    eo.reply_bytes = reply;
    eo.zero_copy = true;
    eo.in_flight = in_flight;
    eo.clients = workers;
    eo.servers = servers;
    eo.seconds = FLAGS_seconds;
    eo.record_latency = latency;
    return eo;
  }

  void RunSparse(Cluster* cluster, int workers, int servers) {
    const std::string cfg = ConfigLabel(workers, servers);
    TableOptions t;
    t.name = "sparse";
    t.type = TableType::kSparse;
    t.row_width = FLAGS_row_width;
    t.optimizer.name = "sgd";
    t.optimizer.lr = 1e-3f;
    cluster->CreateTable(t);
    const size_t rows = FLAGS_rows_per_batch;
    const size_t id_bytes = rows * sizeof(uint64_t), row_bytes = rows * FLAGS_row_width * 4;
    for (bool zipf : {false, true}) {
      std::vector<std::vector<KeyBuffer>> batches;
      for (int c = 0; c < workers; ++c) {
        batches.push_back(MakeIdBatches(zipf, FLAGS_sparse_ids, FLAGS_zipf_s, rows, 64,
                                        FLAGS_seed + 1000 * c + (zipf ? 1 : 0)));
      }
      const char* dist = zipf ? "zipf" : "uniform";
      // Every row the phases touch exists before the first is timed: a pull
      // of rows nobody pushed finds none and answers the initializer's
      // values, which would flatter the first pull phase.
      FillRows(cluster, "sparse", batches);
      for (bool push : {false, true}) {
        std::vector<std::unique_ptr<SparseWorkload>> loads;
        std::vector<Workload*> raw;
        for (int c = 0; c < workers; ++c) {
          loads.push_back(std::make_unique<SparseWorkload>(cluster->client(c), "sparse", push,
                                                           batches[c], FLAGS_row_width, 1));
          raw.push_back(loads.back().get());
        }
        // Pull: ids out, rows back; push: ids + rows out, an ack back.
        EchoOptions eo = push ? Echo(workers, servers, id_bytes + row_bytes, 16 * servers, 1, false)
                              : Echo(workers, servers, id_bytes, row_bytes, 1, false);
        BestOf echo, ps;
        for (int rep = 0; rep < FLAGS_reps; ++rep) {
          if (FLAGS_echo) echo.Add(RunEcho(eo));
          ps.Add(Drive(raw, Base(1)));
        }
        const std::string op = push ? "push_rows" : "pull_rows";
        Figure f{"sparse/" + op + "/" + dist + "/" + cfg + "/rows_per_s", ps.best().items_per_s(),
                 "rows/s",
                 "zmq_echo/zerocopy/" + cfg + "/" + SizeLabel(eo.request_bytes) + "_to_" +
                     SizeLabel(eo.reply_bytes) + "/if1/rows_per_s",
                 echo.best().ops_per_s() * rows, true, {}};
        f.extra = {{"gbps", ps.best().gbps()}, {"ops_per_s", ps.best().ops_per_s()}};
        WriteFigure(json_, f);
      }
    }
  }

  // Pushes every batch of every worker once (zero gradients: the rows are
  // created and keep their initial values).
  static void FillRows(Cluster* cluster, const std::string& table,
                       const std::vector<std::vector<KeyBuffer>>& batches) {
    for (size_t c = 0; c < batches.size(); ++c) {
      for (const KeyBuffer& ids : batches[c]) {
        const Status st =
            cluster->client(static_cast<int>(c))
                ->PushRows(table, ids, FloatBuffer(ids.size() * FLAGS_row_width))
                .get();
        if (!st.ok()) LOG(FATAL) << "filling the sparse table failed: " << st;
      }
    }
  }

  // CPU seconds and page faults per GB moved (over all repetitions), as
  // figures. For w1s1 the yardstick is the echo's; for larger configurations
  // it is the w1s1 figure of the same operation (how the cost per byte scales
  // with the cluster), plus the aggregate throughput against w1s1's. Page
  // fault yardsticks are floored at 1 per GB, so that a ratio exists when the
  // reference took none.
  struct Usage {
    double cpu_s_per_gb = 0;
    double faults_per_gb = 0;
    double gbps = 0;
  };
  // CPU time of the whole process (clients, servers and the coordinator) per
  // operation: the fixed cost of a request, steadier than ops/s on a loaded
  // machine. Small requests only, where that cost is all there is.
  void WriteCpuPerOp(const std::string& name, const BestOf& m, const BestOf& echo,
                     const std::string& yname) {
    WriteFigure(json_, Figure{name + "/cpu_us_per_op", m.cpu_us_per_op(), "CPU us/op",
                              yname + "/cpu_us_per_op", echo.cpu_us_per_op(), false, {}});
  }

  void WriteUsage(const std::string& name, int workers, int servers, const BestOf& m,
                  const BestOf& echo) {
    const std::string cfg = ConfigLabel(workers, servers);
    const std::string base = ConfigLabel(1, 1);
    const bool single = cfg == base;
    std::string ref = name;
    ref.replace(ref.find(cfg), cfg.size(), base);
    const auto it = usage_.find(ref);
    if (!single && it == usage_.end()) return;  // No w1s1 run to compare with.
    const Usage y = single ? Usage{echo.cpu_s_per_gb(), echo.faults_per_gb(), echo.best().gbps()}
                           : it->second;
    const std::string yname = single ? "zmq_echo/zerocopy" + name.substr(name.find('/', 6)) : ref;
    WriteFigure(json_, Figure{name + "/cpu_s_per_gb", m.cpu_s_per_gb(), "CPU s/GB",
                              yname + "/cpu_s_per_gb", y.cpu_s_per_gb, false, {}});
    WriteFigure(json_, Figure{name + "/faults_per_gb", m.faults_per_gb(), "faults/GB",
                              yname + "/faults_per_gb", std::max(y.faults_per_gb, 1.0), false,
                              {{"yardstick_raw", y.faults_per_gb}}});
    if (single) {
      usage_[name] = Usage{m.cpu_s_per_gb(), m.faults_per_gb(), m.best().gbps()};
    } else {
      WriteFigure(json_, Figure{name + "/gbps_vs_w1s1", m.best().gbps(), "GB/s", ref + "/gbps",
                                y.gbps, true, {}});
    }
  }

  JsonWriter* const json_;
  std::map<std::string, double> ops_per_s_;
  std::map<std::string, Usage> usage_;  // w1s1 figures by name.
};

int Main() {
  JsonWriter json;
  json.BeginObject()
      .Field("bench", "ps")
      .Field("seconds", FLAGS_seconds)
      .Field("reps", FLAGS_reps)
      .Field("yardstick", "bench/internal/zmq_echo: bare cppzmq DEALER/ROUTER echo, zero-copy")
      .Key("results")
      .BeginArray();
  PsBench bench(&json);
  for (const auto& cfg : SplitCsv(FLAGS_configs)) {
    const size_t x = cfg.find('x');
    CHECK_NE(x, std::string::npos) << "--configs wants WxS, got " << cfg;
    bench.RunConfig(std::stoi(cfg.substr(0, x)), std::stoi(cfg.substr(x + 1)));
  }
  json.EndArray().EndObject();
  std::printf("%s\n", json.str().c_str());
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace relaxps

int main(int argc, char** argv) {
  FLAGS_minloglevel = 1;  // Servers' INFO lines would drown the figures.
  FLAGS_logtostderr = true;
  relaxps::ParseFlagsWithHelp(&argc, &argv);
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_tune_malloc) {
    relaxps::TuneMallocForLargeMessages();
    // Messages above 32 MiB (the 64 MiB echo and requests): see
    // TuneMallocForHugeMessages.
    for (const std::string& size : relaxps::bench::SplitCsv(FLAGS_sizes)) {
      if (std::stoull(size) > (uint64_t{32} << 20)) {
        relaxps::bench::TuneMallocForHugeMessages();
        break;
      }
    }
  }
  if (FLAGS_quick) {
    if (gflags::GetCommandLineFlagInfoOrDie("seconds").is_default) FLAGS_seconds = 0.2;
    if (gflags::GetCommandLineFlagInfoOrDie("reps").is_default) FLAGS_reps = 2;
    if (gflags::GetCommandLineFlagInfoOrDie("configs").is_default) FLAGS_configs = "1x1";
    if (gflags::GetCommandLineFlagInfoOrDie("deep_max_bytes").is_default) {
      FLAGS_deep_max_bytes = 1 << 20;
    }
  }
  return relaxps::bench::Main();
}
