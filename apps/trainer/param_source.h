// ParamSource: where the trainer's parameters live and how a gradient turns
// into the next step's parameters. The training loop is written against this
// interface only:
//
//   model->ForwardBackward(..., source->params(), ..., source->grads());
//   RETURN_IF_ERROR(source->Update());   // params() now fresh
//   RETURN_IF_ERROR(source->Clock());
//
// The source owns both buffers, so a gradient reaches the wire or the
// optimizer without an extra copy where the device allows it.
//
// Two implementations: LocalParams applies the optimizer in-process (the
// "no parameter server" baseline, --local) and PsParams (ps_params.h) pushes
// the gradient to the parameter server and pulls the parameters back.
//
// Thread-safety: a ParamSource is used by the one training thread.
#ifndef RELAXPS_APPS_TRAINER_PARAM_SOURCE_H_
#define RELAXPS_APPS_TRAINER_PARAM_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/initializer.h"
#include "common/optimizer_options.h"
#include "common/status.h"
#include "kernels/device.h"

namespace relaxps {
namespace trainer {

// Traffic counters (zero for local training).
struct TrafficStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t cache_hits = 0;  // SSP parameter-cache hits (cumulative).
  // --recovery=stateless: pushes applied to the worker's own copy while a
  // server was lost (cumulative).
  uint64_t local_steps = 0;
  // Parameter server: this registration's incarnation, the push parts
  // servers acknowledged (ClientStats::acked_updates; with the servers'
  // applied_parts, what a failure lost), and the acknowledged updates the
  // recovery policy itself reported lost (e.g. replay's log overflow).
  uint64_t incarnation = 0;
  uint64_t acked_updates = 0;
  uint64_t reported_lost = 0;
};

// What the last completed step (Update + Clock) observed.
struct StepStats {
  // Clock of the next computation minus the oldest clock its parameters are
  // guaranteed to reflect (0 when nothing is stale, e.g. local training).
  int64_t staleness = 0;
  // Time blocked waiting for parameters (the consistency gate + network).
  double gate_wait_s = 0.0;
  bool cache_hit = false;
};

class ParamSource {
 public:
  ParamSource() = default;
  ParamSource(const ParamSource&) = delete;
  ParamSource& operator=(const ParamSource&) = delete;
  virtual ~ParamSource() = default;

  // "local" / "ps", for logs.
  virtual std::string Name() const = 0;
  virtual size_t size() const = 0;

  // The current parameters: size() floats in the device's memory, valid and
  // unchanged until the next Update(). The pointer itself may change at each
  // Update() (double buffering): ask again every step.
  virtual const float* params() const = 0;

  // Where the caller writes the next gradient: size() floats in the
  // device's memory, valid until the next Update() (ask again every step).
  virtual float* grads() = 0;

  // Applies the gradient in grads() (computed from params()) and makes
  // params() the parameters for the next step. Errors: Unavailable /
  // DeadlineExceeded / Aborted when the parameter server failed or did not
  // answer in time (never blocks without bound); params() is then unchanged.
  virtual Status Update() = 0;

  // Ends the iteration (advances the worker's clock on the server).
  virtual Status Clock() = 0;

  // After the last step: waits for the updates still in flight (an async
  // pipeline's last PushPull, a split push), so that stats() counts every
  // update that was acknowledged. Bounded like Update().
  virtual Status Finish() { return Status::OK(); }
  // Completed iterations.
  virtual int64_t clock() const = 0;

  virtual TrafficStats stats() const = 0;
  virtual StepStats last_step() const { return StepStats(); }
};

struct LocalParamsOptions {
  // Number of parameters and their initial values.
  size_t size = 0;
  Initializer init;
  // The update rule (same meaning as a table's server-side optimizer).
  OptimizerOptions optimizer;
};

// Parameters and optimizer state in `device` memory, updated in-process.
// InvalidArgument for a bad optimizer or initializer. `device` must outlive
// the result.
StatusOr<std::unique_ptr<ParamSource>> NewLocalParams(kernels::Device* device,
                                                      const LocalParamsOptions& options);

}  // namespace trainer
}  // namespace relaxps

#endif  // RELAXPS_APPS_TRAINER_PARAM_SOURCE_H_
