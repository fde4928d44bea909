#include "apps/trainer/metrics.h"

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <memory>

namespace relaxps {
namespace trainer {

StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path) {
  FILE* file = nullptr;
  if (!path.empty()) {
    file = std::fopen(path.c_str(), "w");
    if (file == nullptr) {
      return IOError(path + ": cannot create metrics file: " + std::strerror(errno));
    }
    std::fprintf(file,
                 "time_s,worker,clock,samples,loss,train_acc,test_acc,samples_per_s,"
                 "bytes_sent,bytes_received,epoch,test_loss,staleness_mean,staleness_max,"
                 "gate_wait_s,cache_hits\n");
    std::fflush(file);
  }
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(path, file));
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status MetricsWriter::Write(const MetricsRow& r) {
  if (file_ == nullptr) return Status::OK();
  char test_acc[32] = "", test_loss[32] = "";
  if (r.evaluated) {
    std::snprintf(test_acc, sizeof(test_acc), "%.4f", r.test_acc);
    std::snprintf(test_loss, sizeof(test_loss), "%.6f", r.test_loss);
  }
  const int n = std::fprintf(file_,
                             "%.3f,%d,%" PRId64 ",%" PRId64 ",%.6f,%.4f,%s,%.1f,%" PRIu64
                             ",%" PRIu64 ",%" PRId64 ",%s,%.3f,%" PRId64 ",%.4f,%" PRIu64 "\n",
                             r.time_s, r.worker, r.clock, r.samples, r.loss, r.train_acc,
                             test_acc, r.samples_per_s, r.bytes_sent, r.bytes_received, r.epoch,
                             test_loss, r.staleness_mean, r.staleness_max, r.gate_wait_s,
                             r.cache_hits);
  if (n < 0 || std::fflush(file_) != 0) {
    return IOError(path_ + ": cannot write metrics: " + std::strerror(errno));
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<StepLog>> StepLog::Open(const std::string& path) {
  FILE* file = nullptr;
  if (!path.empty()) {
    file = std::fopen(path.c_str(), "w");
    if (file == nullptr) {
      return IOError(path + ": cannot create step log: " + std::strerror(errno));
    }
    std::fprintf(file, "time_s,clock,staleness,gate_wait_ms,cache_hit,loss,compute_ms\n");
  }
  return std::unique_ptr<StepLog>(new StepLog(file));
}

StepLog::~StepLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void StepLog::Write(double time_s, int64_t clock, int64_t staleness, double gate_wait_s,
                    bool cache_hit, double loss, double compute_s) {
  if (file_ == nullptr) return;
  std::fprintf(file_, "%.4f,%" PRId64 ",%" PRId64 ",%.3f,%d,%.5f,%.3f\n", time_s, clock, staleness,
               gate_wait_s * 1e3, cache_hit ? 1 : 0, loss, compute_s * 1e3);
  if (++unflushed_ >= 256) {
    std::fflush(file_);
    unflushed_ = 0;
  }
}

std::string FormatProgress(const char* kind, const MetricsRow& r, double latest_test_acc) {
  char acc[32] = "nan";  // never "-nan"
  if (!std::isnan(latest_test_acc)) std::snprintf(acc, sizeof(acc), "%.4f", latest_test_acc);
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%s worker=%d time_s=%.1f clock=%" PRId64 " epoch=%" PRId64 " samples=%" PRId64
                " samples_per_s=%.1f loss=%.4f train_acc=%.4f test_acc=%s staleness_max=%" PRId64
                " gate_wait_s=%.2f bytes_sent=%" PRIu64,
                kind, r.worker, r.time_s, r.clock, r.epoch, r.samples, r.samples_per_s, r.loss,
                r.train_acc, acc, r.staleness_max, r.gate_wait_s, r.bytes_sent);
  return buf;
}

}  // namespace trainer
}  // namespace relaxps
