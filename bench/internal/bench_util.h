// Helpers shared by the relaxps benchmarks: clocks, percentiles, best-of
// repetitions and a minimal JSON writer (the benches print JSON on stdout so
// that scripts/bench.sh can merge them).
//
// Thread-safety: JsonWriter is not thread-safe; the free functions are.
#ifndef RELAXPS_BENCH_INTERNAL_BENCH_UTIL_H_
#define RELAXPS_BENCH_INTERNAL_BENCH_UTIL_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace relaxps {
namespace bench {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The q-quantile (0 <= q <= 1) of `samples` by nearest rank; 0 when empty.
// Sorts `samples` in place.
double Quantile(std::vector<double>* samples, double q);

// CPU time (user + system, all threads) and page faults (minor + major) of
// this process so far.
struct ProcessUsage {
  double cpu_s = 0;
  uint64_t faults = 0;
  static ProcessUsage Now();
};

// One time-boxed measurement of a request/response workload.
struct Measurement {
  double seconds = 0;        // Wall time of the timed window.
  uint64_t ops = 0;          // Completed operations.
  uint64_t bytes = 0;        // Payload bytes sent + received.
  uint64_t items = 0;        // Workload-specific units (rows for sparse).
  std::vector<double> latencies_us;  // Per-operation latency, if recorded.
  // Process-wide CPU seconds and page faults during the window (the benches
  // run clients and servers in one process, so both sides count).
  double cpu_s = 0;
  uint64_t faults = 0;

  // Started at `start`: sets cpu_s and faults to the usage since then.
  void SetUsageSince(const ProcessUsage& start);
  double cpu_s_per_gb() const { return bytes > 0 ? cpu_s / (bytes / 1e9) : 0; }
  double faults_per_gb() const { return bytes > 0 ? faults / (bytes / 1e9) : 0; }

  double ops_per_s() const { return seconds > 0 ? ops / seconds : 0; }
  double gbps() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
  double items_per_s() const { return seconds > 0 ? items / seconds : 0; }
};

// Keeps the best (highest ops/s) of several repetitions; latency
// percentiles come from the repetition with the lowest p50; CPU and page
// faults per GB (and CPU per op) are summed over all repetitions (steadier
// than one window).
class BestOf {
 public:
  void Add(Measurement m);
  bool empty() const { return !have_; }
  const Measurement& best() const { return best_; }
  double p50_us() const { return p50_us_; }
  double p99_us() const { return p99_us_; }
  double cpu_s_per_gb() const { return bytes_ > 0 ? cpu_s_ / (bytes_ / 1e9) : 0; }
  double faults_per_gb() const { return bytes_ > 0 ? faults_ / (bytes_ / 1e9) : 0; }
  double cpu_us_per_op() const { return ops_ > 0 ? cpu_s_ * 1e6 / ops_ : 0; }

 private:
  bool have_ = false;
  double cpu_s_ = 0;
  double ops_ = 0;
  double faults_ = 0;
  double bytes_ = 0;
  Measurement best_;
  double p50_us_ = 0;
  double p99_us_ = 0;
};

// Streams one JSON value. Keys and values are written in call order; commas
// are inserted automatically. Non-finite numbers are written as null.
class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(const std::string& key);
  JsonWriter& String(const std::string& value);
  JsonWriter& Number(double value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Bool(bool value);
  // Key + value shorthands.
  JsonWriter& Field(const std::string& key, const std::string& value) { return Key(key).String(value); }
  JsonWriter& Field(const std::string& key, const char* value) { return Key(key).String(value); }
  JsonWriter& Field(const std::string& key, double value) { return Key(key).Number(value); }
  JsonWriter& Field(const std::string& key, int value) { return Key(key).Int(value); }
  JsonWriter& Field(const std::string& key, int64_t value) { return Key(key).Int(value); }
  JsonWriter& Field(const std::string& key, uint64_t value) { return Key(key).Int(int64_t(value)); }
  JsonWriter& Field(const std::string& key, bool value) { return Key(key).Bool(value); }

  const std::string& str() const { return out_; }

 private:
  void Separate();
  void WriteQuoted(const std::string& value);

  std::string out_;
  // One entry per open container: true once it holds an element.
  std::vector<bool> nonempty_;
  bool after_key_ = false;
};

// "4KiB", "1MiB", ... for a byte count that is a power of two multiple.
std::string SizeLabel(uint64_t bytes);

// For a benchmark process that moves messages above 32 MiB (glibc's largest
// mmap threshold): without it, every such message ZeroMQ receives is
// mmapped and unmapped (a page fault per 4 KiB, the 64 MiB echo ran at a
// fifth of its speed). Serves every allocation from one heap grown with brk
// (one arena, no mmapped chunks) and keeps freed memory instead of trimming
// it. Process-wide, from main() of a benchmark only, before any thread; the
// echo and relaxps in the same process both get it. No-op under ASan/TSan.
void TuneMallocForHugeMessages();

}  // namespace bench
}  // namespace relaxps

#endif  // RELAXPS_BENCH_INTERNAL_BENCH_UTIL_H_
