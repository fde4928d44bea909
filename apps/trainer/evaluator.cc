#include "apps/trainer/evaluator.h"

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <thread>

#include <glog/logging.h>

namespace relaxps {
namespace trainer {
namespace {

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Sleeps until `deadline_unix` or until *stop is set (checked every 50 ms).
void SleepUntil(double deadline_unix, const std::atomic<bool>* stop) {
  while (NowUnix() < deadline_unix && !(stop != nullptr && stop->load())) {
    const double left = deadline_unix - NowUnix();
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, 0.05)));
  }
}

}  // namespace

StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(const EvaluatorOptions& options,
                                                       Client* client, kernels::Device* device,
                                                       Model* model, const FashionMnist* data) {
  CHECK(client != nullptr && device != nullptr && model != nullptr && data != nullptr);
  if (!(options.eval_every_s > 0) || !std::isfinite(options.eval_every_s)) {
    return InvalidArgumentError("evaluator: eval_every_s must be positive");
  }
  if (!(options.duration_s >= 0) || options.eval_batch <= 0 || options.pull_timeout_ms <= 0 ||
      !(options.retry_s > 0)) {
    return InvalidArgumentError(
        "evaluator: duration_s must be >= 0, eval_batch, pull_timeout_ms and retry_s positive");
  }
  if (data->test.image_size() != static_cast<size_t>(model->input_size())) {
    return InvalidArgumentError("evaluator: test images do not fit model " + model->Name());
  }
  FILE* csv = nullptr;
  if (!options.metrics_csv.empty()) {
    csv = std::fopen(options.metrics_csv.c_str(), "w");
    if (csv == nullptr) {
      return IOError(options.metrics_csv + ": cannot create evaluator CSV: " +
                     std::strerror(errno));
    }
    std::fprintf(csv, "time_s,unix_s,params_clock,test_acc,test_loss,eval_s\n");
    std::fflush(csv);
  }
  return std::unique_ptr<Evaluator>(new Evaluator(options, client, device, model, data, csv));
}

Evaluator::Evaluator(const EvaluatorOptions& options, Client* client, kernels::Device* device,
                     Model* model, const FashionMnist* data, FILE* csv)
    : options_(options),
      client_(client),
      device_(device),
      model_(model),
      data_(data),
      csv_(csv),
      params_host_(model->num_params()) {
  if (device_->type() != kernels::DeviceType::kCpu) {
    params_device_ = static_cast<float*>(device_->Alloc(model_->num_params() * sizeof(float)));
  }
}

Evaluator::~Evaluator() {
  if (csv_ != nullptr) std::fclose(csv_);
  if (params_device_ != nullptr) device_->Free(params_device_);
}

Status Evaluator::PullParams() {
  // An observer gets no shard-map updates through heartbeats: fetch the map
  // so that a restarted or replaced server is found. A failure here shows
  // in the pull.
  client_->ListTables().status().IgnoreError();
  std::future<Status> pulled = client_->Pull(options_.table, 0, params_host_);
  if (pulled.wait_for(std::chrono::milliseconds(options_.pull_timeout_ms)) !=
      std::future_status::ready) {
    // The client keeps params_host_ alive and may still write it: use a
    // fresh buffer from now on.
    params_host_ = FloatBuffer(model_->num_params());
    return DeadlineExceededError("pull of table '" + options_.table + "' took over " +
                                 std::to_string(options_.pull_timeout_ms) + " ms");
  }
  RETURN_IF_ERROR(pulled.get());
  if (params_device_ != nullptr) {
    device_->CopyToDevice(params_device_, params_host_.data(),
                          model_->num_params() * sizeof(float));
    device_->Synchronize();
  }
  return Status::OK();
}

Status Evaluator::EvaluateOnce(double now_unix, bool final_line, EvaluatorResult* result,
                               bool* ok) {
  const Status pulled = PullParams();
  const double time_s = now_unix - origin_unix_;
  *ok = pulled.ok();
  if (!pulled.ok()) {
    ++result->failed_pulls;
    if (gap_failures_++ == 0) {
      gap_from_s_ = time_s;
      gap_reason_ = pulled.ToString();
    }
    std::fprintf(options_.progress, "evaluator time_s=%.1f pull_failed=1 reason=%s\n", time_s,
                 StatusCodeName(pulled.code()));
    std::fflush(options_.progress);
    EmitEvent(options_.events.get(), "evaluator_pull_failed",
              {{"time_s", time_s}, {"reason", pulled.ToString()}});
    return Status::OK();
  }
  if (gap_failures_ > 0) {
    ++result->gaps;
    result->blind_s += time_s - gap_from_s_;
    EmitEvent(options_.events.get(), "evaluator_gap",
              {{"from_s", gap_from_s_},
               {"to_s", time_s},
               {"failed_pulls", gap_failures_},
               {"reason", gap_reason_}});
    gap_failures_ = 0;
  }
  const int64_t params_clock = client_->last_params_clock();
  const Dataset& test = data_->test;
  const size_t n = options_.eval_examples == 0 ? test.size()
                                               : std::min(options_.eval_examples, test.size());
  const double t0 = NowUnix();
  const float* params = params_device_ != nullptr ? params_device_ : params_host_.data();
  const EvalResult ev = model_->Evaluate(device_, params, test.images.data(), test.labels.data(),
                                         n, options_.eval_batch);
  const double eval_s = NowUnix() - t0;
  ++result->evaluations;
  result->test_acc = ev.accuracy;
  result->test_loss = ev.loss;
  if (csv_ != nullptr) {
    const int w = std::fprintf(csv_, "%.3f,%.3f,%" PRId64 ",%.4f,%.6f,%.3f\n", time_s, now_unix,
                               params_clock, ev.accuracy, ev.loss, eval_s);
    if (w < 0 || std::fflush(csv_) != 0) {
      return IOError(options_.metrics_csv + ": cannot write: " + std::strerror(errno));
    }
  }
  std::fprintf(options_.progress,
               "%s time_s=%.1f params_clock=%" PRId64 " test_acc=%.4f test_loss=%.4f eval_s=%.2f\n",
               final_line ? "final evaluator" : "evaluator", time_s, params_clock, ev.accuracy,
               ev.loss, eval_s);
  std::fflush(options_.progress);
  EmitEvent(options_.events.get(), final_line ? "evaluator_final" : "evaluator_progress",
            {{"time_s", time_s},
             {"params_clock", params_clock},
             {"test_acc", ev.accuracy},
             {"test_loss", ev.loss},
             {"eval_s", eval_s},
             {"evaluations", result->evaluations},
             {"failed_pulls", result->failed_pulls}});
  return Status::OK();
}

StatusOr<EvaluatorResult> Evaluator::Run(const std::atomic<bool>* stop) {
  const double start = NowUnix();
  origin_unix_ = options_.time_origin_unix > 0 ? options_.time_origin_unix : start;
  const double end = options_.duration_s > 0 ? start + options_.duration_s
                                             : std::numeric_limits<double>::infinity();
  auto stopping = [&] { return (stop != nullptr && stop->load()) || NowUnix() >= end; };

  EvaluatorResult result;
  result.test_acc = result.test_loss = std::numeric_limits<double>::quiet_NaN();
  // The workers create the table; wait for it.
  for (;;) {
    StatusOr<TableInfo> info = client_->GetTable(options_.table);
    if (info.ok()) {
      if (info->options.size != model_->num_params()) {
        return InvalidArgumentError("table '" + options_.table + "' holds " +
                                    std::to_string(info->options.size) + " floats but model " +
                                    model_->Name() + " has " +
                                    std::to_string(model_->num_params()));
      }
      break;
    }
    if (stopping()) return result;
    SleepUntil(NowUnix() + 0.2, stop);
  }
  LOG(INFO) << "evaluator: table '" << options_.table << "' found; evaluating every "
            << options_.eval_every_s << " s";

  double next = NowUnix();
  while (!stopping()) {
    const double now = NowUnix();
    bool pulled = false;
    RETURN_IF_ERROR(EvaluateOnce(now, false, &result, &pulled));
    // The schedule's next slot; after a failed pull a retry sooner.
    next = std::max(next + options_.eval_every_s, NowUnix());
    const double at = pulled ? next : std::min(next, std::max(now + options_.retry_s, NowUnix()));
    if (!pulled) next = at;  // The interval counts from the retry.
    SleepUntil(std::min(at, end), stop);
  }
  bool pulled = false;
  RETURN_IF_ERROR(EvaluateOnce(NowUnix(), true, &result, &pulled));
  return result;
}

}  // namespace trainer
}  // namespace relaxps
