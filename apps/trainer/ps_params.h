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
// the model's parameter/gradient memory (no copies). On CUDA they are
// page-locked staging buffers (Device::AllocHost, wrapped zero-copy in
// FloatBuffers whose last reference frees them with FreeHost; ordinary
// memory if page-locked memory runs out), and the copies run on the
// device's copy stream:
//   - the gradient goes device -> host once the step's computation is done
//     (an event), and Update() waits for it before sending;
//   - received parameters go host -> device into whichever of two device
//     buffers params() is not using, and the next step's computation waits
//     for the upload (an event), not the host. In the async pipeline the
//     upload is queued before the gradient's download, so it overlaps the
//     end of the step's backward pass.
// A gradient buffer that the client still holds after its request completed
// (e.g. queued for a retry) is left to it and replaced by a fresh one (from
// the same allocator).
//
// Lifetime: `client` and `device` must outlive the PsParams, and the device
// must outlive the client too (the client may release page-locked buffers
// it still holds after the PsParams is gone).
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
// `device` must outlive the result (see Lifetime above). Errors from the server carry the name of
// the failed operation ("create table 'model'", "pull table 'model'").
StatusOr<std::unique_ptr<ParamSource>> NewPsParams(Client* client, kernels::Device* device,
                                                   const PsParamsOptions& options);

}  // namespace trainer
}  // namespace relaxps

#endif  // RELAXPS_APPS_TRAINER_PS_PARAMS_H_
