// Evaluator: the test-set evaluation of a relaxps job, off the training path
// (`relaxps-worker --role=evaluator`).
//
// It joins the job as an observer (no clock, not in the live worker set, so
// it never holds up a barrier), waits for the model's table to exist, then
// every eval_every_s pulls the whole table and evaluates it on the test set.
// The workers then need not pause for evaluations, and the accuracy curve has
// a point every few seconds even with one worker (as in TTF's protocol).
// A pull waits at most pull_timeout_ms (1 s by default); one that fails (its
// server is down) is retried retry_s later, not at the next interval, so an
// outage blinds the evaluator for about as long as it lasts, never for a
// request timeout more. Each run of failed pulls is reported once the model
// can be pulled again: an `evaluator_gap` event (from the first failed pull
// to the pull that worked) and EvaluatorResult's gaps / blind_s, so that a
// reader tells the evaluator's gaps from the model's. The evaluator itself
// never gives up on a dead server. When `stop`
// is set (or duration_s passes) it runs one last pull and evaluation and
// prints `final evaluator ... test_acc=...`.
//
// CSV columns (header written on open):
//   time_s,unix_s,params_clock,test_acc,test_loss,eval_s
// time_s counts from options.time_origin_unix (or the evaluator's start);
// params_clock is the clock the pulled parameters reflect (-1 unknown);
// eval_s is how long the evaluation took.
//
// Thread-safety: Run() is called from one thread; `stop` may be set from any
// thread or a signal handler.
#ifndef RELAXPS_APPS_TRAINER_EVALUATOR_H_
#define RELAXPS_APPS_TRAINER_EVALUATOR_H_

#include <atomic>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include "apps/trainer/mnist.h"
#include "apps/trainer/model.h"
#include "client/client.h"
#include "common/events.h"
#include "common/status.h"
#include "kernels/device.h"

namespace relaxps {
namespace trainer {

struct EvaluatorOptions {
  // The dense table holding the model (created by the workers).
  std::string table = "model";
  // Time between the starts of two evaluations (> 0). An evaluation that
  // takes longer is followed at once by the next.
  double eval_every_s = 2.0;
  // Stop after this long (0: only when `stop` is set).
  double duration_s = 0.0;
  // Test examples per evaluation (0: the whole test set).
  size_t eval_examples = 0;
  int eval_batch = 256;
  // How long one pull may take before it counts as failed (and is retried).
  // Longer tolerates a slower network; shorter keeps the blind window of an
  // outage closer to the outage.
  int pull_timeout_ms = 1000;
  // After a failed pull, the next one starts this long later at most (or at
  // the next interval, if sooner). > 0.
  double retry_s = 1.0;
  // Origin of the CSV's time_s, seconds since the epoch (0: the start of
  // Run), so the curve lines up with a launcher's events.
  double time_origin_unix = 0.0;
  // Metrics CSV path; empty writes none.
  std::string metrics_csv;
  // Where progress and final lines go. Not owned.
  FILE* progress = stdout;
  // Structured events (docs/events.md): evaluator_progress with each
  // evaluation, evaluator_final with the last. nullptr: none.
  std::shared_ptr<EventLog> events;
};

struct EvaluatorResult {
  int evaluations = 0;
  int failed_pulls = 0;
  // Runs of failed pulls that ended with a pull that worked (evaluator_gap
  // events), and the seconds they spanned in all.
  int gaps = 0;
  double blind_s = 0.0;
  // The last evaluation's numbers (NaN when there was none).
  double test_acc = 0.0;
  double test_loss = 0.0;
};

class Evaluator {
 public:
  // InvalidArgument for bad options or a dataset that does not fit the
  // model; IOError if the CSV cannot be created. `client`, `device`, `model`
  // and `data` are borrowed and must outlive the evaluator.
  static StatusOr<std::unique_ptr<Evaluator>> Create(const EvaluatorOptions& options,
                                                     Client* client, kernels::Device* device,
                                                     Model* model, const FashionMnist* data);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  // Evaluates until `stop` is set or duration_s passes, then once more.
  // Errors: a table whose size does not fit the model (InvalidArgument), a
  // CSV write failure (IOError). Unreachable servers are not errors.
  StatusOr<EvaluatorResult> Run(const std::atomic<bool>* stop);

 private:
  Evaluator(const EvaluatorOptions& options, Client* client, kernels::Device* device,
            Model* model, const FashionMnist* data, FILE* csv);
  // Pulls the table into params_host_ (and the device copy).
  Status PullParams();
  // One pull + evaluation + CSV row; `final` also prints the final line.
  // *pulled: whether the pull worked.
  Status EvaluateOnce(double now_unix, bool final_line, EvaluatorResult* result, bool* pulled);

  const EvaluatorOptions options_;
  Client* const client_;
  kernels::Device* const device_;
  Model* const model_;
  const FashionMnist* const data_;
  FILE* const csv_;  // owned; null when no CSV is written
  double origin_unix_ = 0.0;
  // The open gap: time_s of its first failed pull (NaN: none), its failed
  // pulls and the first one's error. Run()'s thread only.
  double gap_from_s_ = std::numeric_limits<double>::quiet_NaN();
  int gap_failures_ = 0;
  std::string gap_reason_;
  FloatBuffer params_host_;
  float* params_device_ = nullptr;  // owned (device memory); null on the CPU
};

}  // namespace trainer
}  // namespace relaxps

#endif  // RELAXPS_APPS_TRAINER_EVALUATOR_H_
