// PsParams: a ParamSource backed by a relaxps parameter server.
//
// The model's parameters are one dense table. Creating it is idempotent, so
// every worker creates it with the same options; its initial values are
// described by the model's Initializer, so servers fill their shards
// themselves. Each Update() is one PushPull of the whole gradient (the reply
// carries the parameters after the push), each Clock() advances the worker's
// clock on the servers.
//
// Buffers: on the CPU device the host FloatBuffers handed to the client are
// the model's parameter/gradient memory (no copies); on CUDA they are host
// staging buffers copied to and from device memory. A gradient buffer that
// the client still holds after its request completed (e.g. queued for a
// retry) is left to it and replaced by a fresh one.
//
// Thread-safety: used by the one training thread; the Client may be shared.
#ifndef RELAXPS_APPS_TRAINER_PS_PARAMS_H_
#define RELAXPS_APPS_TRAINER_PS_PARAMS_H_

#include <memory>

#include "apps/trainer/param_source.h"
#include "client/client.h"
#include "common/table.h"
#include "kernels/device.h"

namespace relaxps {
namespace trainer {

struct PsParamsOptions {
  // The dense table holding the model: name, size, server-side optimizer
  // and initializer.
  TableOptions table;
  // How long to wait for any one request before giving up with
  // DeadlineExceeded, on top of the client's own deadline (so a trainer
  // never hangs even if a reply is lost). Longer tolerates a BSP barrier
  // held up by a slow peer; shorter notices a dead server sooner.
  int wait_timeout_ms = 60000;
  // Async only: overlap each step's PushPull with the next step's
  // computation (parameters one step older, communication hidden).
  bool pipeline_async = true;
};

// Creates (or joins) the table and pulls its current values. `client` and
// `device` must outlive the result. Errors from the server carry the name of
// the failed operation ("create table 'model'", "pull table 'model'").
StatusOr<std::unique_ptr<ParamSource>> NewPsParams(Client* client, kernels::Device* device,
                                                   const PsParamsOptions& options);

}  // namespace trainer
}  // namespace relaxps

#endif  // RELAXPS_APPS_TRAINER_PS_PARAMS_H_
