#include "client/client.h"

#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/fault_injecting_transport.h"
#include "common/periodic_thread.h"
#include "common/rpc_client.h"
#include "common/shard_map.h"
#include "client/internal/local_replica.h"
#include "common/table.h"
#include "kernels/device.h"

namespace relaxps {

// ---- Future adapters (shared by every implementation) ------------------------

namespace {

std::pair<Client::Callback, std::future<Status>> MakePromise() {
  auto p = std::make_shared<std::promise<Status>>();
  std::future<Status> f = p->get_future();
  return {[p](const Status& s) { p->set_value(s); }, std::move(f)};
}

}  // namespace

std::future<Status> Client::Push(const std::string& table, uint64_t offset, FloatBuffer grads) {
  auto [cb, f] = MakePromise();
  Push(table, offset, std::move(grads), std::move(cb));
  return std::move(f);
}

std::future<Status> Client::Pull(const std::string& table, uint64_t offset, FloatBuffer out) {
  auto [cb, f] = MakePromise();
  Pull(table, offset, std::move(out), std::move(cb));
  return std::move(f);
}

std::future<Status> Client::PushPull(const std::string& table, uint64_t offset,
                                     FloatBuffer grads, FloatBuffer out) {
  auto [cb, f] = MakePromise();
  PushPull(table, offset, std::move(grads), std::move(out), std::move(cb));
  return std::move(f);
}

std::future<Status> Client::PullRows(const std::string& table, KeyBuffer ids, FloatBuffer out) {
  auto [cb, f] = MakePromise();
  PullRows(table, std::move(ids), std::move(out), std::move(cb));
  return std::move(f);
}

std::future<Status> Client::PushRows(const std::string& table, KeyBuffer ids,
                                     FloatBuffer grads) {
  auto [cb, f] = MakePromise();
  PushRows(table, std::move(ids), std::move(grads), std::move(cb));
  return std::move(f);
}

namespace {

// Completes a multi-part request: runs `done` once, after the last part, with
// the first error.
class Join {
 public:
  Join(int parts, Client::Callback done) : remaining_(parts), done_(std::move(done)) {}
  void PartDone(const Status& s) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!s.ok() && first_error_.ok()) first_error_ = s;
    }
    if (remaining_.fetch_sub(1) == 1) done_(first_error_);
  }

 private:
  std::atomic<int> remaining_;
  Client::Callback done_;
  std::mutex mu_;
  Status first_error_;
};

class ClientImpl final : public Client {
 public:
  explicit ClientImpl(const ClientOptions& options) : options_(options) {}
  ~ClientImpl() override;

  Status Init();

  const JobInfo& job() const override { return job_; }
  const ConsistencyPolicy& consistency_policy() const override { return *consistency_; }
  const RecoveryPolicy& recovery_policy() const override { return *recovery_; }
  int worker_id() const override { return job_.worker_id; }
  Status CreateTable(const TableOptions& options) override;
  StatusOr<TableInfo> GetTable(const std::string& name) override;
  StatusOr<std::vector<TableInfo>> ListTables() override;

  void Push(const std::string& table, uint64_t offset, FloatBuffer grads,
            Callback done) override {
    Dense(wire::PUSH, table, offset, grads.size(), std::move(grads), FloatBuffer(),
          std::move(done));
  }
  void Pull(const std::string& table, uint64_t offset, FloatBuffer out, Callback done) override {
    const size_t n = out.size();
    Dense(wire::PULL, table, offset, n, FloatBuffer(), std::move(out), std::move(done));
  }
  void PushPull(const std::string& table, uint64_t offset, FloatBuffer grads, FloatBuffer out,
                Callback done) override {
    if (grads.size() != out.size()) {
      done(InvalidArgumentError("PushPull needs grads and out of the same size"));
      return;
    }
    const size_t n = out.size();
    Dense(wire::PUSH_PULL, table, offset, n, std::move(grads), std::move(out), std::move(done));
  }
  void PullRows(const std::string& table, KeyBuffer ids, FloatBuffer out,
                Callback done) override {
    Sparse(wire::PULL_ROWS, table, std::move(ids), FloatBuffer(), std::move(out),
           std::move(done));
  }
  void PushRows(const std::string& table, KeyBuffer ids, FloatBuffer grads,
                Callback done) override {
    Sparse(wire::PUSH_ROWS, table, std::move(ids), std::move(grads), FloatBuffer(),
           std::move(done));
  }

  Status Clock() override;
  int64_t clock() const override { return clock_.load(); }
  int64_t last_params_clock() const override { return last_params_clock_.load(); }
  ClientStats stats() const override;

 private:
  std::shared_ptr<const ShardMap> map() const {
    std::lock_guard<std::mutex> l(mu_);
    return map_;
  }
  Status SetMap(const wire::ShardMap& proto);
  Status JobError() const;
  // Sends one request part to a server; `make` builds it (again for a
  // resend). Under --recovery=checkpoint a part that fails because its server
  // is gone (Unavailable, DeadlineExceeded) is parked until the shard map
  // names a new endpoint for that server (it restarted), then sent there;
  // after options_.recovery_timeout_ms it fails with the original error.
  void CallServer(int server, std::function<Message()> make, Transport::ReplyCallback done,
                  int64_t give_up_ms = 0);
  bool ResendsAcrossRestarts() const { return recovery_->ResendsAcrossRestarts(); }
  // Fails parked parts past their give-up time, or all of them with `all`.
  void ExpireParked(const Status& all);
  void Dense(wire::MsgType type, const std::string& table, uint64_t offset, size_t n,
             FloatBuffer grads, FloatBuffer out, Callback done);
  void Sparse(wire::MsgType type, const std::string& table, KeyBuffer ids, FloatBuffer grads,
              FloatBuffer out, Callback done);
  Frame EncodePayload(const FloatBuffer& values) const;
  // Copies a reply payload of n floats into out.
  Status DecodePayload(const Message& reply, float* out, size_t n) const;
  // A request made at `clock`, routed with the shard map of `map_version` (a
  // resend keeps both: it belongs to the clock and the split it was made with).
  Message NewRequest(wire::MsgType type, const std::string& table, int64_t clock,
                     uint64_t map_version) const;
  StatusOr<Message> CallCoordinator(Message msg, bool retry_unavailable);
  void Heartbeat();
  void MarkPushed(int server);

  // Sends one dense part (or, stateless, serves it locally); decodes the
  // reply into `dest` and completes the part on `join`.
  void SendDensePart(const std::string& table, const DenseSlice& slice,
                     std::function<Message()> make, FloatBuffer payload, FloatBuffer dest,
                     std::shared_ptr<std::atomic<int64_t>> min_clock, std::shared_ptr<Join> join);

  // ---- Stateless recovery (replica_ != nullptr) ----
  // Deadline of a request of `type` to a server.
  int ServerTimeoutMs(wire::MsgType type) const;
  // Starts training locally on `server`'s ranges (lost at `endpoint`).
  void GoLocal(int server, const std::string& endpoint, bool stalled, const std::string& why);
  // Serves one dense part from the local copy; lowers *min_clock to the
  // copy's clock.
  Status ServeLocally(const std::string& table, const DenseSlice& s, const FloatBuffer& grads,
                      const FloatBuffer& dest, std::atomic<int64_t>* min_clock);
  // After a map change: local servers that are back (seeded, at a new
  // endpoint) are used again; servers the map shows dead go local.
  void FollowMap(const ShardMap& m);
  // Ends local mode for `server`; what was changed locally since the last
  // copy sent to the coordinator goes to it as raw deltas.
  void Rejoin(int server, const char* why);
  // Heartbeat thread: answers the coordinator's re-seed requests, and
  // probes servers lost by a stall that the map still shows alive.
  void StatelessHeartbeat(const wire::HeartbeatReply& hr);
  std::unique_ptr<client_internal::LocalReplica> replica_;  // Set in Init().

  // Constant after Init().
  const ClientOptions options_;
  JobInfo job_;
  std::unique_ptr<ConsistencyPolicy> consistency_;
  std::unique_ptr<RecoveryPolicy> recovery_;
  std::unique_ptr<Transport> rpc_;
  int coordinator_peer_ = -1;
  wire::Encoding encoding_ = wire::ENC_FP32;
  std::unique_ptr<kernels::Device> cpu_;  // fp16 conversion.

  mutable std::mutex mu_;
  std::shared_ptr<const ShardMap> map_;  // Guarded by mu_.
  std::vector<int> server_peers_;        // Guarded by mu_. Map index -> peer.
  std::vector<int64_t> last_push_clock_;  // Guarded by mu_. Per server.
  std::string job_error_;                // Guarded by mu_.
  // A request part waiting for its server to come back (CallServer).
  struct Parked {
    int server;
    std::string endpoint;  // The server's endpoint when it failed.
    std::function<Message()> make;
    Transport::ReplyCallback done;
    int64_t give_up_ms;
    Status error;  // Why it failed.
  };
  std::vector<Parked> parked_;  // Guarded by mu_.

  // SSP parameter cache: the last dense pull of each table.
  struct CacheEntry {
    uint64_t offset = 0;
    FloatBuffer values;
    int64_t params_clock = -1;
  };
  bool CacheEnabled() const { return cache_enabled_; }
  // Serves a pull from the cache if fresh enough; returns false otherwise.
  bool ServeFromCache(const std::string& table, uint64_t offset, const FloatBuffer& out);
  void FillCache(const std::string& table, uint64_t offset, const FloatBuffer& values,
                 int64_t params_clock);

  bool cache_enabled_ = false;  // Constant after Init().
  std::mutex cache_mu_;
  std::unordered_map<std::string, CacheEntry> cache_;  // Guarded by cache_mu_.
  std::atomic<uint64_t> cache_hits_{0}, cache_misses_{0};

  std::atomic<int64_t> clock_{0};
  std::atomic<int64_t> last_params_clock_{-1};
  std::atomic<uint64_t> errors_{0};

  int heartbeat_failures_ = 0;  // Heartbeat thread only.
  std::unique_ptr<PeriodicThread> heartbeat_;
};

Message ClientImpl::NewRequest(wire::MsgType type, const std::string& table, int64_t clock,
                               uint64_t map_version) const {
  Message m;
  m.header.set_type(type);
  m.header.set_table(table);
  m.header.set_sender(job_.worker_id);
  m.header.set_clock(clock);
  m.header.set_shard_map_version(map_version);
  m.header.set_encoding(encoding_);
  return m;
}

StatusOr<Message> ClientImpl::CallCoordinator(Message msg, bool retry_unavailable) {
  const int64_t give_up = MonotonicMs() + options_.request_timeout_ms;
  while (true) {
    Message attempt;
    attempt.header = msg.header;
    const int64_t left = std::max<int64_t>(100, give_up - MonotonicMs());
    StatusOr<Message> reply =
        rpc_->CallSync(coordinator_peer_, std::move(attempt), static_cast<int>(std::min<int64_t>(left, 2000)));
    const StatusCode code = reply.status().code();
    const bool retry = code == StatusCode::kDeadlineExceeded ||
                       (retry_unavailable && code == StatusCode::kUnavailable);
    if (!retry || MonotonicMs() >= give_up) {
      return reply.ok() ? std::move(reply) : StatusOr<Message>(reply.status().WithPrefix("coordinator " + options_.coordinator));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Status ClientImpl::Init() {
  if (options_.coordinator.empty()) return InvalidArgumentError("coordinator endpoint is empty");
  if (options_.role != "worker" && options_.role != "observer") {
    return InvalidArgumentError("role must be worker or observer");
  }
  if (options_.wire_dtype == "fp16") {
    encoding_ = wire::ENC_FP16;
  } else if (options_.wire_dtype != "fp32") {
    return InvalidArgumentError("wire_dtype must be fp32 or fp16, got '" + options_.wire_dtype + "'");
  }
  kernels::DeviceOptions dopt;
  ASSIGN_OR_RETURN(cpu_, kernels::NewDevice(dopt));
  RpcClientOptions ro;
  ro.default_timeout_ms = options_.request_timeout_ms;
  rpc_ = std::make_unique<RpcClient>(ro);
  if (options_.faults.any()) {
    rpc_ = FaultInjectingTransport::Wrap(std::move(rpc_), options_.faults);
  }
  coordinator_peer_ = rpc_->Connect(options_.coordinator);

  Message reg;
  reg.header.set_type(wire::REGISTER);
  wire::RegisterRequest* r = reg.header.mutable_register_request();
  r->set_role(options_.role);
  r->set_requested_id(options_.worker_id);
  r->set_pid(getpid());
  ASSIGN_OR_RETURN(Message reply, CallCoordinator(std::move(reg), true));
  const wire::RegisterReply& rr = reply.header.register_reply();
  job_.worker_id = rr.id();
  ASSIGN_OR_RETURN(job_.consistency, ParseConsistencyModel(rr.job().consistency()));
  job_.staleness = rr.job().staleness();
  ASSIGN_OR_RETURN(job_.recovery, ParseRecoveryMode(rr.job().recovery()));
  ASSIGN_OR_RETURN(consistency_, NewConsistencyPolicy({job_.consistency, job_.staleness}));
  ASSIGN_OR_RETURN(recovery_, NewRecoveryPolicy(job_.recovery));
  job_.num_servers = rr.job().num_servers();
  job_.expected_workers = rr.job().num_workers();
  clock_.store(rr.start_clock());
  cache_enabled_ = options_.ssp_cache && consistency_->ServesCachedReads();
  if (recovery_->TrainsThroughServerLoss() && options_.role == "worker") {
    if (options_.local_after_ms < 1) return InvalidArgumentError("local_after_ms must be >= 1");
    replica_ = std::make_unique<client_internal::LocalReplica>(cpu_.get());
  }
  RETURN_IF_ERROR(SetMap(rr.shard_map()));
  if (options_.role == "worker") {
    heartbeat_ = std::make_unique<PeriodicThread>(options_.heartbeat_ms, [this] { Heartbeat(); });
  }
  return Status::OK();
}

ClientImpl::~ClientImpl() {
  if (heartbeat_ != nullptr) {
    heartbeat_->Stop();
    Message bye;
    bye.header.set_type(wire::DEREGISTER);
    bye.header.set_sender(job_.worker_id);
    rpc_->CallSync(coordinator_peer_, std::move(bye), 1000).status().IgnoreError();
  }
  rpc_.reset();  // Fails anything still pending with Aborted.
  ExpireParked(AbortedError("client is shutting down"));
}

Status ClientImpl::SetMap(const wire::ShardMap& proto) {
  ASSIGN_OR_RETURN(ShardMap m, ShardMap::FromProto(proto));
  auto next = std::make_shared<const ShardMap>(std::move(m));
  std::vector<std::pair<int, std::string>> moved;  // Old peer of a restarted server, its id.
  std::vector<Parked> resend;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (map_ && map_->version() >= next->version()) return Status::OK();
    server_peers_.resize(next->num_servers(), -1);
    last_push_clock_.resize(next->num_servers(), -1);
    for (int i = 0; i < next->num_servers(); ++i) {
      const std::string& ep = next->server_endpoint(i);
      if (map_ && i < map_->num_servers() && server_peers_[i] >= 0 && !ep.empty() &&
          map_->server_endpoint(i) != ep) {
        moved.emplace_back(server_peers_[i], "server " + std::to_string(i) + " moved to " + ep);
      }
      if (!ep.empty()) server_peers_[i] = rpc_->Connect(ep);
    }
    map_ = next;
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (next->server_endpoint(it->server) != it->endpoint &&
          !next->server_endpoint(it->server).empty()) {
        resend.push_back(std::move(*it));
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Requests still waiting on a dead server's old endpoint fail now (and are
  // resent by CallServer) instead of at their deadlines.
  for (const auto& [peer, why] : moved) {
    LOG(INFO) << why << "; resending what it had not answered";
    rpc_->CancelPeer(peer, UnavailableError(why));
  }
  for (Parked& p : resend) {
    CallServer(p.server, std::move(p.make), std::move(p.done), p.give_up_ms);
  }
  if (replica_ != nullptr) FollowMap(*next);
  return Status::OK();
}

// ---- Stateless recovery ---------------------------------------------------------

int ClientImpl::ServerTimeoutMs(wire::MsgType type) const {
  if (replica_ == nullptr) return options_.request_timeout_ms;
  const bool gated = (type == wire::PULL || type == wire::PUSH_PULL) &&
                     consistency_->model() != ConsistencyModel::kAsync;
  return gated ? options_.request_timeout_ms
               : std::min(options_.request_timeout_ms, options_.local_after_ms);
}

void ClientImpl::GoLocal(int server, const std::string& endpoint, bool stalled,
                         const std::string& why) {
  if (!replica_->GoLocal(server, endpoint, stalled)) return;
  LOG(WARNING) << "server " << server << " (" << endpoint << ") lost: " << why
               << "; training on this worker's copy of its ranges until it is replaced";
  int peer = -1;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (server < static_cast<int>(server_peers_.size())) peer = server_peers_[server];
  }
  // Whatever else waits on it is served locally now, not at its deadline.
  if (peer >= 0) rpc_->CancelPeer(peer, UnavailableError("server " + std::to_string(server) + " lost"));
}

Status ClientImpl::ServeLocally(const std::string& table, const DenseSlice& s,
                                const FloatBuffer& grads, const FloatBuffer& dest,
                                std::atomic<int64_t>* min_clock) {
  const wire::TableShards* ts = map()->FindTable(table);
  if (ts == nullptr) return NotFoundError("unknown table '" + table + "'");
  StatusOr<int64_t> clock =
      replica_->Serve(s.server, table, s.range_begin, TableFromProto(ts->table()).optimizer,
                      s.begin, grads.empty() ? nullptr : grads.data(),
                      dest.empty() ? nullptr : dest.data(), s.count);
  if (!clock.ok()) {
    errors_.fetch_add(1);
    return clock.status();
  }
  int64_t seen = min_clock->load();
  while (*clock < seen && !min_clock->compare_exchange_weak(seen, *clock)) {
  }
  return Status::OK();
}

void ClientImpl::FollowMap(const ShardMap& m) {
  for (int i = 0; i < m.num_servers(); ++i) {
    const wire::ServerInfo& info = m.proto().servers(i);
    std::string lost_at;
    bool stalled = false;
    if (!replica_->LostAt(i, &lost_at, &stalled)) {
      if (!info.alive() && !info.endpoint().empty()) {
        GoLocal(i, info.endpoint(), false, "the coordinator declared it dead");
      }
    } else if (info.alive() && !info.endpoint().empty() && info.endpoint() != lost_at) {
      Rejoin(i, "it was replaced and seeded");
    }
  }
}

void ClientImpl::Rejoin(int server, const char* why) {
  std::vector<client_internal::RangeDelta> deltas = replica_->Rejoin(server);
  LOG(INFO) << "server " << server << " is back (" << why << "); " << deltas.size()
            << " range(s) changed locally since the last copy go to it as raw deltas";
  const uint64_t version = map()->version();
  for (client_internal::RangeDelta& d : deltas) {
    const int64_t clock = clock_.load();
    FloatBuffer delta = std::move(d.delta);
    CallServer(
        server,
        [this, table = d.table, begin = d.begin, delta, clock, version] {
          Message req = NewRequest(wire::PUSH, table, clock, version);
          req.header.set_key_begin(begin);
          req.header.set_key_count(delta.size());
          req.header.set_raw_delta(true);
          req.frames.push_back(EncodePayload(delta));
          return req;
        },
        [server](const Status& s, Message) {
          if (!s.ok()) LOG(WARNING) << "local change for server " << server << " lost: " << s;
        });
  }
}

void ClientImpl::StatelessHeartbeat(const wire::HeartbeatReply& hr) {
  for (const wire::ReseedRequest& q : hr.reseed()) {
    Message copy;
    copy.header.set_type(wire::SEED_COPY);
    copy.header.set_sender(job_.worker_id);
    wire::SeedData* d = copy.header.mutable_seed_data();
    d->set_server(q.server());
    d->set_map_version(q.map_version());
    d->set_worker(job_.worker_id);
    d->set_worker_clock(clock_.load());
    replica_->FillSeedCopy(q.server(), d, &copy.frames);
    LOG(INFO) << "sending the coordinator this worker's copy of server " << q.server()
              << "'s " << d->ranges_size() << " range(s) at clock " << d->worker_clock();
    StatusOr<Message> reply = rpc_->CallSync(coordinator_peer_, std::move(copy), 3000);
    if (!reply.ok()) LOG(WARNING) << "SEED_COPY for server " << q.server() << ": " << reply.status();
  }
  // A server lost by a stall that the map still shows alive at the same
  // endpoint may just have been slow: probe it, and hand back the change.
  std::shared_ptr<const ShardMap> m = map();
  for (int i = 0; i < m->num_servers(); ++i) {
    std::string lost_at;
    bool stalled = false;
    if (!replica_->LostAt(i, &lost_at, &stalled) || !stalled) continue;
    const wire::ServerInfo& info = m->proto().servers(i);
    if (!info.alive() || info.endpoint() != lost_at) continue;
    int peer = -1;
    {
      std::lock_guard<std::mutex> l(mu_);
      peer = server_peers_[i];
    }
    Message probe;
    probe.header.set_type(wire::SERVER_STATS);
    probe.header.set_sender(job_.worker_id);
    if (rpc_->CallSync(peer, std::move(probe), options_.local_after_ms).ok()) {
      Rejoin(i, "it answered a probe: it was slow, not lost");
    }
  }
}

void ClientImpl::CallServer(int server, std::function<Message()> make,
                            Transport::ReplyCallback done, int64_t give_up_ms) {
  int peer = -1;
  std::string endpoint;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (server < static_cast<int>(server_peers_.size())) {
      peer = server_peers_[server];
      endpoint = map_->server_endpoint(server);
    }
  }
  if (peer < 0) {
    done(UnavailableError("server " + std::to_string(server) + " has no endpoint in the shard map"),
         Message());
    return;
  }
  Message request = make();
  const int timeout_ms = ServerTimeoutMs(request.header.type());
  rpc_->Call(peer, std::move(request), timeout_ms,
             [this, server, endpoint, give_up_ms, make = std::move(make),
              done = std::move(done)](const Status& st, Message reply) mutable {
               if (st.code() == StatusCode::kWrongShard && reply.header.has_shard_map()) {
                 // "Moved": the server routes with a newer map; adopt it.
                 Status s = SetMap(reply.header.shard_map());
                 if (!s.ok()) LOG(ERROR) << "bad shard map from server " << server << ": " << s;
               }
               const bool lost = st.code() == StatusCode::kUnavailable ||
                                 st.code() == StatusCode::kDeadlineExceeded;
               if (st.ok() || !lost || !ResendsAcrossRestarts() || !JobError().ok()) {
                 done(st, std::move(reply));
                 return;
               }
               const int64_t now = MonotonicMs();
               if (give_up_ms == 0) give_up_ms = now + options_.recovery_timeout_ms;
               if (now >= give_up_ms) {
                 done(st, Message());
                 return;
               }
               bool restarted = false;
               {
                 std::lock_guard<std::mutex> l(mu_);
                 const std::string& current = map_->server_endpoint(server);
                 restarted = !current.empty() && current != endpoint;
                 if (!restarted) {
                   parked_.push_back(Parked{server, endpoint, std::move(make), std::move(done),
                                            give_up_ms, st});
                 }
               }
               if (restarted) CallServer(server, std::move(make), std::move(done), give_up_ms);
             });
}

void ClientImpl::ExpireParked(const Status& all) {
  std::vector<Parked> expired;
  {
    std::lock_guard<std::mutex> l(mu_);
    const int64_t now = MonotonicMs();
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (!all.ok() || now >= it->give_up_ms) {
        expired.push_back(std::move(*it));
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Parked& p : expired) {
    p.done(all.ok() ? p.error.WithPrefix("server " + std::to_string(p.server) +
                                         " did not come back within " +
                                         std::to_string(options_.recovery_timeout_ms) + " ms")
                    : all,
           Message());
  }
}

Status ClientImpl::JobError() const {
  std::lock_guard<std::mutex> l(mu_);
  return job_error_.empty() ? Status::OK() : AbortedError("job failed: " + job_error_);
}

void ClientImpl::Heartbeat() {
  ExpireParked(JobError());
  Message hb;
  hb.header.set_type(wire::HEARTBEAT);
  hb.header.set_sender(job_.worker_id);
  wire::HeartbeatRequest* h = hb.header.mutable_heartbeat();
  h->set_role("worker");
  h->set_id(job_.worker_id);
  h->set_clock(clock_.load());
  h->set_shard_map_version(map()->version());
  StatusOr<Message> reply =
      rpc_->CallSync(coordinator_peer_, std::move(hb), std::max(500, options_.heartbeat_ms * 5));
  if (!reply.ok()) {
    if (++heartbeat_failures_ % 10 == 1) {
      LOG(WARNING) << "heartbeat to coordinator failed: " << reply.status();
    }
    return;
  }
  heartbeat_failures_ = 0;
  const wire::HeartbeatReply& hr = reply->header.heartbeat_reply();
  if (!hr.job_error().empty()) {
    bool first = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      first = job_error_.empty();
      job_error_ = hr.job_error();
    }
    if (first) {
      LOG(ERROR) << "job failed: " << hr.job_error();
      // Requests waiting on a dead server would otherwise wait for their
      // deadlines; fail them now. The coordinator stays reachable.
      rpc_->CancelAll(AbortedError("job failed: " + hr.job_error()));
    }
  }
  if (hr.has_shard_map()) {
    Status s = SetMap(hr.shard_map());
    if (!s.ok()) LOG(ERROR) << "bad shard map from coordinator: " << s;
  }
  if (replica_ != nullptr) StatelessHeartbeat(hr);
}

Status ClientImpl::CreateTable(const TableOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  Message m;
  m.header.set_type(wire::CREATE_TABLE);
  m.header.set_sender(job_.worker_id);
  TableToProto(options, m.header.mutable_create_table());
  ASSIGN_OR_RETURN(Message reply, CallCoordinator(std::move(m), true));
  return SetMap(reply.header.shard_map());
}

StatusOr<std::vector<TableInfo>> ClientImpl::ListTables() {
  Message m;
  m.header.set_type(wire::GET_SHARD_MAP);
  ASSIGN_OR_RETURN(Message reply, CallCoordinator(std::move(m), false));
  RETURN_IF_ERROR(SetMap(reply.header.shard_map()));
  std::vector<TableInfo> out;
  for (const wire::TableShards& ts : reply.header.shard_map().tables()) {
    out.push_back(TableInfo{TableFromProto(ts.table())});
  }
  return out;
}

StatusOr<TableInfo> ClientImpl::GetTable(const std::string& name) {
  if (const wire::TableShards* ts = map()->FindTable(name)) return TableInfo{TableFromProto(ts->table())};
  ASSIGN_OR_RETURN(auto tables, ListTables());
  for (const TableInfo& t : tables) {
    if (t.options.name == name) return t;
  }
  return NotFoundError("unknown table '" + name + "'");
}

Frame ClientImpl::EncodePayload(const FloatBuffer& values) const {
  if (encoding_ != wire::ENC_FP16) return Frame::Share(values);
  Buffer<uint16_t> half = Buffer<uint16_t>::Uninitialized(values.size());
  cpu_->FloatToHalf(values.data(), half.data(), values.size());
  return Frame::Share(half);
}

Status ClientImpl::DecodePayload(const Message& reply, float* out, size_t n) const {
  if (reply.frames.size() != 1) {
    return InternalError("reply has " + std::to_string(reply.frames.size()) + " frames, expected 1");
  }
  const Frame& f = reply.frames[0];
  if (reply.header.encoding() == wire::ENC_FP16) {
    if (f.size() != n * 2) return InternalError("fp16 reply of wrong size");
    cpu_->HalfToFloat(f.as<uint16_t>(), out, n);
  } else {
    if (f.size() != n * 4) return InternalError("fp32 reply of wrong size");
    std::memcpy(out, f.data(), n * 4);
  }
  return Status::OK();
}

void ClientImpl::MarkPushed(int server) {
  std::lock_guard<std::mutex> l(mu_);
  if (server < static_cast<int>(last_push_clock_.size())) last_push_clock_[server] = clock_.load();
}

void ClientImpl::Dense(wire::MsgType type, const std::string& table, uint64_t offset, size_t n,
                       FloatBuffer grads, FloatBuffer out, Callback done) {
  Status err = JobError();
  if (!err.ok()) {
    done(err);
    return;
  }
  if (type == wire::PULL && CacheEnabled()) {
    if (ServeFromCache(table, offset, out)) {
      done(Status::OK());
      return;
    }
  }
  std::shared_ptr<const ShardMap> m = map();
  StatusOr<std::vector<DenseSlice>> slices = m->SplitDense(table, offset, n);
  if (!slices.ok()) {
    errors_.fetch_add(1);
    done(slices.status());
    return;
  }
  // Parts report the clock their shard reflects; the request reflects the
  // minimum, published when the last part completes.
  auto min_clock = std::make_shared<std::atomic<int64_t>>(INT64_MAX);
  if (type != wire::PUSH) {
    done = [this, min_clock, table, offset, out, done = std::move(done)](const Status& st) {
      if (st.ok()) {
        last_params_clock_.store(min_clock->load());
        if (CacheEnabled()) FillCache(table, offset, out, min_clock->load());
      }
      done(st);
    };
  }
  auto join = std::make_shared<Join>(static_cast<int>(slices->size()), std::move(done));
  for (const DenseSlice& s : *slices) {
    const bool with_payload = type != wire::PULL;
    const FloatBuffer payload = with_payload ? grads.Slice(s.offset, s.count) : FloatBuffer();
    if (with_payload) MarkPushed(s.server);
    auto make = [this, type, table, begin = s.begin, count = s.count, with_payload, payload,
                 clock = clock_.load(), version = m->version()] {
      Message req = NewRequest(type, table, clock, version);
      req.header.set_key_begin(begin);
      req.header.set_key_count(count);
      if (with_payload) req.frames.push_back(EncodePayload(payload));
      return req;
    };
    FloatBuffer dest = type == wire::PUSH ? FloatBuffer() : out.Slice(s.offset, s.count);
    SendDensePart(table, s, std::move(make), payload, dest, min_clock, join);
  }
}

void ClientImpl::SendDensePart(const std::string& table, const DenseSlice& slice,
                               std::function<Message()> make, FloatBuffer payload,
                               FloatBuffer dest, std::shared_ptr<std::atomic<int64_t>> min_clock,
                               std::shared_ptr<Join> join) {
  if (replica_ != nullptr && replica_->IsLocal(slice.server)) {
    join->PartDone(ServeLocally(table, slice, payload, dest, min_clock.get()));
    return;
  }
  const std::string endpoint = map()->server_endpoint(slice.server);
  const std::string where = "server " + std::to_string(slice.server) + " (" + endpoint + ")";
  std::function<Message()> resend = replica_ != nullptr ? make : nullptr;
  CallServer(
      slice.server, std::move(make),
      [this, join, dest, where, min_clock, table, slice, payload, endpoint,
       resend = std::move(resend)](const Status& st, Message reply) {
        Status result = st;
        const bool lost = st.code() == StatusCode::kUnavailable ||
                          st.code() == StatusCode::kDeadlineExceeded;
        if (replica_ != nullptr && lost && JobError().ok()) {
          // Stateless: never wait for a lost server. A part sent to an
          // endpoint the map has replaced since goes to the new server
          // (which holds nothing of the old one's state); otherwise the
          // server goes local and the part is served from the copy.
          std::shared_ptr<const ShardMap> now = map();
          const std::string current = now->server_endpoint(slice.server);
          if (current != endpoint && !current.empty() &&
              now->proto().servers(slice.server).alive()) {
            SendDensePart(table, slice, resend, payload, dest, min_clock, join);
            return;
          }
          GoLocal(slice.server, endpoint, st.code() == StatusCode::kDeadlineExceeded,
                  st.ToString());
          join->PartDone(ServeLocally(table, slice, payload, dest, min_clock.get()));
          return;
        }
        if (result.ok() && !dest.empty()) {
          result = DecodePayload(reply, dest.data(), dest.size());
          int64_t seen = min_clock->load();
          const int64_t mine = reply.header.params_clock();
          while (mine < seen && !min_clock->compare_exchange_weak(seen, mine)) {
          }
          if (result.ok() && replica_ != nullptr) {
            replica_->Remember(slice.server, table, slice.range_begin, slice.range_end,
                               slice.begin, dest.data(), dest.size(), mine);
            // Clocks never roll back: a server seeded at a higher clock than
            // this worker's moves it forward.
            int64_t c = clock_.load();
            while (mine > c && !clock_.compare_exchange_weak(c, mine)) {
            }
          }
        }
        if (!result.ok()) {
          errors_.fetch_add(1);
          result = result.WithPrefix(where);
        }
        join->PartDone(result);
      });
}

void ClientImpl::Sparse(wire::MsgType type, const std::string& table, KeyBuffer ids,
                        FloatBuffer grads, FloatBuffer out, Callback done) {
  Status err = JobError();
  if (!err.ok()) {
    done(err);
    return;
  }
  std::shared_ptr<const ShardMap> m = map();
  const wire::TableShards* ts = m->FindTable(table);
  if (ts == nullptr || ts->table().type() != static_cast<int>(TableType::kSparse)) {
    done(ts == nullptr ? NotFoundError("unknown table '" + table + "'")
                       : InvalidArgumentError("table '" + table + "' is not sparse"));
    return;
  }
  const size_t width = ts->table().row_width();
  const size_t n = ids.size();
  if (n == 0) {
    done(Status::OK());
    return;
  }
  const FloatBuffer& values = type == wire::PUSH_ROWS ? grads : out;
  if (values.size() != n * width) {
    done(InvalidArgumentError("expected " + std::to_string(n * width) + " floats for " +
                              std::to_string(n) + " rows of width " + std::to_string(width) +
                              ", got " + std::to_string(values.size())));
    return;
  }
  // Group row positions by owner.
  const int servers = m->num_servers();
  std::vector<std::vector<uint32_t>> positions(servers);
  for (size_t i = 0; i < n; ++i) positions[m->SparseServer(ids[i])].push_back(static_cast<uint32_t>(i));
  int parts = 0;
  for (const auto& p : positions) parts += p.empty() ? 0 : 1;
  auto join = std::make_shared<Join>(parts, std::move(done));
  for (int s = 0; s < servers; ++s) {
    const std::vector<uint32_t>& pos = positions[s];
    if (pos.empty()) continue;
    KeyBuffer part_ids = KeyBuffer::Uninitialized(pos.size());
    for (size_t i = 0; i < pos.size(); ++i) part_ids[i] = ids[pos[i]];
    FloatBuffer part;
    if (type == wire::PUSH_ROWS) {
      part = FloatBuffer::Uninitialized(pos.size() * width);
      for (size_t i = 0; i < pos.size(); ++i) {
        std::memcpy(part.data() + i * width, grads.data() + pos[i] * width, width * sizeof(float));
      }
      MarkPushed(s);
    }
    auto make = [this, type, table, part_ids, part, clock = clock_.load(),
                 version = m->version()] {
      Message req = NewRequest(type, table, clock, version);
      req.header.set_key_count(part_ids.size());
      req.frames.push_back(Frame::Share(part_ids));
      if (type == wire::PUSH_ROWS) req.frames.push_back(EncodePayload(part));
      return req;
    };
    auto shared_pos = std::make_shared<std::vector<uint32_t>>(pos);
    CallServer(s, std::move(make),
               [this, join, out, shared_pos, width, type, s](const Status& st, Message reply) {
                 Status result = st;
                 if (result.ok() && type == wire::PULL_ROWS) {
                   std::vector<float> tmp(shared_pos->size() * width);
                   result = DecodePayload(reply, tmp.data(), tmp.size());
                   if (result.ok()) {
                     for (size_t i = 0; i < shared_pos->size(); ++i) {
                       std::memcpy(out.data() + (*shared_pos)[i] * width, tmp.data() + i * width,
                                   width * sizeof(float));
                     }
                   }
                 }
                 if (!result.ok()) {
                   errors_.fetch_add(1);
                   result = result.WithPrefix("server " + std::to_string(s));
                 }
                 join->PartDone(result);
               });
  }
}

Status ClientImpl::Clock() {
  RETURN_IF_ERROR(JobError());
  const int64_t c = clock_.load();
  // Servers that got no push at this clock still need to learn it completed.
  std::vector<int> servers;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t s = 0; s < last_push_clock_.size(); ++s) {
      if (last_push_clock_[s] != c && server_peers_[s] >= 0 &&
          (replica_ == nullptr || !replica_->IsLocal(static_cast<int>(s)))) {
        servers.push_back(static_cast<int>(s));
      }
    }
  }
  for (int server : servers) {
    CallServer(
        server,
        [this, c, version = map()->version()] {
          return NewRequest(wire::CLOCK, "", c, version);
        },
        [](const Status& s, Message) {
          if (!s.ok()) VLOG(1) << "clock message failed: " << s;
        });
  }
  clock_.fetch_add(1);
  return Status::OK();
}

bool ClientImpl::ServeFromCache(const std::string& table, uint64_t offset,
                                const FloatBuffer& out) {
  const int64_t needed = clock_.load() - consistency_->staleness_bound();
  {
    std::lock_guard<std::mutex> l(cache_mu_);
    auto it = cache_.find(table);
    if (it != cache_.end()) {
      const CacheEntry& e = it->second;
      const bool covers = offset >= e.offset && offset + out.size() <= e.offset + e.values.size();
      if (covers && e.params_clock >= needed) {
        std::memcpy(out.data(), e.values.data() + (offset - e.offset), out.bytes());
        last_params_clock_.store(e.params_clock);
        cache_hits_.fetch_add(1);
        return true;
      }
    }
  }
  cache_misses_.fetch_add(1);
  return false;
}

void ClientImpl::FillCache(const std::string& table, uint64_t offset, const FloatBuffer& values,
                           int64_t params_clock) {
  std::lock_guard<std::mutex> l(cache_mu_);
  CacheEntry& e = cache_[table];
  if (e.values.size() != values.size()) e.values = FloatBuffer::Uninitialized(values.size());
  std::memcpy(e.values.data(), values.data(), values.bytes());
  e.offset = offset;
  e.params_clock = params_clock;
}

ClientStats ClientImpl::stats() const {
  TransportStats r = rpc_->stats();
  ClientStats s;
  s.bytes_sent = r.bytes_sent;
  s.bytes_received = r.bytes_received;
  s.requests = r.requests;
  s.errors = errors_.load();
  s.cache_hits = cache_hits_.load();
  s.cache_misses = cache_misses_.load();
  s.local_steps = replica_ != nullptr ? replica_->local_steps() : 0;
  return s;
}

}  // namespace

StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  auto c = std::make_unique<ClientImpl>(options);
  RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Client>(std::move(c));
}

}  // namespace relaxps
