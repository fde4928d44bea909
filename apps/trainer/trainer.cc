#include "apps/trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <utility>

#include <glog/logging.h>

namespace relaxps {
namespace trainer {
namespace {

// A well-mixed 64-bit value from a few integers (seed derivation).
uint64_t Mix(uint64_t a, uint64_t b, uint64_t c = 0) {
  SplitMix64 g(a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL) * 0xbf58476d1ce4e5b9ULL ^
               c * 0x94d049bb133111ebULL);
  return g.Next();
}

constexpr double kNever = std::numeric_limits<double>::infinity();

}  // namespace

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options,
                                                   kernels::Device* device, Model* model,
                                                   ParamSource* source,
                                                   const FashionMnist* data) {
  CHECK(device != nullptr && model != nullptr && source != nullptr && data != nullptr);
  if (source->size() != model->num_params()) {
    return InvalidArgumentError("parameter source holds " + std::to_string(source->size()) +
                                " floats but model " + model->Name() + " has " +
                                std::to_string(model->num_params()));
  }
  if (data->train.image_size() != static_cast<size_t>(model->input_size()) ||
      data->test.image_size() != static_cast<size_t>(model->input_size())) {
    return InvalidArgumentError("images of " + std::to_string(data->train.rows) + "x" +
                                std::to_string(data->train.cols) + " do not fit model " +
                                model->Name());
  }
  for (const Dataset* set : {&data->train, &data->test}) {
    for (int32_t label : set->labels) {
      if (label < 0 || label >= model->num_classes()) {
        return InvalidArgumentError("label " + std::to_string(label) + " outside the model's " +
                                    std::to_string(model->num_classes()) + " classes");
      }
    }
  }
  if (!(options.duration_s >= 0) || options.epochs < 0 || !(options.eval_every_s >= 0) ||
      !(options.log_every_s >= 0) || options.straggle_ms < 0 || options.eval_batch <= 0) {
    return InvalidArgumentError(
        "durations, epochs, intervals and straggle_ms must be >= 0 and eval_batch > 0");
  }
  ASSIGN_OR_RETURN(std::vector<uint32_t> part,
                   PartitionIndices(data->train.size(), options.worker_index,
                                    options.num_workers, options.seed));
  if (part.size() < static_cast<size_t>(model->batch_size())) {
    return InvalidArgumentError("worker " + std::to_string(options.worker_index) + " has " +
                                std::to_string(part.size()) + " examples, fewer than a batch of " +
                                std::to_string(model->batch_size()));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<MetricsWriter> metrics,
                   MetricsWriter::Open(options.metrics_csv));
  ASSIGN_OR_RETURN(std::unique_ptr<StepLog> steps, StepLog::Open(options.steps_csv));
  std::unique_ptr<Trainer> trainer(new Trainer(options, device, model, source, data,
                                               std::move(part), std::move(metrics)));
  trainer->steps_ = std::move(steps);
  return trainer;
}

Trainer::Trainer(const TrainerOptions& options, kernels::Device* device, Model* model,
                 ParamSource* source, const FashionMnist* data, std::vector<uint32_t> part,
                 std::unique_ptr<MetricsWriter> metrics)
    : options_(options),
      device_(device),
      model_(model),
      source_(source),
      data_(data),
      sampler_(&data->train, std::move(part), model->batch_size(),
               Mix(options.seed, 1 + static_cast<uint64_t>(options.worker_index))),
      metrics_(std::move(metrics)),
      batch_images_(static_cast<size_t>(model->batch_size()) * model->input_size()),
      batch_labels_(model->batch_size()) {}

EvalResult Trainer::EvaluateTest(size_t examples) {
  const Dataset& test = data_->test;
  const size_t n = examples == 0 ? test.size() : std::min(examples, test.size());
  return model_->Evaluate(device_, source_->params(), test.images.data(), test.labels.data(), n,
                          options_.eval_batch);
}

StatusOr<TrainResult> Trainer::Run(const std::atomic<bool>* stop) {
  using SteadyClock = std::chrono::steady_clock;
  const SteadyClock::time_point start = SteadyClock::now();
  // The wall-clock origin of time_s, for lining rows up with other processes.
  const double start_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const Clock* clock = options_.clock;
  const int64_t start_ms = clock != nullptr ? clock->NowMs() : 0;
  auto elapsed = [start, clock, start_ms] {
    if (clock != nullptr) return (clock->NowMs() - start_ms) / 1e3;
    return std::chrono::duration<double>(SteadyClock::now() - start).count();
  };
  const int batch = model_->batch_size();
  const int worker = worker_id();

  TrainResult result;
  double eval_s = 0.0;  // total time in evaluations
  double compute_s = 0.0;  // total time computing gradients (StepLog::Write)
  double latest_test_acc = std::numeric_limits<double>::quiet_NaN();
  // Since the previous row.
  double row_loss_sum = 0.0;
  int64_t row_correct = 0, row_steps = 0, row_samples = 0;
  int64_t row_staleness_sum = 0, row_staleness_max = 0;
  double row_gate_wait_s = 0.0;
  double row_train_s_base = 0.0;  // training-only time at the previous row
  // The last non-empty interval's means, repeated by a row over no steps.
  double last_loss = std::nan(""), last_train_acc = std::nan("");

  double next_log = options_.log_every_s > 0 ? options_.log_every_s : kNever;
  double next_eval = options_.eval_every_s > 0 && evaluates() ? options_.eval_every_s : kNever;

  // Builds a row at time `now` from the accumulators and resets them.
  auto take_row = [&](double now) {
    MetricsRow row;
    row.time_s = now;
    row.worker = worker;
    row.clock = source_->clock();
    row.samples = result.samples;
    row.epoch = sampler_.epoch();
    if (row_steps > 0) {
      last_loss = row_loss_sum / row_steps;
      last_train_acc = static_cast<double>(row_correct) / row_samples;
    }
    row.loss = last_loss;
    row.train_acc = last_train_acc;
    const double train_s = now - eval_s;
    const double interval = train_s - row_train_s_base;
    row.samples_per_s = interval > 0 ? row_samples / interval : 0.0;
    const TrafficStats traffic = source_->stats();
    row.bytes_sent = traffic.bytes_sent;
    row.bytes_received = traffic.bytes_received;
    row.cache_hits = traffic.cache_hits;
    row.staleness_mean = row_steps > 0 ? static_cast<double>(row_staleness_sum) / row_steps : 0.0;
    row.staleness_max = row_staleness_max;
    row.gate_wait_s = row_gate_wait_s;
    row_staleness_sum = row_staleness_max = 0;
    row_gate_wait_s = 0.0;
    row_loss_sum = 0.0;
    row_correct = row_steps = row_samples = 0;
    row_train_s_base = train_s;
    return row;
  };

  for (;;) {
    if (stop != nullptr && stop->load()) {
      result.stopped = true;
      break;
    }
    if (options_.duration_s > 0 && elapsed() >= options_.duration_s) break;
    if (options_.epochs > 0 && sampler_.epoch() >= options_.epochs) break;

    const double compute_start = elapsed();
    sampler_.Next(batch_images_.data(), batch_labels_.data());
    StepOptions step;
    step.training = true;
    step.dropout_seed = Mix(options_.seed, worker, result.steps);
    const StepResult r =
        model_->ForwardBackward(device_, source_->params(), batch_images_.data(),
                                batch_labels_.data(), batch, source_->grads(), step);
    if (!std::isfinite(r.loss)) {
      return InvalidArgumentError("training diverged: loss " + std::to_string(r.loss) +
                                  " at step " + std::to_string(result.steps) +
                                  " (lower --lr?)");
    }
    if (options_.straggle_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.straggle_ms));
    }
    const double step_compute_s = elapsed() - compute_start;
    compute_s += step_compute_s;
    Status s = source_->Update();
    if (s.ok()) s = source_->Clock();
    if (!s.ok()) {
      return s.WithPrefix("worker " + std::to_string(worker) + " at step " +
                          std::to_string(result.steps));
    }

    const StepStats step_stats = source_->last_step();
    row_staleness_sum += step_stats.staleness;
    row_staleness_max = std::max(row_staleness_max, step_stats.staleness);
    row_gate_wait_s += step_stats.gate_wait_s;
    steps_->Write(elapsed(), source_->clock(), step_stats.staleness, step_stats.gate_wait_s,
                  step_stats.cache_hit, r.loss, step_compute_s);
    step_metrics_.OnStep(step_stats, batch, r.loss);

    ++result.steps;
    result.samples += batch;
    row_loss_sum += r.loss;
    row_correct += r.correct;
    ++row_steps;
    row_samples += batch;

    const double now = elapsed();
    const bool eval_due = now >= next_eval;
    if (eval_due || now >= next_log) {
      MetricsRow row = take_row(now);
      if (eval_due) {
        const double t0 = elapsed();
        const EvalResult ev = EvaluateTest(options_.eval_examples);
        eval_s += elapsed() - t0;
        row.evaluated = true;
        row.test_acc = ev.accuracy;
        row.test_loss = ev.loss;
        latest_test_acc = ev.accuracy;
        next_eval = elapsed() + options_.eval_every_s;
      }
      RETURN_IF_ERROR(metrics_->Write(row));
      std::fprintf(options_.progress, "%s\n",
                   FormatProgress("progress", row, latest_test_acc).c_str());
      std::fflush(options_.progress);
      EmitEvent(options_.events.get(), "progress",
                {{"worker", row.worker},
                 {"time_s", row.time_s},
                 {"step", row.clock},
                 {"epoch", row.epoch},
                 {"samples", row.samples},
                 {"samples_per_s", row.samples_per_s},
                 {"loss", row.loss},
                 {"train_acc", row.train_acc},
                 {"test_acc", latest_test_acc},  // null until the first evaluation
                 {"staleness_max", row.staleness_max},
                 {"bytes_sent", row.bytes_sent}});
      if (options_.log_every_s > 0) next_log = elapsed() + options_.log_every_s;
    }
  }

  // ---- The end: the last update acknowledged, final evaluation, last row, final line. ----
  // Its failure does not undo the training: the final counts say what was acknowledged.
  if (Status s = source_->Finish(); !s.ok()) {
    LOG(WARNING) << "worker " << worker << ": the last update was not acknowledged: " << s;
  }
  const double end = elapsed();
  MetricsRow row = take_row(end);
  result.test_acc = result.test_loss = std::numeric_limits<double>::quiet_NaN();
  if (options_.final_eval && evaluates()) {
    const EvalResult ev = EvaluateTest(0);
    row.evaluated = true;
    row.test_acc = result.test_acc = ev.accuracy;
    row.test_loss = result.test_loss = ev.loss;
  }
  RETURN_IF_ERROR(metrics_->Write(row));
  result.epochs = sampler_.epoch();
  result.elapsed_s = end;
  result.samples_per_s = end > 0 ? result.samples / end : 0.0;
  const double train_s = end - eval_s;
  result.train_samples_per_s = train_s > 0 ? result.samples / train_s : 0.0;

  // The final line reports whole-run rates and the final test numbers.
  MetricsRow summary = row;
  summary.samples_per_s = result.train_samples_per_s;
  std::string line = FormatProgress("final", summary, result.test_acc);
  char extra[480];
  const TrafficStats traffic = source_->stats();
  const double bytes_per_step =
      result.steps > 0 ? static_cast<double>(traffic.bytes_sent) / result.steps : 0.0;
  std::snprintf(extra, sizeof(extra),
                " test_loss=%.4f wall_samples_per_s=%.1f eval_s=%.1f bytes_sent_per_step=%.0f%s"
                " start_unix=%.3f local_steps=%llu incarnation=%llu acked_updates=%llu"
                " reported_lost=%llu",
                result.test_loss, result.samples_per_s, eval_s, bytes_per_step,
                result.stopped ? " stopped=1" : " stopped=0", start_unix,
                static_cast<unsigned long long>(traffic.local_steps),
                static_cast<unsigned long long>(traffic.incarnation),
                static_cast<unsigned long long>(traffic.acked_updates),
                static_cast<unsigned long long>(traffic.reported_lost));
  std::fprintf(options_.progress, "%s%s\n", line.c_str(), extra);
  std::fflush(options_.progress);
  EmitEvent(options_.events.get(), "final",
            {{"worker", row.worker},
             {"time_s", end},
             {"steps", result.steps},
             {"epochs", result.epochs},
             {"samples", result.samples},
             {"samples_per_s", result.train_samples_per_s},
             {"wall_samples_per_s", result.samples_per_s},
             {"compute_s", compute_s},
             {"test_acc", result.test_acc},  // null without a final evaluation
             {"test_loss", result.test_loss},
             {"stopped", result.stopped},
             {"incarnation", traffic.incarnation},
             {"acked_updates", traffic.acked_updates},
             {"local_steps", traffic.local_steps},
             {"reported_lost", traffic.reported_lost}});
  return result;
}

}  // namespace trainer
}  // namespace relaxps
