// The hook of relaxps-worker's evaluator role (apps/worker_evaluator.cc).
#ifndef RELAXPS_APPS_WORKER_EVALUATOR_H_
#define RELAXPS_APPS_WORKER_EVALUATOR_H_

#include <atomic>
#include <memory>

#include "apps/trainer/mnist.h"
#include "apps/trainer/model.h"
#include "common/events.h"
#include "common/status.h"
#include "kernels/device.h"

namespace relaxps {

// True for --role=evaluator, false for --role=worker; InvalidArgument for
// any other role or an evaluator without --coordinator / --eval_every_s.
StatusOr<bool> IsEvaluatorRole();

// Runs the evaluator until *stop is set or --duration_s passes; returns the
// process exit status (0 done, 1 error, 2 bad flags, 3 cannot join the job).
// `events` (may be null) gets the evaluator's and its client's events.
int RunEvaluatorRole(kernels::Device* device, trainer::Model* model,
                     const trainer::FashionMnist* data, const std::atomic<bool>* stop,
                     std::shared_ptr<EventLog> events);

}  // namespace relaxps

#endif  // RELAXPS_APPS_WORKER_EVALUATOR_H_
