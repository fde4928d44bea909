#include "bench/internal/bench_util.h"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace relaxps {
namespace bench {

double Quantile(std::vector<double>* samples, double q) {
  if (samples->empty()) return 0;
  std::sort(samples->begin(), samples->end());
  size_t rank = static_cast<size_t>(std::ceil(q * samples->size()));
  rank = std::min(std::max<size_t>(rank, 1), samples->size());
  return (*samples)[rank - 1];
}

ProcessUsage ProcessUsage::Now() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  ProcessUsage u;
  u.cpu_s = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
            ru.ru_stime.tv_usec * 1e-6;
  u.faults = static_cast<uint64_t>(ru.ru_minflt) + static_cast<uint64_t>(ru.ru_majflt);
  return u;
}

void Measurement::SetUsageSince(const ProcessUsage& start) {
  const ProcessUsage now = ProcessUsage::Now();
  cpu_s = now.cpu_s - start.cpu_s;
  faults = now.faults - start.faults;
}

void BestOf::Add(Measurement m) {
  cpu_s_ += m.cpu_s;
  faults_ += static_cast<double>(m.faults);
  bytes_ += static_cast<double>(m.bytes);
  ops_ += static_cast<double>(m.ops);
  if (!m.latencies_us.empty()) {
    std::vector<double> lat = m.latencies_us;
    const double p50 = Quantile(&lat, 0.50);
    const double p99 = Quantile(&lat, 0.99);
    if (!have_ || p50_us_ == 0 || p50 < p50_us_) {
      p50_us_ = p50;
      p99_us_ = p99;
    }
  }
  if (!have_ || m.ops_per_s() > best_.ops_per_s()) {
    m.latencies_us.clear();
    best_ = std::move(m);
  }
  have_ = true;
}

void JsonWriter::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!nonempty_.empty()) {
    if (nonempty_.back()) out_ += ',';
    nonempty_.back() = true;
  }
}

JsonWriter& JsonWriter::BeginObject() {
  Separate();
  out_ += '{';
  nonempty_.push_back(false);
  return *this;
}
JsonWriter& JsonWriter::EndObject() {
  out_ += '}';
  nonempty_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::BeginArray() {
  Separate();
  out_ += '[';
  nonempty_.push_back(false);
  return *this;
}
JsonWriter& JsonWriter::EndArray() {
  out_ += ']';
  nonempty_.pop_back();
  return *this;
}
JsonWriter& JsonWriter::Key(const std::string& key) {
  Separate();
  WriteQuoted(key);
  out_ += ':';
  after_key_ = true;
  return *this;
}
JsonWriter& JsonWriter::String(const std::string& value) {
  Separate();
  WriteQuoted(value);
  return *this;
}

void JsonWriter::WriteQuoted(const std::string& value) {
  out_ += '"';
  for (char c : value) {
    if (c == '"' || c == '\\') {
      out_ += '\\';
      out_ += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out_ += buf;
    } else {
      out_ += c;
    }
  }
  out_ += '"';
}

JsonWriter& JsonWriter::Number(double value) {
  Separate();
  if (!std::isfinite(value)) {
    out_ += "null";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", value);
    out_ += buf;
  }
  return *this;
}
JsonWriter& JsonWriter::Int(int64_t value) {
  Separate();
  out_ += std::to_string(value);
  return *this;
}
JsonWriter& JsonWriter::Bool(bool value) {
  Separate();
  out_ += value ? "true" : "false";
  return *this;
}

std::string SizeLabel(uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}


void TuneMallocForHugeMessages() {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // Threads other than the first use arenas whose heaps are at most 64 MiB:
  // a larger block is always mmapped there. One arena, grown with brk.
  if (mallopt(M_ARENA_MAX, 1) != 1 || mallopt(M_MMAP_MAX, 0) != 1 ||
      mallopt(M_TRIM_THRESHOLD, 1 << 30) != 1) {
    std::fprintf(stderr, "bench: mallopt failed; messages above 32 MiB will page-fault\n");
  }
#endif
}

}  // namespace bench
}  // namespace relaxps
