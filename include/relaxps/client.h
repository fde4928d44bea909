// relaxps::Client: the worker-side API of the parameter server.
//
// A Client registers with the coordinator, learns the job configuration and
// the shard map, keeps a heartbeat going, and routes dense key ranges and
// sparse row ids to the servers that own them. Data operations are
// asynchronous: each returns a std::future<Status> (or takes a callback) and
// payloads travel as refcounted Buffers without copies on the send path.
//
// Dense tables are addressed by [offset, offset + n) of the table's flat
// float vector; a request spanning several shards is split and its parts sent
// in parallel; its future completes when every part has.
//
// Thread-safety: all methods are safe to call from multiple threads. A
// callback runs on the client's I/O thread when its request went to the
// servers (or on a thread waiting in Drive(), which reads the replies itself
// while it waits), or inline on the calling thread (before the call returns)
// when it completes without a round trip: an argument error, a job that has
// failed, an SSP cache hit, an empty sparse request, or a client shutting
// down. Callbacks must not block, and must not assume they run on any
// particular thread.
#ifndef RELAXPS_CLIENT_H_
#define RELAXPS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "relaxps/buffer.h"
#include "relaxps/clock.h"
#include "relaxps/consistency_policy.h"
#include "relaxps/curve_options.h"
#include "relaxps/events.h"
#include "relaxps/recovery_policy.h"
#include "relaxps/status.h"
#include "relaxps/table.h"

namespace relaxps {

struct ClientOptions {
  // Coordinator endpoint, "tcp://host:port" (e.g. "tcp://127.0.0.1:5555") or
  // "ipc://path"; anything else fails Connect() at once with InvalidArgument.
  std::string coordinator;
  // "worker" joins the job's live worker set (clock, heartbeats, barriers);
  // "observer" (relaxps-ctl, tools) only reads; "operator" reads and may
  // also create tables and change learning rates (an operator session,
  // docs/security.md; under CURVE with an operator key).
  std::string role = "worker";
  // Requested worker id; -1 lets the coordinator assign the next free one.
  int worker_id = -1;
  // Deadline of each request. Longer tolerates slow servers; shorter detects
  // dead ones sooner.
  int request_timeout_ms = 10000;
  // Heartbeat period to the coordinator.
  int heartbeat_ms = 200;
  // Under a recovery policy whose lost requests wait (checkpoint restarts:
  // for the coordinator to announce the restarted server; chain
  // replication: for a new head): a request whose server died is sent again
  // when the map names where, for at most this long before failing with the
  // original error. Pushes are thus applied to the restored state (or the
  // surviving replicas) instead of being lost with the dead server.
  int recovery_timeout_ms = 120000;
  // Payload encoding of dense floats on the wire: "fp32" or "fp16" (half the
  // bytes, fp32 master copies stay on the servers).
  std::string wire_dtype = "fp32";
  // SSP only: keep the parameters of each table's last dense pull and serve
  // a Pull from them while they reflect clock >= clock() - staleness (the
  // Petuum/Bosen parameter cache). Saves pulls at the cost of one copy per
  // pull; reads within the bound may miss this worker's own recent pushes.
  bool ssp_cache = true;
  // Under a policy whose workers keep training on their own copies
  // (--recovery=stateless): a request to a server that has not answered
  // after this long counts the server as lost, and the worker trains on its
  // own copy of that server's ranges (async; under BSP/SSP only pushes and
  // clock messages, since a pull may legitimately wait at the gate: there
  // the coordinator's word or a closed connection decides). Shorter reacts
  // sooner; too short mistakes a slow server for a dead one (the worker then
  // hands its local change back once the server answers a probe).
  int local_after_ms = 200;
  // Under the same policies: when the connection to a server closes (the
  // transport's socket monitor), the server is probed; no answer within this
  // long counts it as lost at once, without waiting for local_after_ms or
  // the coordinator. Shorter reacts sooner; too short mistakes a busy server
  // whose connection was merely re-established for a dead one.
  int disconnect_probe_ms = 100;
  // Under a policy that keeps this worker's acknowledged updates to replay
  // them into a server restarted from a checkpoint (upstream backup): the
  // most payload bytes the log holds. Beyond it the oldest entries are
  // dropped and counted as lost (ClientStats::recovery_counters). Larger
  // covers a longer checkpoint interval at the cost of memory.
  int64_t update_log_bytes = int64_t{1} << 30;
  // How long Barrier() waits for the other workers before failing with
  // DeadlineExceeded (naming the missing workers).
  int barrier_timeout_ms = 600000;
  // Workers: with no answer from the coordinator for this long the job
  // counts as failed (every request fails with Aborted naming why), so a
  // worker whose coordinator is gone exits instead of waiting forever.
  int coordinator_timeout_ms = 30000;
  // Workers: called once (on the heartbeat thread) when the coordinator
  // reports that the job is over (relaxps-ctl shutdown): finish the current
  // step and leave. Must not block.
  std::function<void()> on_job_done;
  // --security=curve: the job's keys directory and this client's principal
  // ("worker-<worker_id>", "observer" or "ctl"); a worker then needs
  // worker_id. Empty keys_dir: plain TCP.
  CurveOptions curve;
  // Largest reply accepted, in bytes (ZMQ_MAXMSGSIZE); a peer sending a
  // bigger one is disconnected. Must exceed the largest pull.
  int64_t max_message_bytes = int64_t{1} << 30;
  // Source address of this process's outgoing TCP connections (a numeric
  // IPv4/IPv6 address of this host, usually the one it binds and advertises
  // on a multi-homed host); empty: the kernel's choice.
  std::string source_address;
  // A dense request's part for one server of more than dense_split_bytes is
  // sent as requests of about dense_part_bytes each (consecutive key ranges),
  // all in flight at once: the server applies one while the next is still on
  // the wire, and the client copies one reply while the next arrives. The
  // optimizer counts the parts as one step. Smaller parts: more overlap, more
  // per-request overhead. At most 8 parts per server and request (larger
  // parts if need be): a server queues at most --max_queued_replies replies
  // per client. dense_part_bytes 0: never split. Under every recovery
  // policy: with exactly-once keys (chain, stateless, hybrid, replay) each
  // part has its own key and the request is still one update.
  int64_t dense_part_bytes = int64_t{512} << 10;
  int64_t dense_split_bytes = int64_t{4} << 20;
  // A PullRows part for one server of more than pull_rows_split rows is sent
  // as requests of about pull_rows_part rows each (consecutive positions),
  // all in flight at once: the server looks up one while the rows of the
  // one before are on the wire and being copied into `out`. At most 8 per
  // server and request (larger if need be). pull_rows_part 0: never split.
  // Row pushes are never split: a push is one optimizer step.
  int64_t pull_rows_part = 512;
  int64_t pull_rows_split = 768;
  // Time source of heartbeats, request deadlines and the resend give-up
  // time (nullptr: real time). Tests pass a FakeClock. Must outlive the
  // client.
  const Clock* clock = nullptr;
  // Structured events (docs/events.md): the client emits its own
  // (client_registered, client_server_lost, client_failover_acked, ...) on
  // this log, typically the trainer's own, so they land in the same file
  // under the same process name. A log without a process name is named
  // "worker-<id>" (or "observer") at registration. nullptr: no events.
  // Shared: the trainer keeps emitting on it after the client is gone.
  std::shared_ptr<EventLog> events;
};

// What the coordinator told this client at registration.
struct JobInfo {
  int worker_id = -1;
  ConsistencyModel consistency = ConsistencyModel::kAsync;
  // Staleness bound in clocks a worker's reads may have: 0 under BSP, the
  // job's bound under SSP (unused under async).
  int staleness = 0;
  // The recovery policy's name (--recovery of the coordinator); ask
  // recovery_policy() (its needs()) rather than comparing it.
  std::string recovery = "none";
  int num_servers = 0;
  // The coordinator's --num_workers (0: not given). Under BSP and SSP it is
  // also the start barrier.
  int expected_workers = 0;
};

struct TableInfo {
  TableOptions options;
};

// Counters since Connect().
struct ClientStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t requests = 0;
  uint64_t errors = 0;
  // *ZeroCopy replies handed to the caller as received, without a copy.
  uint64_t replies_handed_over = 0;
  // Replies read, and their callbacks run, by a thread in Drive().
  uint64_t replies_read_by_caller = 0;
  // SSP parameter cache: pulls answered locally / sent to servers.
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  // Pushes applied to the worker's own copy while their server was lost
  // (policies whose workers train on their own copies: stateless, hybrid).
  uint64_t local_steps = 0;
  // Push parts of this client (requests of Push, PushPull, PushRows: one per
  // server, range or bucket they were split into, a split range's parts
  // counting once) that a server acknowledged, each once however often it
  // was sent; raw deltas and replays of logged updates not counted. Compare
  // with the servers' applied parts of (worker_id, incarnation)
  // (ServerStats.applied_parts): the difference is what was acknowledged
  // but lost.
  uint64_t acked_updates = 0;
  // This client's registration (part of its pushes' exactly-once keys and of
  // the servers' per-incarnation counts).
  uint64_t incarnation = 0;
  // Counters of the recovery policy's client side, by name (e.g. a replay
  // log's entries and the updates it dropped).
  std::map<std::string, uint64_t> recovery_counters;
};

class Client {
 public:
  using Callback = std::function<void(const Status&)>;
  // Completes a *ZeroCopy request with its parameters (empty on an error).
  using ParamsCallback = std::function<void(const Status&, FloatBuffer params)>;

  // Registers with the coordinator (retrying until request_timeout_ms) and
  // starts the I/O and heartbeat threads.
  static StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  // Deregisters (best effort) and stops the threads; pending futures fail
  // with Aborted.
  virtual ~Client() = default;

  virtual const JobInfo& job() const = 0;
  // The job's policies, built from job() at registration; ask them (e.g.
  // recovery_policy().needs()) rather than comparing job().consistency /
  // job().recovery.
  virtual const ConsistencyPolicy& consistency_policy() const = 0;
  virtual const RecoveryPolicy& recovery_policy() const = 0;
  virtual int worker_id() const = 0;
  // False while heartbeats to the coordinator fail (it died or is
  // unreachable; requests that need it, like CreateTable, will fail) or once
  // the job has failed. Data requests to the servers go on meanwhile.
  virtual bool coordinator_healthy() const = 0;

  // Creates a table, or succeeds if an identical one exists (so every worker
  // may call it). InvalidArgument if it exists with different options.
  virtual Status CreateTable(const TableOptions& options) = 0;
  // NotFound if the table does not exist.
  virtual StatusOr<TableInfo> GetTable(const std::string& name) = 0;
  virtual StatusOr<std::vector<TableInfo>> ListTables() = 0;
  // Sets `table`'s learning rate to `lr` for every push of clock >= clock()
  // (this worker's current clock), on every shard; the table's lr_schedule
  // factor still applies on top. Stored in the table record (GetTable shows
  // it in lr_changes), so a restored or replicated shard applies the same
  // rate. Returns once every server has it. Under BSP call it before this
  // worker's first push of the clock: the round of that clock then uses the
  // new rate everywhere. Under SSP/async a push of another worker for that
  // clock that reached a server before the change keeps the old rate.
  // InvalidArgument for lr <= 0, NotFound for an unknown table.
  virtual Status SetLearningRate(const std::string& table, float lr) = 0;

  // ---- Dense ----------------------------------------------------------------
  // A push (Push, PushPull, PushRows) with a NaN or Inf anywhere fails with
  // InvalidArgument and changes nothing on any server, nor in this worker's
  // own copy while a server is lost (stateless recovery).
  //
  // Sends gradients for keys [offset, offset + grads.size()). `grads` is sent
  // without a copy: leave it untouched until `done` runs.
  virtual void Push(const std::string& table, uint64_t offset, FloatBuffer grads,
                    Callback done) = 0;
  // Fills `out` with keys [offset, offset + out.size()). `out` must stay
  // untouched by the caller until `done` runs.
  virtual void Pull(const std::string& table, uint64_t offset, FloatBuffer out,
                    Callback done) = 0;
  // Push then pull of the same range in one round trip per shard; `out`
  // receives the parameters after the push was applied.
  virtual void PushPull(const std::string& table, uint64_t offset, FloatBuffer grads,
                        FloatBuffer out, Callback done) = 0;

  std::future<Status> Push(const std::string& table, uint64_t offset, FloatBuffer grads);
  std::future<Status> Pull(const std::string& table, uint64_t offset, FloatBuffer out);
  std::future<Status> PushPull(const std::string& table, uint64_t offset, FloatBuffer grads,
                               FloatBuffer out);

  // Pull and PushPull that hand over the parameters instead of copying them
  // into a buffer of the caller's: `done` gets keys [offset, offset + n)
  // (PushPull: n = grads.size(), after the push was applied). When they
  // arrive in one piece (one server, one part, fp32 on the wire) the buffer
  // is the received message itself and nothing is copied; otherwise the
  // pieces are assembled into a new buffer, one copy as Pull makes. Either
  // way the buffer is the caller's to keep, read and write; a trainer can
  // compute on it directly.
  virtual void PullZeroCopy(const std::string& table, uint64_t offset, size_t n,
                            ParamsCallback done) = 0;
  virtual void PushPullZeroCopy(const std::string& table, uint64_t offset, FloatBuffer grads,
                                ParamsCallback done) = 0;
  std::future<StatusOr<FloatBuffer>> PullZeroCopy(const std::string& table, uint64_t offset,
                                                  size_t n);
  std::future<StatusOr<FloatBuffer>> PushPullZeroCopy(const std::string& table, uint64_t offset,
                                                      FloatBuffer grads);

  // ---- Sparse ---------------------------------------------------------------
  // out receives ids.size() * row_width floats (parameters only). `ids` may
  // be sent without a copy and `out` is written until `done` runs: leave
  // both untouched until then.
  virtual void PullRows(const std::string& table, KeyBuffer ids, FloatBuffer out,
                        Callback done) = 0;
  // grads holds ids.size() * row_width floats. `ids` and `grads` may be sent
  // without a copy (always when one server holds every row): leave them
  // untouched until `done` runs. `done` runs once every server holding the
  // rows has accepted its part; a server applies it before anything it
  // receives later, so this worker's next requests see it. (A server on a
  // memory store answers just before it updates the rows, a durable store
  // once they are written.)
  virtual void PushRows(const std::string& table, KeyBuffer ids, FloatBuffer grads,
                        Callback done) = 0;

  std::future<Status> PullRows(const std::string& table, KeyBuffer ids, FloatBuffer out);
  std::future<Status> PushRows(const std::string& table, KeyBuffer ids, FloatBuffer grads);

  // ---- Clock ------------------------------------------------------------------
  // Ends the current iteration: advances this worker's clock by one. Pushes
  // carry the clock at which their gradient was computed.
  virtual Status Clock() = 0;
  virtual int64_t clock() const = 0;

  // ---- Barrier ----------------------------------------------------------------
  // Blocks until every live worker has called Barrier() as often as this
  // one (e.g. before an evaluation, or after loading data). A worker that
  // dies is not waited for; one that joins late starts after the barriers
  // already passed. DeadlineExceeded after ClientOptions::barrier_timeout_ms,
  // naming the workers still missing. Workers only.
  //
  // The start barrier needs no call: under BSP and SSP with the
  // coordinator's --num_workers=N, Connect() returns only once N workers are
  // live (DeadlineExceeded after the coordinator's
  // --start_barrier_timeout_ms). Workers joining later (replacements, extra
  // workers) start at once, at the slowest live worker's clock.
  virtual Status Barrier() = 0;
  // The clock that the parameters returned by the most recently completed
  // dense Pull / PushPull are guaranteed to reflect: every live worker's
  // pushes for clocks below it were applied (minimum over the shards that
  // answered). clock() - last_params_clock() is the staleness of those
  // parameters. -1 before the first pull.
  virtual int64_t last_params_clock() const = 0;

  virtual ClientStats stats() const = 0;

  // Workers: reports how this worker ends, once, after its last push:
  // `outcome` OK when it did its work (its training run ended), else the
  // error it gives up with. Retries for up to timeout_ms. The coordinator
  // counts the worker as finished, so a job whose workers all finished
  // ends cleanly (relaxps-coordinator exits 0) even if a worker's goodbye
  // (the DEREGISTER the destructor sends) is lost; one that reported an
  // error ends the job as "workers_failed" (exit 4). Unavailable at once
  // when the coordinator is not answering heartbeats or the job failed
  // (nothing to tell); the last error if no attempt was answered. A worker
  // that never calls it counts as finished through its goodbye, as before.
  virtual Status ReportFinished(const Status& outcome = Status::OK(), int timeout_ms = 5000) = 0;

  // ---- Waiting on the calling thread ------------------------------------------
  // Lends the calling thread to the client until done() returns true or
  // timeout_ms passes: replies are read, and their callbacks run, on this
  // thread instead of the I/O thread. The reply reaches the waiting thread
  // without a second thread's wake-up, which is most of the difference on
  // small requests (a 4 KiB PushPull on 2 cores: see docs/benchmarks.md).
  // done() is called here after each batch of callbacks and must not block.
  // Returns whether done() returned true. Returns false at once when this
  // thread cannot drive: another thread is in Drive(), the client is
  // shutting down, or fault injection is on. Then wait as without it (the
  // callbacks keep running on the I/O thread). A reply that arrives after
  // Drive() returned, with nobody driving, waits up to about 11 ms for the
  // I/O thread to take the sockets back. REQUIRES: not on a callback.
  //
  //   std::atomic<bool> pushed{false};
  //   client->Push("w", 0, grads, [&](const Status& s) { ...; pushed = true; });
  //   if (!client->Drive([&] { return pushed.load(); }, 10000)) { /* wait */ }
  virtual bool Drive(const std::function<bool()>& done, int timeout_ms) = 0;

 protected:
  Client() = default;
};

}  // namespace relaxps

#endif  // RELAXPS_CLIENT_H_
