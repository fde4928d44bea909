// StepMetrics: the trainer's per-step Prometheus metrics (common/metrics.h):
// steps, samples, the staleness of the parameters each step computed on, the
// time it waited for them, and the latest loss.
//
// Thread-safety: OnStep() from the training thread only.
#ifndef RELAXPS_APPS_TRAINER_STEP_METRICS_H_
#define RELAXPS_APPS_TRAINER_STEP_METRICS_H_

#include "apps/trainer/param_source.h"
#include "common/metrics.h"

namespace relaxps {
namespace trainer {

class StepMetrics {
 public:
  // registry null: OnStep() does nothing.
  explicit StepMetrics(metrics::Registry* registry);
  void OnStep(const StepStats& stats, int batch, double loss);

 private:
  // Constant after construction (all null without a registry).
  metrics::Counter* steps_ = nullptr;
  metrics::Counter* samples_ = nullptr;
  metrics::Histogram* staleness_ = nullptr;
  metrics::Histogram* gate_wait_ = nullptr;
  metrics::Gauge* loss_ = nullptr;
};

}  // namespace trainer
}  // namespace relaxps

#endif  // RELAXPS_APPS_TRAINER_STEP_METRICS_H_
