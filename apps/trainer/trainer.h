// Trainer: the data-parallel training loop of one worker, independent of
// where the parameters live (ParamSource: local or parameter server).
//
//   loop: next batch of this worker's part -> forward/backward on
//         source->params() -> source->Update() -> source->Clock()
//   every eval_every_s: evaluate on the test set (worker 0, or every worker)
//   every log_every_s: a metrics CSV row and a `progress ...` line
//   at the end (duration, epochs, or a stop request): a final evaluation on
//   the full test set, a last row and a `final ...` line (ending with
//   start_unix=, the wall-clock time at which time_s was 0).
//
// The trainer owns the per-worker data order (partition + per-epoch shuffle)
// and the metrics; it borrows the device, model, parameter source and data,
// which must outlive it.
//
// Thread-safety: Run() is called from one thread; `stop` may be set from any
// thread or a signal handler.
#ifndef RELAXPS_APPS_TRAINER_TRAINER_H_
#define RELAXPS_APPS_TRAINER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/trainer/metrics.h"
#include "common/events.h"
#include "apps/trainer/mnist.h"
#include "apps/trainer/model.h"
#include "apps/trainer/param_source.h"
#include "apps/trainer/step_metrics.h"
#include "common/clock.h"
#include "common/status.h"
#include "kernels/device.h"

namespace relaxps {
namespace trainer {

struct TrainerOptions {
  // This worker's part of the training set: part worker_index of
  // num_workers (see PartitionIndices). Also names the worker in metrics.
  int worker_index = 0;
  int num_workers = 1;
  // The worker's id in metrics, logs and dropout seeds; worker 0 runs the
  // evaluations. -1: worker_index (PS mode: the coordinator's id, which may
  // differ when a replacement worker takes over a part).
  int worker_id = -1;
  // Seeds the partition (identical on all workers), the per-worker epoch
  // shuffles and the dropout masks.
  uint64_t seed = 1;

  // Stop after this much training time (0: no limit) ...
  double duration_s = 0.0;
  // ... or after this many passes over this worker's part (0: no limit).
  int64_t epochs = 0;

  // Periodic test-set evaluation (0 disables; the final one still runs).
  // Each full evaluation of the CNN costs seconds of CPU, taken from
  // training: longer intervals train faster, shorter ones give finer curves.
  double eval_every_s = 20.0;
  // Examples of the test set used by the periodic evaluations (0: all).
  // The final evaluation always uses the whole test set.
  size_t eval_examples = 0;
  // Evaluate on every worker instead of worker 0 only.
  bool eval_all_workers = false;
  // Run the final full evaluation (on the workers that evaluate).
  bool final_eval = true;
  // Mini-batch size of evaluations (bigger is faster, needs more memory).
  int eval_batch = 256;

  // A CSV row and a progress line every this many seconds (0: only at
  // evaluations and the end).
  double log_every_s = 5.0;
  // Metrics CSV path; empty writes none.
  std::string metrics_csv;
  // If set, one row per step (staleness, gate wait, cache hit, loss, time
  // computing the gradient).
  std::string steps_csv;
  // Sleep this long every step (straggler experiments).
  int straggle_ms = 0;
  // Where progress lines go (stdout by default). Not owned.
  FILE* progress = stdout;
  // Structured events (docs/events.md): a `progress` event with each
  // progress line and a `final` one at the end. nullptr: none.
  std::shared_ptr<EventLog> events;
  // Per-step Prometheus metrics (step_metrics.h) go here; nullptr: none.
  // Not owned; must outlive the trainer.
  metrics::Registry* metrics = nullptr;
  // Where the loop's times (time_s, durations, compute time) come from:
  // nullptr is steady_clock at microsecond resolution; tests pass a
  // FakeClock (milliseconds). Not owned; must outlive the trainer.
  const Clock* clock = nullptr;
};

struct TrainResult {
  int64_t steps = 0;
  int64_t samples = 0;
  int64_t epochs = 0;
  double elapsed_s = 0.0;
  // Training throughput over the whole run, with and without the time
  // spent in periodic evaluations.
  double samples_per_s = 0.0;
  double train_samples_per_s = 0.0;
  // NaN when this worker did not run the final evaluation.
  double test_acc = 0.0;
  double test_loss = 0.0;
  // True when Run ended because `stop` was set.
  bool stopped = false;
};

class Trainer {
 public:
  // InvalidArgument for inconsistent options (bad worker index, batch size
  // larger than this worker's part, ...) or a dataset that does not fit the
  // model; IOError if the metrics file cannot be created.
  static StatusOr<std::unique_ptr<Trainer>> Create(const TrainerOptions& options,
                                                   kernels::Device* device, Model* model,
                                                   ParamSource* source,
                                                   const FashionMnist* data);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains until the duration or epoch limit, or until *stop is set (the
  // current step is finished first). Returns the ParamSource's error,
  // prefixed with the step, if an update or clock fails (the rows so far are
  // on disk); a non-finite loss is InvalidArgument ("training diverged").
  StatusOr<TrainResult> Run(const std::atomic<bool>* stop = nullptr);

 private:
  Trainer(const TrainerOptions& options, kernels::Device* device, Model* model,
          ParamSource* source, const FashionMnist* data, std::vector<uint32_t> part,
          std::unique_ptr<MetricsWriter> metrics);

  int worker_id() const {
    return options_.worker_id >= 0 ? options_.worker_id : options_.worker_index;
  }
  bool evaluates() const { return options_.eval_all_workers || worker_id() == 0; }
  EvalResult EvaluateTest(size_t examples);

  // Constant after construction.
  const TrainerOptions options_;
  kernels::Device* const device_;
  Model* const model_;
  ParamSource* const source_;
  const FashionMnist* const data_;

  BatchSampler sampler_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<StepLog> steps_;
  StepMetrics step_metrics_{options_.metrics};
  // Host staging of one batch.
  std::vector<float> batch_images_;
  std::vector<int32_t> batch_labels_;
};

}  // namespace trainer
}  // namespace relaxps

#endif  // RELAXPS_APPS_TRAINER_TRAINER_H_
