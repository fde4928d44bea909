// ServerImpl: the implementation behind relaxps::Server (server.h), shared by
// server.cc (requests, maps, heartbeats) and server_chain.cc (chain
// replication under --recovery=chain).
//
// Thread-safety: as Server; everything but Stop() and the heartbeat thread
// runs on the RpcServer loop thread.
#ifndef RELAXPS_SERVER_INTERNAL_SERVER_IMPL_H_
#define RELAXPS_SERVER_INTERNAL_SERVER_IMPL_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/periodic_thread.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/shard_map.h"
#include "consistency/consistency_policy.h"
#include "server/internal/chain_replica.h"
#include "server/internal/dense_shard.h"
#include "server/internal/push_dedup.h"
#include "server/internal/sparse_shard.h"
#include "server/server.h"

namespace relaxps {
namespace server_internal {

// One dense key range held by this server.
struct RangeState {
  std::unique_ptr<DenseShardState> shard;
  // Chain replication only (null otherwise).
  std::unique_ptr<ChainReplica> chain;
  std::vector<int> members;  // Current chain, head first.
  int64_t forwarded_applied_clock = 0;  // BSP: completion last forwarded/applied.
};

class ServerImpl final : public Server {
 public:
  explicit ServerImpl(const ServerOptions& options)
      : options_(options), clock_(ClockOrReal(options.clock)) {}
  ~ServerImpl() override { StopHeartbeat(); }

  Status Init();
  const std::string& endpoint() const override { return rpc_->endpoint(); }
  int id() const override { return id_; }
  Status Run() override;
  void Stop() override { rpc_->Stop(); }

 private:
  // ---- Loop thread ----
  void Handle(Request req);
  Status InstallMap(const wire::ShardMap& map);
  void SetLiveWorkers(const wire::LiveWorkers& live);
  void HandleDense(Request req);
  void HandleSparse(Request req);
  void HandleStats(const Request& req);
  void HandleCheckpoint(Request req);
  // SEED (stateless recovery): installs the merged parameters of this
  // server's dense ranges and starts serving.
  void HandleSeed(const Request& req);
  void HandleClock(const Request& req);
  // Replies with an error and counts the rejection.
  void Reject(const Request& req, const Status& status);
  // False (after rejecting) unless the request has exactly `expected`
  // payload frames.
  bool CheckFrameCount(const Request& req, size_t expected);
  // The n gradient values of `frame` as fp32, or nullptr after rejecting a
  // wrong size/encoding or a NaN/Inf (counted as nonfinite_rejected).
  const float* DecodeGradient(const Request& req, const Frame& frame, size_t n);
  void ReplyWith(const Request& req, Message reply);
  void OnTimer();
  // Flushes the store if a dense shard's clock advanced flush_every_clocks
  // past the last flush.
  void MaybeFlush();

  // The dense range of `table` holding `key`, or nullptr.
  RangeState* FindRange(const std::string& table, uint64_t key);
  bool HasDenseTable(const std::string& table) const;
  // Answers a pull (or the pull half of a PushPull) when the consistency
  // gate allows; under chain replication also waits until everything the
  // answer reflects is on every live replica.
  void ServePull(RangeState* range, std::shared_ptr<Request> req);

  // ---- Chain replication (server_chain.cc), loop thread ----
  bool chained() const { return replicas_ > 1; }
  // Applies the chain roles of a newly installed map: promotion, a new
  // successor (resend what it has not acknowledged, or a snapshot to a server
  // joining the chain), becoming the tail.
  void ApplyChainRoles(const wire::ShardMap& map);
  // A client push / pull / push-pull at the head of a chain.
  void HandleChainDense(RangeState* range, Request req);
  // An update, completion or snapshot forwarded by the predecessor.
  void HandleForwarded(Request req);
  // Head: gives `msg` the next sequence number and forwards it.
  uint64_t ForwardNew(RangeState* range, const Message& msg);
  // Update `seq` (already applied here) goes down the chain; at the tail it
  // is acknowledged at once.
  void Commit(RangeState* range, uint64_t seq, const Message& msg);
  void Forward(RangeState* range, uint64_t seq, const Message& msg);
  static std::string TableOf(const RangeState& range);
  // A client push (or a raw delta) on `shard`, at the head or forwarded.
  static Status ApplyPush(DenseShardState* shard, const wire::Header& h, const float* grads);
  void SendLogged(RangeState* range, const server_internal::LoggedOp& op);
  void OnForwardReply(const std::string& table, uint64_t begin, uint64_t seq,
                      const Status& status, const Message& reply);
  void SendSnapshot(RangeState* range);
  // Head under BSP: forwards the rounds the shard completed since last time.
  void MaybeForwardCompletion(RangeState* range);
  // Resends unacknowledged updates that waited too long (timer).
  void ResendStale();
  int PeerOf(int server);
  // Declared dead by the coordinator: stop serving (never a split brain).
  void Fence(const std::string& why);

  // ---- Heartbeat thread ----
  void Heartbeat();
  void StopHeartbeat();

  // Constant after Init().
  const ServerOptions options_;
  const Clock* const clock_;
  std::unique_ptr<RpcServer> rpc_;
  std::unique_ptr<RpcClient> coordinator_;
  int coordinator_peer_ = -1;
  int id_ = -1;
  wire::JobConfig job_;
  std::unique_ptr<ConsistencyPolicy> policy_;
  std::unique_ptr<kernels::Device> device_;         // CPU: host-memory work.
  std::unique_ptr<kernels::Device> update_device_;  // Optional GPU for updates.
  std::unique_ptr<ParamStore> store_;
  std::string checkpoint_root_;

  // Loop thread only.
  uint64_t map_version_ = 0;
  wire::ShardMap map_;
  std::map<std::pair<std::string, uint64_t>, RangeState> dense_;  // (table, begin).
  std::map<std::string, std::unique_ptr<SparseShardState>> sparse_;
  wire::ServerStats stats_;
  wire::LiveWorkers live_workers_;  // Latest live set from the coordinator.
  std::vector<float> decode_scratch_;
  std::vector<uint64_t> ids_scratch_;
  int64_t last_flush_clock_ = 0;
  int replicas_ = 1;     // Constant after Init(): job's chain length.
  uint64_t epoch_ = 0;   // Job epoch of the installed map.
  bool registered_ = false;  // Ranges created after registration are new tables.
  // Stateless recovery: this server replaced a lost one and has not been
  // seeded yet; data requests are refused with Unavailable meanwhile.
  bool awaiting_seed_ = false;
  // Unreplicated dense pushes with an exactly-once key (stateless workers).
  PushDedup pushes_seen_;
  std::unique_ptr<RpcClient> peers_;  // Successors; created in Init().
  std::map<int, std::pair<std::string, int>> peer_of_;  // Server id -> (endpoint, peer).
  std::atomic<bool> fenced_{false};

  // Heartbeat thread.
  int heartbeat_failures_ = 0;  // Heartbeat thread only.
  std::unique_ptr<PeriodicThread> heartbeat_;
  std::atomic<uint64_t> seen_map_version_{0};
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_SERVER_IMPL_H_
