// Training metrics: the per-worker CSV file and the one-line progress
// records on stdout.
//
// CSV columns (header written on open):
//   time_s,worker,clock,samples,loss,train_acc,test_acc,samples_per_s,
//   bytes_sent,bytes_received,epoch,test_loss
// time_s counts from the start of training; loss and train_acc are means
// over the steps since the previous row; test_acc/test_loss are empty in
// rows without an evaluation; samples_per_s is the rate since the previous
// row; bytes are cumulative client traffic (0 in local mode).
//
// Progress lines are `<kind> key=value ...` with a fixed key order, kind
// "progress" or "final", so scripts can parse them with a split.
//
// Thread-safety: a MetricsWriter is used by one thread.
#ifndef RELAXPS_APPS_TRAINER_METRICS_H_
#define RELAXPS_APPS_TRAINER_METRICS_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "common/status.h"

namespace relaxps {
namespace trainer {

struct MetricsRow {
  double time_s = 0.0;
  int worker = 0;
  int64_t clock = 0;
  int64_t samples = 0;   // cumulative
  double loss = 0.0;     // mean since the previous row
  double train_acc = 0.0;
  bool evaluated = false;  // test_* valid
  double test_acc = 0.0;
  double test_loss = 0.0;
  double samples_per_s = 0.0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  int64_t epoch = 0;     // completed epochs of this worker's part
  // Consistency, over the steps since the previous row: mean and max
  // staleness of the parameters computed on, time blocked waiting for
  // parameters, and SSP cache hits (cumulative).
  double staleness_mean = 0.0;
  int64_t staleness_max = 0;
  double gate_wait_s = 0.0;
  uint64_t cache_hits = 0;
};

class MetricsWriter {
 public:
  // An empty path writes no file. IOError naming the path if it cannot be
  // created.
  static StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Appends and flushes one row (so a killed worker leaves its rows behind).
  Status Write(const MetricsRow& row);

 private:
  MetricsWriter(std::string path, FILE* file) : path_(std::move(path)), file_(file) {}
  const std::string path_;
  FILE* file_;  // owned; null when no file is written
};

// "progress worker=0 time_s=12.0 clock=350 epoch=0 samples=11200
//  samples_per_s=933.1 loss=0.6123 train_acc=0.7800 test_acc=0.8012"
// `test_acc` is the latest evaluation, nan before the first one.
// One row per training step: what the consistency model did to that step.
// Buffered (flushed every 256 rows and on destruction): cheap enough for
// thousands of steps per second.
class StepLog {
 public:
  // An empty path writes nothing. IOError naming the path if it cannot be
  // created.
  static StatusOr<std::unique_ptr<StepLog>> Open(const std::string& path);
  ~StepLog();
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  // Columns: time_s,clock,staleness,gate_wait_ms,cache_hit,loss,compute_ms.
  // `compute_s`: the step's time computing its gradient (sampling the batch,
  // forward and backward, --straggle_ms), waits on the parameter server
  // excluded: what the report's idle fraction is measured from.
  void Write(double time_s, int64_t clock, int64_t staleness, double gate_wait_s,
             bool cache_hit, double loss, double compute_s);

 private:
  explicit StepLog(FILE* file) : file_(file) {}
  FILE* file_;  // Owned; null when no file is written.
  int unflushed_ = 0;
};

std::string FormatProgress(const char* kind, const MetricsRow& row, double latest_test_acc);

}  // namespace trainer
}  // namespace relaxps

#endif  // RELAXPS_APPS_TRAINER_METRICS_H_
