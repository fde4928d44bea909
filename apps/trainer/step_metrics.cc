#include "apps/trainer/step_metrics.h"

namespace relaxps {
namespace trainer {

StepMetrics::StepMetrics(metrics::Registry* registry) {
  if (registry == nullptr) return;
  steps_ = registry->GetCounter("relaxps_worker_steps_total", "Training steps completed.");
  samples_ = registry->GetCounter("relaxps_worker_samples_total", "Training examples processed.");
  staleness_ = registry->GetHistogram(
      "relaxps_worker_staleness",
      "Per step: the clock computed at minus the oldest clock its parameters were guaranteed "
      "to reflect.",
      {0, 1, 2, 3, 4, 8, 16, 32, 64, 128, 256});
  gate_wait_ = registry->GetHistogram(
      "relaxps_worker_gate_wait_seconds",
      "Per step: time blocked waiting for parameters (consistency gate and network).",
      metrics::LatencyBuckets());
  loss_ = registry->GetGauge("relaxps_worker_loss", "Training loss of the latest step.");
}

void StepMetrics::OnStep(const StepStats& stats, int batch, double loss) {
  if (steps_ == nullptr) return;
  steps_->Increment();
  samples_->Increment(static_cast<uint64_t>(batch));
  staleness_->Observe(static_cast<double>(stats.staleness));
  gate_wait_->Observe(stats.gate_wait_s);
  loss_->Set(loss);
}

}  // namespace trainer
}  // namespace relaxps
