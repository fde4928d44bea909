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

class PsParams final : public ParamSource {
 public:
  PsParams(Client* client, Device* device, const PsParamsOptions& options)
      : client_(client),
        device_(device),
        options_(options),
        size_(options.table.size),
        on_host_(device->type() == kernels::DeviceType::kCpu),
        split_(client->job().consistency == "ssp"),
        pipeline_(client->job().consistency == "async" && options.pipeline_async),
        params_host_(size_),
        incoming_(size_),
        grads_host_(size_) {
    if (!on_host_) {
      params_device_ = DeviceBuffer<float>(device, size_);
      grads_device_ = DeviceBuffer<float>(device, size_);
    }
  }

  // Pulls the table's current values.
  Status Start() {
    RETURN_IF_ERROR(Wait(client_->Pull(table(), 0, incoming_), "pull"));
    std::swap(params_host_, incoming_);
    if (!on_host_) {
      device_->CopyToDevice(params_device_.data(), params_host_.data(), params_host_.bytes());
    }
    return Status::OK();
  }

  std::string Name() const override { return "ps"; }
  size_t size() const override { return size_; }
  const float* params() const override {
    return on_host_ ? params_host_.data() : params_device_.data();
  }
  float* grads() override { return on_host_ ? grads_host_.data() : grads_device_.data(); }

  // BSP and async: one PushPull per step (the server answers after the
  // push is applied and the gate allows). SSP: Push now, then after Clock()
  // a Pull that the client's parameter cache answers while it is fresh
  // enough, so most steps need no pull round trip.
  Status Update() override {
    if (!on_host_) {
      device_->CopyToHost(grads_host_.data(), grads_device_.data(), grads_host_.bytes());
    }
    if (split_) {
      if (pending_push_.valid()) RETURN_IF_ERROR(Wait(std::move(pending_push_), "push"));
      pending_push_ = client_->Push(table(), 0, grads_host_);
      grads_host_ = FloatBuffer(size_);  // The in-flight push owns the old one.
      return Status::OK();
    }
    if (pipeline_) {
      // Async: overlap the round trip with the next step's computation. The
      // step after next computes on the parameters this push returns.
      if (inflight_.valid()) {
        const auto t0 = std::chrono::steady_clock::now();
        RETURN_IF_ERROR(Wait(std::move(inflight_), "push-pull"));
        last_.gate_wait_s = SecondsSince(t0);
        AdoptIncoming();
      }
      inflight_ = client_->PushPull(table(), 0, grads_host_, incoming_);
      std::swap(grads_host_, spare_grads_);  // The request owns the other one now.
      return Status::OK();
    }
    // Receive into the spare buffer so that a failed request leaves params()
    // as it was.
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(Wait(client_->PushPull(table(), 0, grads_host_, incoming_), "push-pull"));
    last_.gate_wait_s = SecondsSince(t0);
    last_.cache_hit = false;
    AdoptIncoming();
    if (grads_host_.owner().use_count() > 1) {
      // The client kept the gradient (e.g. queued for a resend): leave it
      // that buffer and write the next gradient elsewhere.
      grads_host_ = FloatBuffer(size_);
    }
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
    return t;
  }

 private:
  const std::string& table() const { return options_.table.name; }

  static double SecondsSince(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // Makes the just-received parameters current.
  void AdoptIncoming() {
    std::swap(params_host_, incoming_);
    if (!on_host_) {
      device_->CopyToDevice(params_device_.data(), params_host_.data(), params_host_.bytes());
    }
  }

  // Waits for a request with a bound, and names it in any error.
  Status Wait(std::future<Status> f, const char* what) {
    auto name = [&] { return std::string(what) + " of table '" + table() + "'"; };
    if (f.wait_for(std::chrono::milliseconds(options_.wait_timeout_ms)) !=
        std::future_status::ready) {
      // The client still references our buffers; they stay alive through
      // their shared owner, so abandoning the request is safe.
      incoming_ = FloatBuffer(size_);
      grads_host_ = FloatBuffer(size_);
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

  FloatBuffer params_host_;
  FloatBuffer incoming_;  // receives the next parameters
  FloatBuffer grads_host_;
  DeviceBuffer<float> params_device_;  // CUDA only
  DeviceBuffer<float> grads_device_;   // CUDA only
  std::future<Status> pending_push_;   // SSP: the previous step's push.
  std::future<Status> inflight_;       // Async pipeline: the previous PushPull.
  FloatBuffer spare_grads_{size_};     // Async pipeline: the other gradient buffer.
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
