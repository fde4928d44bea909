// relaxps::Server: one parameter-server process.
//
// A Server binds a ROUTER socket, registers with the coordinator, learns its
// id and the shard map, creates its shards in a ParamStore, and serves Push /
// Pull / PushPull (dense) and PushRows / PullRows (sparse) on a
// single-threaded event loop. Every request is validated (table, range,
// frame count, payload length, finite values); a bad one gets an error reply,
// is counted as rejected, and changes nothing.
//
// Without chain replication, a row push to a memory store is acknowledged
// once it is validated, just before the loop updates its rows (the update
// then overlaps the reply's way back and the worker's next request); a store
// that writes rows (rocksdb) acknowledges after the write, which may fail.
//
// A background thread heartbeats to the coordinator and brings back the live
// worker set (which releases BSP/SSP waits when a worker dies) and newer
// shard maps.
//
// Durability (store "rocksdb"): the store is flushed every
// `flush_every_clocks` clocks (what a restart on the same data_dir comes back
// to) or, with store.wal_per_update, every update is logged before it is
// acknowledged: with store.wal_group_commit and wal_reply kApplied written to
// the log file, then answered, the log synced in the background; with
// kDurable (or without group commit) synced first, by one WAL sync per batch
// of received requests, after which the batch's replies are sent. On a CHECKPOINT request from the coordinator the server
// writes "<checkpoint_dir>/ckpt-<clock>" (a flush plus RocksDB's hard-linked
// checkpoint) and prunes all but the newest `keep_checkpoints`. Flushes and
// checkpoints do not pause the loop for their writes: the loop thread only
// captures what to write (the changed dense chunks) and the store writes it
// in the background (ParamStore::Flush / CheckpointAsync); the CHECKPOINT
// reply is sent from the loop once the checkpoint is complete. A failed flush
// or checkpoint is logged and reported (the CHECKPOINT reply carries the
// error); the server goes on serving from memory and the previous
// checkpoint stays valid. `restore_from` replaces data_dir with a checkpoint
// before the store is opened.
//
// Thread-safety: Start() and Run() from one thread; Stop() from any thread.
#ifndef RELAXPS_SERVER_SERVER_H_
#define RELAXPS_SERVER_SERVER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/events.h"
#include "relaxps/curve_options.h"
#include "common/status.h"
#include "kernels/device.h"
#include "storage/param_store.h"

namespace relaxps {

namespace metrics {
class Registry;
}  // namespace metrics

// What a server does when a checkpoint, flush or WAL write fails
// (relaxps-server --on_disk_error).
enum class OnDiskError {
  kContinue,  // Train on without durability; report it (events, stats, metrics).
  kStop,      // Stop the server with an error naming the failed write.
};
// "continue" or "stop"; InvalidArgument naming the accepted values otherwise.
StatusOr<OnDiskError> ParseOnDiskError(const std::string& name);
const char* OnDiskErrorName(OnDiskError e);

// When a server with store.wal_per_update and group commit answers an
// update (relaxps-server --wal_reply).
enum class WalReply {
  // Once the update is written to the log file (the kernel's page cache):
  // a crash of the server process loses nothing answered; the log is synced
  // in the background right after, so a crash of the machine (power, kernel)
  // can lose the updates of the last sync, about a millisecond.
  kApplied,
  // Once the log is synced: nothing answered is lost even if the machine
  // crashes; each update waits for the disk (fdatasync) before its reply.
  kDurable,
};
// "applied" or "durable"; InvalidArgument naming the accepted values otherwise.
StatusOr<WalReply> ParseWalReply(const std::string& name);

struct ServerOptions {
  // Endpoint to bind; the default lets the OS choose a port.
  std::string bind = "tcp://127.0.0.1:*";
  // What the server registers with the coordinator (and so what workers and
  // chain peers connect to): "" (the bound endpoint; a wildcard bind such as
  // tcp://0.0.0.0:* then fails Start() asking for it), "HOST" (with the
  // bound port) or "tcp://HOST:PORT". See common/advertise.h.
  std::string advertise;
  // Source address of the server's outgoing TCP connections (to the
  // coordinator and chain peers; a numeric IPv4/IPv6 address of this host, usually the one it binds and advertises
  // on a multi-homed host); empty: the kernel's choice.
  std::string source_address;
  // Prometheus metrics (server/internal/server_metrics.h) are kept in this
  // registry; nullptr: none. Borrowed; must outlive the server.
  metrics::Registry* metrics = nullptr;
  // Coordinator endpoint(s), comma-separated: any coordinator of the job
  // (standbys redirect to the leader, common/coordinator_peers.h). Required
  // unless `coordination` is given.
  std::string coordinator;
  // zk://HOST:PORT[,HOST:PORT...]/PATH, the coordinators' --coordination:
  // the server reads the leader from ZooKeeper and follows it when it
  // changes (coordinator/leader_watch.h), with no list of coordinators.
  // `coordinator`, if also given, is where it looks first.
  std::string coordination;
  // The ZooKeeper session timeout of that watch.
  int zk_session_timeout_ms = 4000;
  // Requested server id (-1: the coordinator assigns one). A restarted server
  // passes its old id to take its shards back.
  int server_id = -1;
  // A server the job was not started with (relaxps-server --join): it
  // registers for the next free id and holds nothing until the coordinator
  // moves ranges to it (docs/elastic.md). REQUIRES server_id == -1.
  bool join = false;
  // Range moves from this server: how long the coordinator's MOVE_RANGE
  // waits for the range to be quiescent (no BSP round pending, no pull
  // waiting) before the move fails, unchanged. Longer tolerates slower
  // rounds; the writes of the range are never held during this wait.
  int64_t move_drain_timeout_ms = 10000;
  // A range move's MOVE_STATE pieces (state_transfer_chunk_bytes each) in
  // flight to the destination at once. More keeps the link busy while the
  // destination writes a piece and acknowledges it; each costs one piece of
  // receive memory on the destination (the source sends them out of its
  // store). 1: more measured no faster (docs/elastic.md, Benchmark).
  int move_window_pieces = 1;
  // A dense, unreplicated range move copies the range to the destination
  // while it serves, catches up with what was written meanwhile, and cuts
  // over with only what the last round missed: the writes of the moved
  // keys wait for that, not for a transfer of the range (docs/elastic.md
  // "One move"). false: the cut-over sends the whole range.
  bool move_copy_first = true;
  // Catch-up rounds at most after that copy (each sends the chunks written
  // during the one before); fewer once a round's writes are at most
  // move_catchup_bytes or stop shrinking.
  int move_catchup_rounds = 8;
  size_t move_catchup_bytes = size_t{1} << 20;
  // During that copy the source forwards every update of the moved keys to
  // the destination as it applies it (the destination applies those after
  // the copy of their keys): no catch-up round, and the cut-over sends only
  // the metadata, however much training writes. It gives forwarding up (and
  // cuts over with the keys written since the copy began) once more than
  // move_forward_window_bytes of forwards are unacknowledged.
  bool move_forward_updates = true;
  size_t move_forward_window_bytes = size_t{1} << 30;
  // How long a range move's source waits for the destination to answer a
  // MOVE_STATE piece before the move fails (a dead destination).
  int64_t move_piece_timeout_ms = 30000;
  // Once drained (it holds nothing, relaxps-ctl drain-server), the server
  // answers every push and pull "moved" with the new map until none came for
  // this many ms (at most 15 times as long), then deregisters and exits: a client
  // that had not learned the map yet re-routes instead of finding it gone.
  // Longer covers slower clients; the process stays that much longer.
  int64_t drained_quiet_ms = 2000;
  // With store.wal_per_update and store.wal_group_commit: whether an update
  // is answered before its log is synced (kApplied) or after (kDurable).
  WalReply wal_reply = WalReply::kApplied;
  // The store's options. Its file_system (nullptr: the real one) also
  // carries the server's own checkpoint work: restore_from, listing,
  // pruning and replacing checkpoints.
  ParamStoreOptions store;
  // Opens the store from `store` (empty: NewParamStore, the memory and
  // rocksdb stores of relaxps-server). An embedder's own ParamStore goes
  // here; tests pass one that holds back or fails chosen calls.
  std::function<StatusOr<std::unique_ptr<ParamStore>>(const ParamStoreOptions&)> store_factory;
  kernels::DeviceOptions device;
  // Heartbeat period. Shorter detects failures sooner at more traffic.
  int heartbeat_ms = 200;
  // How long to keep retrying registration before giving up.
  int register_timeout_ms = 15000;
  // Flush the store every this many clocks of a table's shard (0: never; the
  // store then persists only at checkpoints or shutdown; -1, the default: 10
  // for a rocksdb store, 0 for memory, as relaxps-server). Smaller loses less
  // on a crash; each flush captures the changed 64 KiB dense chunks on the
  // loop thread and writes them in the background.
  int flush_every_clocks = -1;
  // Root of this server's checkpoints ("<root>/ckpt-<clock>"). Empty: derived
  // from store.data_dir as "<parent of data_dir>/checkpoints/<name of
  // data_dir>", e.g. out/data/server-0 -> out/data/checkpoints/server-0.
  std::string checkpoint_dir;
  // Checkpoints kept after each new one (older ones are deleted). >= 1.
  int keep_checkpoints = 3;
  // Before opening the store: "" (no restore), "latest" (the newest valid
  // checkpoint under checkpoint_dir; NotFound if none) or a checkpoint
  // directory. A bad checkpoint fails Start() with Corruption naming it, a
  // disk error with IOError naming the path; data_dir is then untouched.
  std::string restore_from;
  // --security=curve (curve.name "server-<server_id>"; server_id is then
  // required); empty keys_dir: plain TCP.
  CurveOptions curve;
  // Lifecycle: with no answer from the coordinator for this long the server
  // stops and Run() returns Unavailable (longer than a coordinator takeover,
  // when there is one). The server also stops when the coordinator reports
  // that the job failed (Run() returns Aborted), that it declared this
  // server dead (Aborted; a supervisor restarts it from its latest
  // checkpoint), or that the job is over and no worker is live (Run()
  // returns OK after the final flush).
  int coordinator_timeout_ms = 30000;
  // Quotas (issue 13). Most bytes of dense shards (parameters and optimizer
  // state) this server holds; a table that would take it past this is
  // refused (the coordinator then drops it from the map). 0: unlimited.
  uint64_t max_bytes = uint64_t{16} << 30;
  // BSP/SSP: a push or clock more than staleness + this many clocks ahead of
  // the shard (BSP: its applied rounds; SSP: its slowest live worker) is
  // refused, so nobody can make the server hold a round buffer per future
  // clock. Larger tolerates workers that push several clocks without pulling.
  int max_clocks_ahead = 4;
  // Most replies queued for one peer that does not read them (ZMQ_SNDHWM);
  // beyond, further replies to it are dropped (counted in replies_dropped)
  // and it times out. Bounds memory to about this many times the largest reply.
  int max_queued_replies = 128;
  // Most bytes of replies queued for one peer (connection) that has not read
  // them yet, and for all peers together (RpcServerOptions,
  // common/unread_replies.h). A pull's, PushPull's or row pull's reply is
  // reserved when the request is admitted; a request past either limit is
  // refused with ResourceExhausted before anything is applied (counted in
  // quota_rejected; the client sends it again after a backoff). A peer with
  // nothing queued always gets one reply, however large. <= 0: unlimited.
  int64_t max_unread_reply_bytes_per_peer = int64_t{64} << 20;
  int64_t max_unread_reply_bytes = int64_t{256} << 20;
  // Most bytes of pulls waiting at the consistency gates for one peer
  // (connection), and for all peers together (server/internal/
  // parked_requests.h: about 1 KiB per dense pull). A pull past either is
  // refused with FailedPrecondition. An honest worker parks a few pulls per
  // server; <= 0: unlimited.
  int64_t max_parked_bytes_per_peer = int64_t{16} << 20;
  int64_t max_parked_bytes = int64_t{64} << 20;
  // Every this many ms the reply buffer pool (which keeps up to 1 GiB of
  // freed pull replies for reuse) frees the buffers that went unused since
  // the last time (BufferPool::TrimIdle): a burst's replies are given back
  // within two periods, while steady traffic keeps reusing its buffers.
  // Lower: memory back sooner, but a job slower than one pull per period
  // faults its reply pages in again. <= 0: never.
  int64_t reply_pool_trim_ms = 10000;
  // Largest message accepted or received, in bytes (ZMQ_MAXMSGSIZE); a peer
  // sending a bigger one is disconnected. Must exceed the largest push.
  int64_t max_message_bytes = int64_t{1} << 30;
  // Chain replication: a state transfer to a joining replica travels in
  // pieces of at most this many bytes of payload (and at most half of
  // max_message_bytes), one in flight at a time. Larger pieces make fewer
  // round trips; smaller ones bound the memory a piece holds on both sides.
  size_t state_transfer_chunk_bytes = size_t{8} << 20;
  // Time source of request deadlines (pulls waiting at the consistency
  // gate), heartbeats and the loop's timers (nullptr: real time). Tests
  // pass a FakeClock. Must outlive the server.
  const Clock* clock = nullptr;
  // What a failed checkpoint, flush or WAL write does (issue 40): kContinue
  // trains on, not durably, and reports it (events disk_error and
  // durable_again, ServerStats.durable and not_durable_since_unix_ms,
  // relaxps_server_durable); kStop also stops the server (Run() returns
  // Aborted naming the write), which ends a job without a recovery policy
  // that restarts it.
  OnDiskError on_disk_error = OnDiskError::kContinue;
  // Structured events (docs/events.md): server_started, checkpoint_written,
  // checkpoint_write_failed, disk_error, durable_again. A log without a process name is named
  // "server-<id>" once the server registered. nullptr: none.
  std::shared_ptr<EventLog> events;

  // flush_every_clocks, or what -1 stands for.
  int FlushEveryClocks() const {
    return flush_every_clocks >= 0 ? flush_every_clocks
                                   : store.ResolvedKind() == "rocksdb" ? 10 : 0;
  }

  // The checkpoint root in effect (checkpoint_dir or the derived default; ""
  // for a store without data_dir).
  std::string CheckpointRoot() const;
};

class Server {
 public:
  // Binds, opens the store and registers. Errors: Unavailable (bind or
  // coordinator), store errors (IOError/Corruption naming the path).
  static StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  virtual ~Server() = default;

  // The advertised endpoint (ServerOptions::advertise), as registered.
  virtual const std::string& endpoint() const = 0;
  virtual int id() const = 0;
  // Serves until Stop() or the end of the job (see coordinator_timeout_ms);
  // flushes the store on the way out.
  virtual Status Run() = 0;
  virtual void Stop() = 0;

  // How to come back after Run() returned because the coordinator declared
  // this server dead (paused or cut off past the heartbeat timeout) under a
  // policy whose server side restarts it in place
  // (recovery::DeadServerPlan::kRestartInPlace; e.g. from its latest complete
  // checkpoint, or empty to be re-seeded from the workers). Its old state
  // must not serve again, so it restarts as a fresh process would;
  // relaxps-server re-executes itself with --server_id and `flags` (and
  // without its old --restore_from), so no supervisor is needed. (A policy
  // may instead rejoin chains without leaving Run(), or exit with advice.)
  struct RestartInPlace {
    int server_id = -1;
    // Flags besides --server_id, e.g. {"--restore_from=latest"}.
    std::vector<std::string> flags;
  };
  // Set once Run() has returned for that reason; nullopt otherwise.
  virtual std::optional<RestartInPlace> restart_in_place() const = 0;

 protected:
  Server() = default;
};

}  // namespace relaxps

#endif  // RELAXPS_SERVER_SERVER_H_
