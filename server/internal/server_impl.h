// ServerImpl: the implementation behind relaxps::Server (server.h), shared by
// server.cc (start-up, what the coordinator's replies bring), server_tables.cc (shard
// maps, the ranges held), server_dispatch.cc (request dispatch, replies),
// server_data.cc (the data path) and server_control.cc (stats, seed,
// checkpoint). Chain replication, when the recovery policy's write rule
// forwards writes along chains (recovery/server_recovery.h), is its own
// object, ChainReplication (chain_replication.h), to which this server is
// the ChainHost. The link to the coordinator (registration, heartbeats, the
// server's identity with the coordinator) is CoordinatorLink
// (coordinator_link.h), to which this server is the Host.
//
// Thread-safety: as Server; everything but Stop() and the heartbeat thread
// (the CoordinatorLink::Host methods it calls) runs on the RpcServer loop
// thread.
#ifndef RELAXPS_SERVER_INTERNAL_SERVER_IMPL_H_
#define RELAXPS_SERVER_INTERNAL_SERVER_IMPL_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/buffer_pool.h"
#include "common/clock.h"
#include "common/loop_client.h"
#include "common/rpc_client.h"
#include "common/rpc_server.h"
#include "common/shard_map.h"
#include "consistency/consistency_policy.h"
#include "recovery/server_recovery.h"
#include "server/internal/chain_replication.h"
#include "server/internal/applied_records.h"
#include "server/internal/checkpoint_hold.h"
#include "server/internal/coordinator_link.h"
#include "server/internal/durability_monitor.h"
#include "server/internal/parked_requests.h"
#include "server/internal/range_mover.h"
#include "server/internal/range_state.h"
#include "server/internal/server_metrics.h"
#include "server/internal/server_tokens.h"
#include "server/internal/sparse_shard.h"
#include "server/server.h"

namespace relaxps {
namespace server_internal {

class ServerImpl final : public Server,
                         private ChainHost,
                         private CoordinatorLink::Host,
                         private RangeMoverHost {
 public:
  explicit ServerImpl(const ServerOptions& options)
      : options_(options),
        clock_(ClockOrReal(options.clock)),
        metrics_(options.metrics),
        durability_(DurabilityOptions(options)) {}
  ~ServerImpl() override {
    if (link_ != nullptr) link_->StopHeartbeat();
  }

  Status Init();
  const std::string& endpoint() const override { return advertised_; }
  int id() const override { return id_; }
  Status Run() override;
  void Stop() override { rpc_->Stop(); }
  std::optional<RestartInPlace> restart_in_place() const override { return restart_; }

 private:
  // ---- Loop thread ----
  void Handle(Request&& req);
  // A data request (PUSH, PULL, PUSH_PULL, PUSH_ROWS, PULL_ROWS, CLOCK) the
  // recovery role admitted.
  void HandleData(Request&& req);
  // Checkpoint `seq` at `clock` was written (or failed) and answered: under
  // HoldsWritesDuringCheckpoint, sends the writes held meanwhile on, in
  // arrival order, once no other checkpoint of this server is in progress,
  // and reports how long they waited.
  void ReleaseHeldWrites(uint64_t seq, int64_t clock);
  Status InstallMap(const wire::ShardMap& map);
  // Installs a newer live worker set (an older one is ignored); refuses a
  // malformed one or a version jump beyond kMaxVersionStep.
  Status SetLiveWorkers(const wire::LiveWorkers& live);
  // worker_tokens_ from `live`'s tokens (see there).
  void UpdateWorkerTokens(const wire::LiveWorkers& live);
  void HandleDense(Request&& req);
  // A dense request whose keys run past `first`, the range holding its first
  // key: a client's one request for adjacent unreplicated ranges of this
  // server (docs/elastic.md, "One request per server"). Every range it
  // spans is checked before any is touched (all here and adjacent, none
  // chained, clocks in bound; else the request is refused whole, a missing
  // range "moved"); then each range applies its keys with its own gate,
  // optimizer step and exactly-once record (the part counted once, by the
  // first range that applies it), and the request is answered once, a
  // pull's ranges concatenated in key order.
  void HandleDenseSpan(Request&& req, RangeState* first);
  void HandleSparse(Request&& req);
  // Monotonic deadline of a pull waiting at the consistency gate: the
  // request's own deadline, at most a day away.
  int64_t PullDeadlineMs(const wire::Header& h) const;
  void HandleStats(const Request& req);
  // Updates (pushes, rounds) applied to every shard held here, and to every
  // shard dropped since the start (a counter: it never goes down when a move
  // or a split replaces a shard).
  uint64_t UpdatesApplied();
  // Scrape-time metrics (server_metrics.cc), posted to the loop thread.
  void CollectMetrics(metrics::MetricSink* sink);
  void HandleCheckpoint(Request&& req);
  // SEED (stateless recovery): installs the merged parameters of this
  // server's dense ranges and starts serving.
  void HandleSeed(const Request& req);
  void HandleClock(const Request& req);
  // Quotas: FailedPrecondition if installing `map` would take the dense
  // shards here past options_.max_bytes; a push or clock too far ahead of
  // `shard` (see ServerOptions::max_clocks_ahead).
  Status CheckByteQuota(const wire::ShardMap& map) const;
  // `worker`: the sender; a held one (RebuildsRoundsFromReplay) replays
  // pushes up to the clock the coordinator reports for it, however far its
  // held clock here lags.
  Status CheckClockAhead(const DenseShardState& shard, int64_t clock, int worker = -1) const;
  static uint64_t DenseBytes(uint64_t keys, int slots);
  // --security=curve: PermissionDenied unless the sender's key may send
  // this message as the worker (or server) it claims to be.
  Status CheckRole(const Request& req) const;
  // OK if `req` came over the coordinator's connection.
  Status CheckFromCoordinator(const Request& req) const;
  // A data request whose reply carries parameters (PULL, PUSH_PULL,
  // PULL_ROWS): reserves the reply's bytes (RpcServer::ReserveReply), or
  // ResourceExhausted if they would pass the limits on unread replies.
  Status ReserveReply(Request* req);
  // A PUSH_PULL whose reply ReserveReply() refused with `refusal`: true
  // after turning it into the PUSH it carries (the request goes on and is
  // applied, held or parked at the gate exactly as a PUSH; its reply's type
  // PUSH, without parameters, tells the client that the pull part was
  // refused: the client pulls later with a plain PULL). Counted as a
  // refusal (quota_rejected; RpcServer::unread_refused_count). False for any
  // other request (the caller rejects it): nothing is applied.
  bool RefusePullPart(Request* req, const Status& refusal);
  // Replies with an error and counts the rejection.
  void Reject(const Request& req, const Status& status) override;
  // False (after rejecting) unless the request has exactly `expected`
  // payload frames.
  bool CheckFrameCount(const Request& req, size_t expected) override;
  // The n gradient values of `frame` as fp32, or nullptr after rejecting a
  // wrong size/encoding or a NaN/Inf (counted as nonfinite_rejected).
  // `check_finite` false: an update forwarded down a chain, which its head
  // checked already (saves a pass over the payload on every replica).
  const float* DecodeGradient(const Request& req, const Frame& frame, size_t n,
                              bool check_finite = true) override;
  // Sends a reply; while the store holds updates not yet synced (WAL group
  // commit) it is queued until SyncAndRelease(), so nothing is acknowledged
  // before it is durable and replies keep their order; unless
  // RepliesBeforeSync().
  void ReplyWith(const Request& req, Message&& reply) override;
  // --wal_reply=applied, no reply queued, and every unsynced update written
  // to the store's log file: a reply goes now (a crash of this process
  // keeps what it answers).
  bool RepliesBeforeSync() const;
  // After each batch of requests: one WAL sync for every update the batch
  // wrote, then the queued replies (each failed with the sync's error if it
  // failed). When RepliesBeforeSync() (and not `wait`), the sync runs in the
  // background instead: this collects the last one and starts the next
  // (ParamStore::PollWalSync); the store's listener posts it again when a
  // sync ends.
  void SyncAndRelease(bool wait = false);
  void OnTimer();
  // Drained: exits once no request came for options_.drained_quiet_ms (or
  // 15 times that after the drain). Loop thread.
  void LeaveWhenQuiet(int64_t now);
  // Flushes the store if a dense shard's clock advanced flush_every_clocks
  // past the last flush.
  void MaybeFlush() override;

  // The dense range of `table` holding `key`, or nullptr.
  RangeState* FindRange(const std::string& table, uint64_t key);
  // The optimizer of a range of table `t` (staged on the update device).
  StatusOr<std::unique_ptr<kernels::Optimizer>> NewRangeOptimizer(const TableOptions& t) const;
  // The store shard name of dense range [begin, end) of `t`: the table's
  // name for the range of the job's first placement, "<table>@<begin>-<end>"
  // for any other (moved or cut), "<table>@<begin>" under chains.
  std::string DenseStoreName(const TableOptions& t, uint64_t begin, uint64_t end) const;
  // Creates and registers dense range [begin, end) of `t` (its store shard,
  // optimizer, live workers; a chain replica under chains). `known_table`:
  // the table was in a map installed before (a chain replica then awaits
  // its state). `initialize` false: the caller writes every key of every
  // slot before the range serves (DenseShardSpec::initialize).
  StatusOr<RangeState*> CreateDenseRange(const TableOptions& t, uint64_t begin, uint64_t end,
                                         bool known_table, bool initialize = true);

  // ---- Range moves (range_mover.h) ----
  // RangeMoverHost.
  int server_id() const override { return id_; }
  const wire::ShardMap& installed_map() const override { return map_; }
  RangeState* DenseRangeAt(const std::string& table, uint64_t key) override {
    return FindRange(table, key);
  }
  StatusOr<RangeState*> CreateRange(const std::string& table, uint64_t begin, uint64_t end,
                                    bool initialize) override;
  void DropRange(const std::string& table, uint64_t begin) override;
  SparseShardState* SparseTable(const std::string& table) override {
    auto it = sparse_.find(table);
    return it == sparse_.end() ? nullptr : it->second.get();
  }
  AppliedLedger* SparseLedger(const std::string& table) override {
    return applied_.SparseLedger(table);
  }
  Status ReshapeRange(RangeState* range, uint64_t end) override;
  void ReleaseRangeTail(RangeState* range, uint64_t old_end) override;
  void Redispatch(Request&& req) override { HandleData(std::move(req)); }
  void SendReply(const Request& req, Message&& reply) override {
    ReplyWith(req, std::move(reply));
  }
  void SendError(const Request& req, const Status& status) override { Reject(req, status); }
  bool HasDenseTable(const std::string& table) const;
  // Whether the installed map has table `table` (held here or not).
  bool MapHasTable(const std::string& table) const;
  // Answers a pull (or the pull half of a PushPull) when the consistency
  // gate allows; under chain replication also waits until everything the
  // answer reflects is on every live replica. With `push_grads` (a
  // PUSH_PULL's decoded gradient) it applies the push first, answering with
  // one copy (DenseShardState::PushPull), and returns the push's status: on
  // an error nothing is answered.
  Status ServePull(RangeState* range, std::shared_ptr<Request> req,
                   const float* push_grads = nullptr) override;

  // The applied record (applied_records.h): SaveApplied hands every unit's
  // ledger to applied_ before a flush or checkpoint; RestoreApplied has it
  // load the one the store opened with into the units created by the first
  // map. `checkpoint_seq`: the coordinated checkpoint it is saved for (0: a
  // flush).
  void SaveApplied(uint64_t checkpoint_seq = 0);
  // ServerRecovery::RebuildsRoundsFromReplay: holds the clocks of `ids` (the
  // first live set) on every dense range and sparse table held now.
  void HoldWorkerClocks(const std::vector<int>& ids);
  // The held worker's first request that is not a replay arrived: its
  // reported clock applies again on every shard.
  void ReleaseWorkerClock(int worker);
  Status RestoreApplied();
  // ServerStats.applied_parts: the counts of the units this server serves.
  void FillAppliedParts(wire::ServerStats* stats);
  // The facts the recovery role object decides from (job_info_, with the
  // complete checkpoints on disk now).
  recovery::ServerJobInfo JobInfoNow() const;

  // ---- Chain replication (chain_replication.h) ----
  // Whether writes go along chains (the policy's write rule); the chains
  // themselves (members, head) come from the shard map.
  bool ChainReplicates() const { return chain_ != nullptr; }
  // Runs fn on every unit held (dense ranges, then chain-replicated sparse
  // buckets).
  template <typename Fn>
  void ForEachUnit(Fn fn) {
    for (auto& [key, range] : dense_) fn(&range);
    if (chain_ != nullptr) chain_->ForEachBucket(fn);
  }
  // ChainHost.
  uint64_t epoch() const override { return epoch_; }
  const wire::ShardMap& map() const override { return map_; }
  bool registered() const override { return registered_; }
  WireToken wire_token() const override { return link_->wire_token(); }
  wire::ServerStats* mutable_stats() override { return &stats_; }
  RangeState* DenseRange(const std::string& table, uint64_t key) override {
    return FindRange(table, key);
  }
  void ForEachDenseRange(const std::function<void(RangeState*)>& fn) override {
    for (auto& [key, range] : dense_) fn(&range);
  }
  void ReportStateArrived() override;
  ParamStore* store() override { return store_.get(); }
  kernels::Device* device() override { return device_.get(); }
  kernels::Device* update_device() override { return update_device_.get(); }
  BufferPool* buffer_pool() override { return &buffer_pool_; }

  // Loop thread: Run() returns `why` (after the final flush).
  void Exit(const Status& why);

  // ---- The link to the coordinator (coordinator_link.h) ----
  // CoordinatorLink::Host. Heartbeat thread:
  bool awaiting_state() const override {
    return chain_ != nullptr && chain_->awaiting_state();
  }
  void PostToLoop(std::function<void()> fn) override { rpc_->Post(std::move(fn)); }
  void ExitLater(const Status& why) override {
    rpc_->Post([this, why] { Exit(why); });
  }
  void StopNow() override { rpc_->Stop(); }
  // The recovery policy says how a server declared dead comes back:
  // rejoining its chains (the link registers again; RejoinAfterFence),
  // restarting in place or exiting.
  void OnDeclaredDead(const std::string& why) override;
  // Loop thread: installs what the reply brings (the servers' tokens, the
  // job's end, the map, the live workers).
  void OnHeartbeatReply(const wire::HeartbeatReply& reply,
                        const wire::ServerTokens& tokens) override;
  // Loop thread: registered again after being fenced: installs the map of
  // the rejoin, in which this server joins its chains as tail (state
  // transfer from the predecessors); the next map installed fences the
  // replicas first.
  void OnRejoined(const wire::RegisterReply& reply, const wire::ServerTokens& tokens) override;
  // The coordinator answered a heartbeat NotFound (declared dead, e.g. after
  // a SIGSTOP) and the policy rejoins: marks the fence pending and has the
  // link register again with this id (which stops the server if that fails).
  void RejoinAfterFence(const std::string& why);

  // Constant after Init().
  const ServerOptions options_;
  const Clock* const clock_;
  std::unique_ptr<RpcServer> rpc_;
  std::string advertised_;  // Registered endpoint (ServerOptions::advertise).
  // Registration, heartbeats and this server's identity with the
  // coordinator (its member token; the coordinator's identity, whose control
  // messages alone are accepted, and term). Created in Init().
  std::unique_ptr<CoordinatorLink> link_;
  int id_ = -1;
  wire::JobConfig job_;
  std::unique_ptr<ConsistencyPolicy> policy_;
  // The server side of the job's recovery policy, and what it answered.
  std::unique_ptr<recovery::ServerRecovery> recovery_;
  recovery::WriteRule write_rule_ = recovery::WriteRule::kApplyLocally;
  recovery::ServerJobInfo job_info_;
  // The applied record, the sparse tables' ledgers and the newest
  // checkpoint captured (server/internal/applied_records.h). Opened in Init().
  server_internal::AppliedRecords applied_{RangeState::kUnreplicatedWindow};
  // The recovery role re-forms BSP rounds from replayed pushes
  // (ServerRecovery::RebuildsRoundsFromReplay). Constant after Init().
  bool rebuilds_rounds_ = false;
  // The recovery role holds writes while a checkpoint is being written
  // (ServerRecovery::HoldsWritesDuringCheckpoint). Constant after Init().
  bool holds_writes_during_checkpoint_ = false;
  // The checkpoint part restored at start (--restore_from; its seq from the
  // applied record), reported when registering. Constant after Init().
  std::optional<wire::ShardCheckpoint> restored_from_;
  std::unique_ptr<kernels::Device> device_;         // CPU: host-memory work.
  std::unique_ptr<kernels::Device> update_device_;  // Optional GPU for updates.
  std::unique_ptr<ParamStore> store_;
  std::string checkpoint_root_;
  // Pull snapshots and sparse replies: reused, pre-faulted pages instead of
  // a large malloc (and its page faults) per reply. Replies from 4 KiB on are
  // pooled: glibc serves such a request only after consolidating its fast
  // bins, and ZeroMQ's I/O thread frees the reply, so a malloc per small
  // reply cost about 6% of a 4 KiB PushPull's CPU (docs/benchmarks.md).
  static BufferPoolOptions ReplyPoolOptions() {
    BufferPoolOptions o;
    o.min_pooled_bytes = 4096;
    return o;
  }
  BufferPool buffer_pool_{ReplyPoolOptions()};

  // Loop thread only.
  // The memory of waiting pulls, per peer and in total (before the shards:
  // their parked pulls hold tickets of it).
  ParkedRequests parked_{options_.max_parked_bytes_per_peer, options_.max_parked_bytes};
  // Bytes freed (waiting pulls gone, idle reply buffers) since malloc's
  // heap was last trimmed; it is trimmed once they pass the constant.
  int64_t untrimmed_bytes_ = 0;
  static constexpr int64_t kTrimAfterReleasedBytes = int64_t{4} << 20;
  int64_t next_pool_trim_ms_ = 0;  // When the reply pool is next trimmed.
  // What a pull's reply closure knows of its wait at the gate.
  struct Parked {
    enum State { kBeforeGate, kWaiting, kAnswered } state = kBeforeGate;
    ParkedRequests::Ticket ticket;  // kWaiting: its bytes in parked_.
  };
  uint64_t map_version_ = 0;
  wire::ShardMap map_;
  std::map<std::pair<std::string, uint64_t>, RangeState> dense_;  // (table, begin).
  std::map<std::string, std::unique_ptr<SparseShardState>> sparse_;  // Without chains.
  wire::ServerStats stats_;
  ServerMetrics metrics_;  // Hot-path hooks; scrape-time values from CollectMetrics.
  // Failed and succeeded checkpoint, flush and WAL writes (issue 40).
  static DurabilityMonitor::Options DurabilityOptions(const ServerOptions& o) {
    DurabilityMonitor::Options d;
    d.on_error = o.on_disk_error;
    d.events = o.events.get();
    d.clock = o.clock;
    return d;
  }
  DurabilityMonitor durability_;
  // ParamStore::CommittedFlushes() when MaybeFlush last looked (loop thread).
  uint64_t committed_flushes_seen_ = 0;
  // Reports the outcome of a durable write to durability_; a disk fault
  // under --on_disk_error=stop stops the server (Exit). Errors that are not
  // disk faults (no checkpoint directory, a memory store) are not counted.
  void OnDurableWrite(DurableWrite what, const Status& s);
  wire::LiveWorkers live_workers_;  // Latest live set from the coordinator.
  // Each worker's newest member token (LiveWorkers.tokens): its requests
  // are accepted only with it; a new registration's replaces it. A worker
  // that left the live set keeps its last one if it used it here (declared
  // dead, it may carry on until it registers again and is served as
  // before); one that never did (a registration and nothing else: a crash at
  // start, a forged REGISTER) is forgotten with the set that drops it, so
  // the tokens are bounded by the workers that ever sent here, not by the
  // registrations. Loop thread.
  struct WorkerToken {
    std::string token;
    // A request of this worker carried it (set by CheckRole).
    mutable bool used = false;
  };
  std::map<int, WorkerToken> worker_tokens_;
  // The servers' current member tokens (Header.server_tokens from the
  // coordinator): server-to-server messages only with the sender's. Loop
  // thread (and Init()).
  ServerTokens server_tokens_;
  // Adopts the tokens a message of the coordinator carries, if any.
  void AdoptServerTokens(const wire::Header& h);
  std::vector<float> decode_scratch_;
  // Replies waiting for the WAL sync (group commit), with their requests'
  // reservations of unread-reply bytes (RpcServer::ReserveReply).
  struct UnsyncedReply {
    std::string identity;
    Message reply;
    std::shared_ptr<void> reservation;
  };
  std::vector<UnsyncedReply> unsynced_replies_;
  std::vector<uint64_t> ids_scratch_;
  int64_t last_flush_clock_ = 0;
  // RebuildsRoundsFromReplay: the first non-empty live set is held, and the
  // workers in it until their first request that is not a replay.
  bool hold_next_live_set_ = false;
  std::set<int> held_workers_;
  // HoldsWritesDuringCheckpoint: the writes held while a checkpoint's
  // snapshot is written (server/internal/checkpoint_hold.h).
  server_internal::CheckpointHold checkpoint_hold_;
  uint64_t held_bytes_ = 0;  // Dense shards created here (all slots).
  // Updates applied to the dense shards DropRange dropped (UpdatesApplied).
  uint64_t dropped_updates_applied_ = 0;
  uint64_t epoch_ = 0;   // Job epoch of the installed map.
  bool registered_ = false;  // Ranges created after registration are new tables.
  // Stateless recovery: this server replaced a lost one and has not been
  // seeded yet; data requests are refused with Unavailable meanwhile.
  bool awaiting_seed_ = false;
  // Chain replication (null unless the write rule forwards along chains).
  // Created in Init().
  std::unique_ptr<ChainReplication> chain_;
  // Range moves to and from this server. Created in Init().
  std::unique_ptr<RangeMover> mover_;

  Status exit_status_;   // Loop thread: what Run() returns.
  // Set (loop thread) before the loop stops for a restart in place; read
  // after Run() returned.
  std::optional<RestartInPlace> restart_;
  bool job_done_ = false;  // Loop thread: left in order at the end of the job.
  bool drained_ = false;   // Loop thread: left in order after a drain (docs/elastic.md).
  // Loop thread: push and pull requests received (CLOCK not counted: a
  // worker clocks every server of its map). Once drained_: when, that count
  // then or when last seen to change, and since when none came
  // (LeaveWhenQuiet).
  uint64_t table_requests_ = 0;
  int64_t drained_since_ms_ = 0;
  uint64_t drained_requests_ = 0;
  int64_t drained_quiet_since_ms_ = 0;
  bool leaving_ = false;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_SERVER_IMPL_H_
