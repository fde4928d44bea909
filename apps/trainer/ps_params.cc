#include "apps/trainer/ps_params.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <string>
#include <utility>

namespace relaxps {
namespace trainer {
namespace {

using kernels::Device;
using kernels::DeviceBuffer;
using kernels::DeviceEvent;
using kernels::Stream;

class PsParams final : public ParamSource {
 public:
  PsParams(Client* client, Device* device, const PsParamsOptions& options)
      : client_(client),
        device_(device),
        options_(options),
        size_(options.table.size),
        on_host_(device->type() == kernels::DeviceType::kCpu),
        split_(client->consistency_policy().ServesCachedReads()),
        // Unbounded staleness (async): nothing waits, so overlap is free.
        pipeline_(client->consistency_policy().staleness_bound() < 0 && options.pipeline_async),
        params_host_(NewHostBuffer()),
        incoming_(NewHostBuffer()),
        grads_host_(NewHostBuffer()),
        spare_grads_(NewHostBuffer()) {
    if (!on_host_) {
      for (DeviceBuffer<float>& p : params_device_) p = DeviceBuffer<float>(device, size_);
      grads_device_ = DeviceBuffer<float>(device, size_);
      for (auto& e : released_) e = device->NewEvent();
      params_uploaded_ = device->NewEvent();
      grads_ready_ = device->NewEvent();
      grads_copied_ = device->NewEvent();
    }
  }

  // Queued copies read and write the host buffers: let them finish before
  // the buffers go (any the client still holds stay alive through it).
  ~PsParams() override {
    if (!on_host_) device_->Synchronize();
  }

  // Pulls the table's current values.
  Status Start() {
    RETURN_IF_ERROR(Wait(client_->Pull(table(), 0, incoming_), "pull"));
    AdoptIncoming();
    return Status::OK();
  }

  std::string Name() const override { return "ps"; }
  size_t size() const override { return size_; }
  const float* params() const override {
    return on_host_ ? params_host_.data() : params_device_[current_].data();
  }
  float* grads() override { return on_host_ ? grads_host_.data() : grads_device_.data(); }

  // BSP and async: one PushPull per step (the server answers after the
  // push is applied and the gate allows). SSP: Push now, then after Clock()
  // a Pull that the client's parameter cache answers while it is fresh
  // enough, so most steps need no pull round trip.
  Status Update() override {
    // CUDA: the gradient is complete once the computation queued so far is.
    if (!on_host_) device_->RecordEvent(Stream::kCompute, grads_ready_.get());
    if (split_) {
      DownloadGrads();
      if (pending_push_.valid()) {
        RETURN_IF_ERROR(Wait(std::move(pending_push_), "push"));
        ReplaceIfShared(&spare_grads_);
      }
      pending_push_ = client_->Push(table(), 0, grads_host_);
      std::swap(grads_host_, spare_grads_);  // The in-flight push owns the other one now.
      return Status::OK();
    }
    if (pipeline_) {
      // Async: overlap the round trip with the next step's computation. The
      // step after next computes on the parameters this push returns.
      if (inflight_.valid()) {
        const auto t0 = std::chrono::steady_clock::now();
        RETURN_IF_ERROR(Wait(std::move(inflight_), "push-pull"));
        last_.gate_wait_s = SecondsSince(t0);
        // CUDA: queued before the gradient's download, so the upload runs
        // while the compute stream may still be finishing this step.
        AdoptIncoming();
        ReplaceIfShared(&spare_grads_);
      }
      DownloadGrads();
      inflight_ = client_->PushPull(table(), 0, grads_host_, incoming_);
      std::swap(grads_host_, spare_grads_);  // The request owns the other one now.
      return Status::OK();
    }
    // Receive into the spare buffer so that a failed request leaves params()
    // as it was.
    DownloadGrads();
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(Wait(client_->PushPull(table(), 0, grads_host_, incoming_), "push-pull"));
    last_.gate_wait_s = SecondsSince(t0);
    last_.cache_hit = false;
    AdoptIncoming();
    ReplaceIfShared(&grads_host_);
    return Status::OK();
  }

  Status Finish() override {
    if (inflight_.valid()) RETURN_IF_ERROR(Wait(std::move(inflight_), "push-pull"));
    if (pending_push_.valid()) RETURN_IF_ERROR(Wait(std::move(pending_push_), "push"));
    return Status::OK();
  }

  Status Clock() override {
    Status s = client_->Clock();
    if (!s.ok()) return s.WithPrefix("clock of worker " + std::to_string(client_->worker_id()));
    if (split_) {
      const uint64_t hits = client_->stats().cache_hits;
      const auto t0 = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(Wait(client_->Pull(table(), 0, incoming_), "pull"));
      last_.gate_wait_s = SecondsSince(t0);
      last_.cache_hit = client_->stats().cache_hits > hits;
      AdoptIncoming();
    }
    last_.staleness = std::max<int64_t>(0, client_->clock() - client_->last_params_clock());
    return Status::OK();
  }
  StepStats last_step() const override { return last_; }
  int64_t clock() const override { return client_->clock(); }

  TrafficStats stats() const override {
    ClientStats c = client_->stats();
    TrafficStats t;
    t.bytes_sent = c.bytes_sent;
    t.bytes_received = c.bytes_received;
    t.cache_hits = c.cache_hits;
    t.local_steps = c.local_steps;
    t.incarnation = c.incarnation;
    t.acked_updates = c.acked_updates;
    auto lost = c.recovery_counters.find("replay_lost");
    t.reported_lost = lost == c.recovery_counters.end() ? 0 : lost->second;
    return t;
  }

 private:
  const std::string& table() const { return options_.table.name; }

  static double SecondsSince(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // A zeroed host buffer of size_ floats. On CUDA it is page-locked memory
  // from the device (transfers to and from it are asynchronous DMA), given
  // back through FreeHost by whichever thread drops the last reference (the
  // client may keep one past this object). An ordinary buffer on CPU, or
  // when page-locked memory runs out (copies then block but stay correct).
  FloatBuffer NewHostBuffer() {
    if (on_host_) return FloatBuffer(size_);
    auto* p = static_cast<float*>(device_->AllocHost(size_ * sizeof(float)));
    if (p == nullptr) {
      LOG_FIRST_N(WARNING, 1) << "no page-locked host memory for " << size_ * sizeof(float)
                              << " bytes on " << device_->Name()
                              << "; staging parameters in ordinary memory";
      return FloatBuffer(size_);
    }
    std::fill(p, p + size_, 0.0f);
    Device* const device = device_;
    return FloatBuffer::Wrap(p, size_, [device, p] { device->FreeHost(p); });
  }

  // A gradient buffer that the client still holds after its request
  // completed (e.g. queued for a resend) is left to it; the next gradient
  // goes to a fresh one.
  void ReplaceIfShared(FloatBuffer* grads) {
    if (grads->owner().use_count() > 1) *grads = NewHostBuffer();
  }

  // Makes the just-received parameters current. On CUDA they are uploaded on
  // the copy stream into the device buffer not in use (double buffering),
  // once the computation that last read it is done, and later computation
  // waits for the upload: the host does not block, and the copy overlaps
  // whatever is still queued on the compute stream.
  void AdoptIncoming() {
    // The buffer about to become incoming_ (and be handed to the next
    // request) is the one the previous upload reads from.
    if (!on_host_) device_->HostWaitEvent(params_uploaded_.get());
    std::swap(params_host_, incoming_);
    if (on_host_) return;
    const int target = 1 - current_;
    device_->RecordEvent(Stream::kCompute, released_[current_].get());
    device_->WaitEvent(Stream::kCopy, released_[target].get());
    device_->CopyToDeviceAsync(params_device_[target].data(), params_host_.data(),
                               params_host_.bytes());
    device_->RecordEvent(Stream::kCopy, params_uploaded_.get());
    device_->WaitEvent(Stream::kCompute, params_uploaded_.get());
    current_ = target;
  }

  // CUDA: copies the gradient into grads_host_ on the copy stream once the
  // computation marked by grads_ready_ has produced it, and waits for it.
  void DownloadGrads() {
    if (on_host_) return;
    device_->WaitEvent(Stream::kCopy, grads_ready_.get());
    device_->CopyToHostAsync(grads_host_.data(), grads_device_.data(), grads_host_.bytes());
    device_->RecordEvent(Stream::kCopy, grads_copied_.get());
    device_->HostWaitEvent(grads_copied_.get());
  }

  // Waits for a request with a bound, and names it in any error.
  Status Wait(std::future<Status> f, const char* what) {
    auto name = [&] { return std::string(what) + " of table '" + table() + "'"; };
    // Waits on this thread's own reads of the replies (Client::Drive) when it
    // can: no hand-off from the client's I/O thread.
    const auto ready = [&f] {
      return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    };
    const auto give_up =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.wait_timeout_ms);
    client_->Drive(ready, options_.wait_timeout_ms);
    if (f.wait_until(give_up) != std::future_status::ready) {
      // The client still references our buffers; they stay alive through
      // their shared owner, so abandoning the request is safe.
      incoming_ = NewHostBuffer();
      grads_host_ = NewHostBuffer();
      spare_grads_ = NewHostBuffer();
      return DeadlineExceededError(name() + ": no reply within " +
                                   std::to_string(options_.wait_timeout_ms) + " ms");
    }
    Status s = f.get();
    if (!s.ok()) return s.WithPrefix(name());
    return Status::OK();
  }

  // Constant after construction.
  Client* const client_;
  Device* const device_;
  const PsParamsOptions options_;
  const size_t size_;
  const bool on_host_;  // CPU device: the host buffers are the device buffers
  const bool split_;    // SSP: Push + cached Pull instead of PushPull.
  const bool pipeline_;  // Async: PushPull overlapped with the next step.

  // Host buffers handed to the client (page-locked on CUDA).
  FloatBuffer params_host_;  // The current parameters (CUDA: their upload's source).
  FloatBuffer incoming_;     // Receives the next parameters.
  FloatBuffer grads_host_;   // The next gradient (CUDA: its download's target).
  FloatBuffer spare_grads_;  // SSP and async pipeline: the in-flight request's gradient.
  std::future<Status> pending_push_;  // SSP: the previous step's push.
  std::future<Status> inflight_;      // Async pipeline: the previous PushPull.

  // CUDA only.
  DeviceBuffer<float> params_device_[2];  // params() is params_device_[current_].
  int current_ = 0;
  DeviceBuffer<float> grads_device_;
  // released_[i]: the end of the computation that read params_device_[i]
  // before params() moved to the other buffer.
  std::unique_ptr<DeviceEvent> released_[2];
  std::unique_ptr<DeviceEvent> params_uploaded_;  // The last upload (copy stream).
  std::unique_ptr<DeviceEvent> grads_ready_;      // The step's computation (compute stream).
  std::unique_ptr<DeviceEvent> grads_copied_;     // The gradient's download (copy stream).

  StepStats last_;
};

}  // namespace

StatusOr<std::unique_ptr<ParamSource>> NewPsParams(Client* client, Device* device,
                                                   const PsParamsOptions& options) {
  CHECK(client != nullptr && device != nullptr);
  if (options.table.type != TableType::kDense || options.table.size == 0) {
    return InvalidArgumentError("the model table must be dense and non-empty");
  }
  RETURN_IF_ERROR(options.table.Validate());
  Status created = client->CreateTable(options.table);
  if (!created.ok()) return created.WithPrefix("create table '" + options.table.name + "'");
  auto ps = std::make_unique<PsParams>(client, device, options);
  RETURN_IF_ERROR(ps->Start());
  return std::unique_ptr<ParamSource>(std::move(ps));
}

}  // namespace trainer
}  // namespace relaxps
