// ClientImpl: the implementation behind relaxps::Client (client/client.h).
//
// Split by responsibility: client/client.cc holds registration, heartbeats,
// the coordinator calls and table metadata; client/internal/requests.cc the
// requests it makes for its data path, Clock() and a role's replays.
// Splitting dense and row requests into parts and completing them is
// client/internal/data_path.h; sending one request part and
// deciding what its reply means (route, deadline, re-route, park, give up,
// the acknowledged updates counted) is client/internal/part_sender.h.
// Routing by shard map is
// client/internal/router.h, parking and resending across server restarts
// client/internal/resender.h, holding requests to a restarted server
// client/internal/server_gate.h, the SSP parameter cache
// client/internal/ssp_cache.h, the local copies of a worker that trains
// through a server's loss and its go-local/rejoin rules
// client/internal/local_fallback.h, the session with the coordinator
// (heartbeats, what the coordinator announced, the map watch)
// client/internal/member_session.h; requests.cc also implements the
// mechanisms a recovery role drives (recovery::ClientMechanisms).
//
// Recovery: the client never asks which policy runs. It makes the policy's
// client role (recovery/client_recovery.h) at registration, runs the
// mechanisms the role's features() ask for, asks the role at each decision
// point (a part whose server failed, a new map, a heartbeat, an
// acknowledged push) and implements recovery::ClientMechanisms for it.
//
// Thread-safety: as Client: every public method is safe from any thread.
// A request's callback runs on the transport's I/O thread, or inline on the
// calling thread when the request fails or is answered before it is sent
// (a local error, a cache hit).
#ifndef RELAXPS_CLIENT_INTERNAL_CLIENT_IMPL_H_
#define RELAXPS_CLIENT_INTERNAL_CLIENT_IMPL_H_

#include <algorithm>
#include <atomic>
#include <climits>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/internal/data_path.h"
#include "client/internal/local_fallback.h"
#include "client/internal/member_session.h"
#include "client/internal/part_sender.h"
#include "client/internal/resender.h"
#include "client/internal/router.h"
#include "client/internal/server_gate.h"
#include "client/internal/ssp_cache.h"
#include "common/buffer_pool.h"
#include "common/clock.h"
#include "common/coordinator_peers.h"
#include "common/fault_options.h"
#include "common/member_token.h"
#include "common/payload_codec.h"
#include "common/shard_map.h"
#include "common/thread_annotations.h"
#include "common/transport.h"
#include "recovery/client_recovery.h"

namespace relaxps {
namespace client_internal {

class ClientImpl final : public Client,
                         private recovery::ClientMechanisms,
                         private LocalFallback::Host,
                         private PartSender::Host,
                         private DataPath::Host {
 public:
  ClientImpl(const ClientOptions& options, const FaultOptions& faults)
      : options_(options),
        faults_(faults),
        clock_source_(ClockOrReal(options.clock)),
        session_(options.coordinator, options.coordinator_timeout_ms, clock_source_) {}
  ~ClientImpl() override;

  Status Init();

  const JobInfo& job() const override { return job_; }
  const ConsistencyPolicy& consistency_policy() const override { return *consistency_; }
  const RecoveryPolicy& recovery_policy() const override { return *recovery_; }
  int worker_id() const override { return job_.worker_id; }
  bool coordinator_healthy() const override {
    return session_.healthy() && JobError().ok();
  }
  Status CreateTable(const TableOptions& options) override;
  StatusOr<TableInfo> GetTable(const std::string& name) override;
  StatusOr<std::vector<TableInfo>> ListTables() override;
  Status SetLearningRate(const std::string& table, float lr) override;

  void Push(const std::string& table, uint64_t offset, FloatBuffer grads,
            Callback done) override {
    const size_t n = grads.size();
    data_path_->Dense(wire::PUSH, table, offset, n, std::move(grads), FloatBuffer(), std::move(done));
  }
  void Pull(const std::string& table, uint64_t offset, FloatBuffer out, Callback done) override {
    const size_t n = out.size();
    data_path_->Dense(wire::PULL, table, offset, n, FloatBuffer(), std::move(out), std::move(done));
  }
  void PushPull(const std::string& table, uint64_t offset, FloatBuffer grads, FloatBuffer out,
                Callback done) override {
    if (grads.size() != out.size()) {
      done(InvalidArgumentError("PushPull needs grads and out of the same size"));
      return;
    }
    const size_t n = out.size();
    data_path_->Dense(wire::PUSH_PULL, table, offset, n, std::move(grads), std::move(out), std::move(done));
  }
  void PullZeroCopy(const std::string& table, uint64_t offset, size_t n,
                    ParamsCallback done) override {
    data_path_->Dense(wire::PULL, table, offset, n, FloatBuffer(), FloatBuffer(), nullptr, std::move(done));
  }
  void PushPullZeroCopy(const std::string& table, uint64_t offset, FloatBuffer grads,
                        ParamsCallback done) override {
    const size_t n = grads.size();
    data_path_->Dense(wire::PUSH_PULL, table, offset, n, std::move(grads), FloatBuffer(), nullptr,
          std::move(done));
  }
  void PullRows(const std::string& table, KeyBuffer ids, FloatBuffer out,
                Callback done) override {
    data_path_->Sparse(wire::PULL_ROWS, table, std::move(ids), FloatBuffer(), std::move(out),
           std::move(done));
  }
  void PushRows(const std::string& table, KeyBuffer ids, FloatBuffer grads,
                Callback done) override {
    data_path_->Sparse(wire::PUSH_ROWS, table, std::move(ids), std::move(grads), FloatBuffer(),
           std::move(done));
  }

  Status Clock() override;
  Status Barrier() override;
  // Also ClientMechanisms and LocalFallback::Host.
  int64_t clock() const override { return clock_.load(); }
  int64_t last_params_clock() const override { return last_params_clock_.load(); }
  ClientStats stats() const override;
  Status ReportFinished(const Status& outcome, int timeout_ms) override;  // client.cc
  bool Drive(const std::function<bool()>& done, int timeout_ms) override {
    return rpc_->Drive(done, timeout_ms);
  }
  // This registration's member token (MemberTokenOf, client/testing.h).
  std::string member_token() const {
    MutexLock l(&token_mu_);
    return member_token_;
  }

 private:
  // Installs `proto` if newer; fails what is in flight to servers that moved
  // (so it is resent there) and resends parts parked for them.
  // Also PartSender::Host.
  Status SetMap(const wire::ShardMap& proto) override;
  Status JobError() const override;
  bool FirstFailoverAckIn(uint64_t epoch) override { return session_.FirstFailoverAckIn(epoch); }
  // InvalidArgument (counted in errors_) unless every value is finite. The
  // client checks a push that goes as several requests (parts of a split
  // push, several servers or buckets) whole before sending any, and a part
  // it applies itself (stateless); each server checks what it receives. So a
  // push refused for a NaN or Inf changes nothing anywhere.
  Status CheckPushFinite(const float* values, size_t n) override;  // Also LocalFallback::Host,
                                                                   // DataPath::Host.
  // A request made at `clock`, routed with the shard map of `map_version` (a
  // resend keeps both: it belongs to the clock and the split it was made with).
  Message NewRequest(wire::MsgType type, const std::string& table, int64_t clock,
                     uint64_t map_version) const override;  // Also LocalFallback::Host, DataPath::Host.
  StatusOr<Message> CallCoordinator(Message msg, bool retry_unavailable);
  // Holds at a barrier (the start barrier, or worker barrier `generation`)
  // until the coordinator lets it pass or answers at `timeout_ms`.
  Status WaitAtBarrier(bool start, int64_t generation, int timeout_ms);
  // Reports an acknowledged push part to the role (callers check
  // ClientFeatures::report_acked_pushes first: building `push` costs).
  void PushAcked(recovery::AckedPush push) override;  // DataPath::Host.
  void Heartbeat();
  // The REGISTER this client sends (requested_id: -1 or its old id).
  Message RegisterMessage(int requested_id) const;
  // Heartbeat thread: the coordinator answered NotFound (it does not count
  // this worker: declared dead after a pause, or a coordinator that lost its
  // registration). Registers again with the same id, keeping this process's
  // clock and incarnation (its exactly-once keys stay valid).
  Status RegisterAgain(const std::string& why);

  // ---- recovery::ClientMechanisms (recovery/client_recovery.h) -----------
  int64_t NowMs() const override { return clock_source_->NowMs(); }
  EventLog* events() const override { return options_.events.get(); }
  std::shared_ptr<const ShardMap> map() const override { return router_->map(); }
  // Keeps one map watch (a GET_SHARD_MAP the coordinator holds until its
  // map changes, coordinator/map_watchers.h) outstanding, so a failover's
  // map arrives within a message delay of the coordinator's decision, not
  // at the next heartbeat. Re-armed by each answer; after an error, by the
  // role's next call (its heartbeat hook). No-op while one is out.
  void WatchMap() override;
  void RetryParkedBefore(int64_t ms) override;
  // The local-copy mechanisms are the fallback's (no-ops without one).
  bool IsLocal(int server) const override { return ServedHere(server); }
  bool LostAt(int server, std::string* endpoint, bool* stalled) const override {
    return fallback_ != nullptr && fallback_->LostAt(server, endpoint, stalled);
  }
  void GoLocal(int server, const std::string& endpoint, bool stalled,
               const std::string& why) override {
    if (fallback_ != nullptr) fallback_->GoLocal(server, endpoint, stalled, why);
  }
  bool TakeOver(int holder, int spare) override {
    return fallback_ != nullptr && fallback_->TakeOver(holder, spare);
  }
  void Reassign(const std::string& table, uint64_t range_begin, int server) override {
    if (fallback_ != nullptr) fallback_->Reassign(table, range_begin, server);
  }
  void SendSeedCopies(const wire::HeartbeatReply& hr) override {
    if (fallback_ != nullptr) fallback_->SendSeedCopies(hr);
  }
  void ProbeStalledServers() override {
    if (fallback_ != nullptr) fallback_->ProbeStalledServers();
  }
  void Replay(int server, const recovery::AckedPush& push,
              std::function<void(const Status&, const wire::Header&)> done) override;
  void ReleaseServer(int server) override;

  // ---- LocalFallback::Host (client/internal/local_fallback.h) -------------
  void RaiseClock(int64_t clock) override {
    int64_t c = clock_.load();
    while (clock > c && !clock_.compare_exchange_weak(c, clock)) {
    }
  }
  bool shutting_down() const override { return shutting_down_.load(); }
  Frame EncodeValues(const FloatBuffer& values) const override {
    return EncodeFloats(values, encoding_);
  }
  void SendToServer(int server, std::function<Message()> make,
                    Transport::ReplyCallback done) override {
    parts_->Send(server, std::move(make), std::move(done));
  }
  void CountError() override { errors_.fetch_add(1); }
  StatusOr<Message> CallCoordinatorSync(Message msg, int timeout_ms) override {
    StampToken(&msg.header);
    return coordinators_.CallSync(std::move(msg), timeout_ms);
  }

  // ---- DataPath::Host (client/internal/data_path.h) -----------------------
  void SetParamsClock(int64_t params_clock) override { last_params_clock_.store(params_clock); }
  // Whether `server`'s parts are served from this worker's copies.
  bool ServedHere(int server) const { return fallback_ != nullptr && fallback_->IsLocal(server); }
  void Rejoin(int server, bool same_server, const char* why) override {
    if (fallback_ != nullptr) fallback_->Rejoin(server, same_server, why);
  }

  // Constant after Init().
  const ClientOptions options_;
  const FaultOptions faults_;
  const relaxps::Clock* const clock_source_;
  JobInfo job_;
  std::unique_ptr<ConsistencyPolicy> consistency_;
  std::unique_ptr<RecoveryPolicy> recovery_;
  // The policy's client role and the mechanisms it asked for.
  std::unique_ptr<recovery::ClientRecovery> role_;
  recovery::ClientFeatures features_;
  std::unique_ptr<Transport> rpc_;
  // Every coordinator of the job (--coordinator may list several); set in
  // Init(), then used from any thread.
  CoordinatorPeers coordinators_;
  wire::Encoding encoding_ = wire::ENC_FP32;
  std::unique_ptr<client_internal::Router> router_;
  std::unique_ptr<client_internal::Resender> resender_;
  std::unique_ptr<client_internal::ServerGate> gate_;
  std::unique_ptr<client_internal::SspCache> cache_;  // Null unless the policy caches reads.
  // Null unless the role keeps local copies (ClientFeatures::local_copies).
  std::unique_ptr<LocalFallback> fallback_;
  // Sends every request part and decides what its reply means; counts the
  // acknowledged updates (client/internal/part_sender.h).
  std::unique_ptr<PartSender> parts_;
  // Splits dense and row requests into parts, sends them through parts_ and
  // completes them (client/internal/data_path.h).
  std::unique_ptr<DataPath> data_path_;

  mutable Mutex mu_;
  std::string job_error_ GUARDED_BY(mu_);
  // Set (once, under mu_) when job_error_ is: JobError() of every request
  // reads it without taking mu_ while the job is fine.
  std::atomic<bool> has_job_error_{false};

  std::atomic<int64_t> clock_{0};
  std::atomic<int64_t> last_params_clock_{-1};
  std::atomic<uint64_t> errors_{0};

  std::atomic<bool> shutting_down_{false};
  // Set at the end of Init() (fallback_ made before) when the worker goes
  // local on a closed connection (ClientFeatures::probe_on_disconnect).
  std::atomic<bool> local_on_disconnect_{false};
  uint64_t incarnation_ = 0;  // Constant after Init(): this registration's.
  // This registration's member token (RegisterReply.member_token), carried
  // by every request; replaced by RegisterAgain.
  mutable Mutex token_mu_;
  std::string member_token_ GUARDED_BY(token_mu_);
  WireToken wire_token_ GUARDED_BY(token_mu_);  // member_token_ as headers carry it.
  void set_member_token(const std::string& token) {
    MutexLock l(&token_mu_);
    member_token_ = token;
    wire_token_ = ToWireToken(token);
  }
  // Sets `header`'s member token (no allocation: a request's hot path).
  void StampToken(wire::Header* header) const {
    MutexLock l(&token_mu_);
    SetMemberToken(wire_token_, header);
  }
  std::atomic<int64_t> barrier_generation_{0};  // This worker's next Barrier().
  // Records that the job failed (first reason wins) and fails what waits.
  void SetJobError(const std::string& reason);

  // The session with the coordinator: the heartbeat thread, its failures,
  // what the coordinator announced, the map watch
  // (client/internal/member_session.h). Declared last: its thread stops
  // before anything it uses goes.
  client_internal::MemberSession session_;
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_CLIENT_IMPL_H_
