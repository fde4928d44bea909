// relaxps-server: one parameter-server process.
#include <cstdio>
#include <string>
#include <vector>

#include <gflags/gflags.h>

#include "apps/internal/events_flags.h"
#include "apps/internal/network_flags.h"
#include "apps/internal/main_util.h"
#include "apps/internal/metrics_flags.h"
#include "common/advertise.h"
#include "common/buffer_pool.h"
#include "coordinator/zk_session.h"
#include "server/server.h"

DEFINE_string(coordinator, "", "Coordinator endpoint, e.g. tcp://127.0.0.1:5555 (required without "
              "--coordination); under ZooKeeper coordination any coordinator of the job (a "
              "standby redirects to the leader), or several, comma-separated");
DEFINE_string(coordination, "",
              "zk://HOST:PORT[,HOST:PORT...]/PATH, the coordinators' --coordination: find the "
              "leading coordinator in ZooKeeper and follow it when it changes (no --coordinator "
              "needed)");
DEFINE_int32(zk_session_timeout_ms, 4000,
             "--coordination: session timeout of the server's ZooKeeper watch");
DEFINE_string(bind, "tcp://127.0.0.1:*",
              "ZeroMQ endpoint to bind ('*' port: OS-chosen), e.g. tcp://0.0.0.0:* for every "
              "interface (then also --advertise)");
DEFINE_string(advertise, "",
              "Address registered with the coordinator, which workers and peers connect to: "
              "HOST (with the bound port), HOST:PORT or tcp://HOST:PORT (default: the bound "
              "endpoint; required when --bind is a wildcard address)");
DEFINE_string(endpoint_file, "", "If set, the bound endpoint is written to this file");
DEFINE_int32(server_id, -1, "Server id to take (-1: assigned by the coordinator)");
DEFINE_bool(join, false,
            "Join a running job as a new server (an id after every known one, no --server_id): "
            "the coordinator moves part of the model to it (docs/elastic.md)");
DEFINE_int64(move_drain_timeout_ms, 10000,
             "A range move from this server fails if the range is not quiescent (no BSP round "
             "pending, no pull waiting) within this many ms");
DEFINE_int32(move_window_pieces, 1,
             "MOVE_STATE pieces (--state_transfer_chunk_kb each) a range move keeps in flight to "
             "its destination");
DEFINE_bool(move_copy_first, true,
            "A dense range move copies the range while it serves and catches up before the "
            "cut-over, which then sends only what changed (false: the cut-over sends the range)");
DEFINE_int32(move_catchup_rounds, 8,
             "Catch-up rounds at most after a range move's copy (--move_copy_first)");
DEFINE_int64(move_catchup_kb, 1024,
             "A range move cuts over once a catch-up round's writes are at most this many KiB");
DEFINE_bool(move_forward_updates, true,
            "During a dense range move's copy the source forwards every update of the moved keys "
            "to the destination: the cut-over sends only the metadata (--move_copy_first)");
DEFINE_int64(move_forward_window_mb, 1024,
             "A range move gives forwarding up (the cut-over sends the keys written since its "
             "copy began) once this many MiB of forwarded updates are unacknowledged");
DEFINE_int64(move_piece_timeout_ms, 30000,
             "A range move fails if the destination does not answer a piece within this many ms");
DEFINE_string(store, "",
              "Parameter store: rocksdb or memory (default: rocksdb when --data_dir is set, "
              "memory otherwise)");
DEFINE_string(data_dir, "", "RocksDB directory (store=rocksdb)");
DEFINE_int32(cache_mb, 256, "Sparse-row cache budget in MiB (store=rocksdb)");
DEFINE_bool(wal_per_update, false,
            "Write every update to a log before acknowledging it and sync the log (group "
            "commit; --wal_reply says whether the answer waits for the sync): nothing "
            "acknowledged is lost; dense optimizer steps are logged as their gradients and "
            "replayed on restart");
DEFINE_int32(dense_log_mb, 64,
             "With --wal_per_update: once the dense update log holds this many MiB, the store "
             "flushes the dense tables it changed and starts the log over (larger: fewer "
             "flushes, a longer replay after a crash)");
DEFINE_bool(wal_group_commit, true,
            "With --wal_per_update: one WAL sync per batch of received requests, after which "
            "the batch's updates are acknowledged (false: one sync per update)");
DEFINE_string(wal_reply, "applied",
              "With --wal_per_update and --wal_group_commit, when an update is answered: "
              "applied (once it is written to the log file: a crash of the server process "
              "loses nothing answered; the log is synced in the background right after, so a "
              "crash of the machine can lose the last sync's updates, about a millisecond) or "
              "durable (once the log is synced: nothing answered is lost even then; every "
              "update waits for the disk's fdatasync)");
DEFINE_int32(flush_every_clocks, -1,
             "Flush the store every N clocks; a crash loses at most N clocks (-1: 10 for "
             "store=rocksdb, 0 for memory; 0: only at checkpoints and exit)");
DEFINE_string(checkpoint_dir, "",
              "Root of this server's checkpoints <dir>/ckpt-<clock> (default: "
              "<data_dir>/../checkpoints/<name of data_dir>)");
DEFINE_int32(keep_checkpoints, 3, "Checkpoints kept on disk (older ones are deleted)");
DEFINE_string(restore_from, "",
              "Before serving, replace --data_dir with a checkpoint: 'latest' (newest valid "
              "one under --checkpoint_dir) or a checkpoint directory");
DEFINE_string(on_disk_error, "continue",
              "When a checkpoint, flush or WAL write fails (a full or failing disk): continue "
              "(train on, not durably; reported in the disk_error event, relaxps-ctl stats "
              "durable=false and the relaxps_server_durable metric until a write succeeds) "
              "or stop (the server exits with 1 naming the write, ending the job unless its "
              "recovery policy restarts it)");
DEFINE_string(device, "cpu", "Device for optimizer updates: cpu or cuda");
DEFINE_int32(heartbeat_ms, 200, "Heartbeat period to the coordinator");
DEFINE_string(security, "plain",
              "plain (no authentication: anyone who reaches an endpoint can read and change the "
              "model) or curve (CurveZMQ: only the job's keys, roles bound to keys)");
DEFINE_string(keys_dir, "", "--security=curve: the job's keys (relaxps-ctl keygen DIR)");
DEFINE_bool(insecure_bind_public, false,
            "Allow --bind on a non-loopback address without --security=curve");
DEFINE_int32(coordinator_timeout_ms, 30000,
             "Exit (code 1) after this long without an answer from the coordinator");
DEFINE_int64(max_server_mb, 16384,
             "Most MiB of dense shards (parameters and optimizer state) this server holds; a "
             "table past it is refused (0: unlimited)");
DEFINE_int32(max_clocks_ahead, 4,
             "BSP/SSP: a push or clock more than staleness + this many clocks ahead of the "
             "shard is refused");
DEFINE_int32(max_queued_replies, 128,
             "Most replies queued for a peer that does not read them; more are dropped");
DEFINE_int64(max_unread_reply_mb, 256,
             "Most MiB of replies queued, or reserved by pulls in progress, for all peers "
             "together; a pull or PushPull whose reply would pass it is refused with "
             "ResourceExhausted before anything is applied, and the client retries it "
             "(0: unlimited)");
DEFINE_int64(max_unread_reply_mb_per_peer, 64,
             "Most MiB of replies queued, or reserved by pulls in progress, for one peer "
             "(connection; a peer with nothing queued always gets one reply); a pull or "
             "PushPull past it is refused with ResourceExhausted before anything is applied, "
             "and the client retries it (0: unlimited)");
DEFINE_int64(max_parked_mb, 64,
             "Most MiB of pulls waiting at the consistency gates (about 1 KiB each); more are "
             "refused (0: unlimited)");
DEFINE_int64(max_parked_mb_per_peer, 16,
             "Most MiB of waiting pulls from one connection; more are refused (0: unlimited)");
DEFINE_int64(reply_pool_trim_ms, 10000,
             "Every this many ms, free the pooled reply buffers that went unused since the "
             "last time (memory back after a burst of large pulls; 0: keep them, up to 1 GiB)");
DEFINE_int64(max_message_mb, 1024,
             "Largest message accepted, in MiB; a peer sending a bigger one is disconnected");
DEFINE_int64(state_transfer_chunk_kb, 8192,
             "--recovery=chain: a state transfer to a joining replica travels in pieces of at "
             "most this many KiB (and half of --max_message_mb), one in flight");

namespace {
relaxps::Server* g_server = nullptr;
void Stop() {
  if (g_server != nullptr) g_server->Stop();
}
}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);  // Before gflags edits argv.
  gflags::SetUsageMessage(
      "relaxps parameter server\n  relaxps-server --coordinator=tcp://HOST:PORT|--coordination=zk://HOST:PORT/PATH [--bind=...] "
      "[--advertise=HOST] [--metrics_port=N] [flags]\n  Flags may also come from a file: "
      "--flagfile=FILE (one --flag=value per line, # comments).");
  if (relaxps::Status s = relaxps::CheckCommandLine(argc, argv, false); !s.ok()) {
    return relaxps::Fail("relaxps-server", s, 2);
  }
  relaxps::ParseFlagsWithHelp(&argc, &argv, relaxps::ServerFlagGroups());
  relaxps::InitLogging(argv[0]);
  relaxps::TuneMallocForLargeMessages();
  relaxps::ScaleTimeoutFlags(relaxps::SanitizerTimeScale(), {"coordinator_timeout_ms"});
  const char* kName = "relaxps-server";
  if (argc > 1) {
    return relaxps::Fail(kName, relaxps::InvalidArgumentError(std::string("unexpected argument '") + argv[1] + "'"), 2);
  }
  if (!FLAGS_coordination.empty()) {
    if (auto a = relaxps::ParseZkAddress(FLAGS_coordination); !a.ok()) {
      return relaxps::Fail(kName, a.status(), 2);
    }
  }
  if (FLAGS_coordinator.empty() && FLAGS_coordination.empty()) {
    return relaxps::Fail(kName, relaxps::InvalidArgumentError(
                                    "--coordinator or --coordination (zk://HOST:PORT/PATH) is "
                                    "required"), 2);
  }
  if (FLAGS_cache_mb <= 0 || FLAGS_heartbeat_ms <= 0 || FLAGS_flush_every_clocks < -1 ||
      FLAGS_keep_checkpoints < 1) {
    return relaxps::Fail(kName, relaxps::InvalidArgumentError("--cache_mb, --heartbeat_ms and --keep_checkpoints must be > 0, --flush_every_clocks >= 0"), 2);
  }
  relaxps::ServerOptions options;
  options.store.kind = FLAGS_store;
  options.store.data_dir = FLAGS_data_dir;
  const std::string store = options.store.ResolvedKind();
  if (store != "memory" && store != "rocksdb") {
    return relaxps::Fail(kName, relaxps::InvalidArgumentError("--store must be rocksdb or memory, got '" + store + "'"), 2);
  }
  if (store == "rocksdb" && FLAGS_data_dir.empty()) {
    return relaxps::Fail(kName, relaxps::InvalidArgumentError("--store=rocksdb needs --data_dir"), 2);
  }
  options.coordinator = FLAGS_coordinator;
  options.coordination = FLAGS_coordination;
  options.zk_session_timeout_ms = FLAGS_zk_session_timeout_ms;
  options.bind = FLAGS_bind;
  options.advertise = FLAGS_advertise;
  // A wildcard --bind without --advertise, or a malformed --advertise: a
  // usage error before anything binds (the port is checked once bound).
  if (auto a = relaxps::AdvertisedEndpoint(FLAGS_bind, FLAGS_advertise); !a.ok()) {
    return relaxps::Fail(kName, a.status(), 2);
  }
  if (auto src = relaxps::SourceAddressFromFlags(); src.ok()) {
    options.source_address = *src;
  } else {
    return relaxps::Fail(kName, src.status(), 2);
  }
  options.server_id = FLAGS_server_id;
  if (FLAGS_join && FLAGS_server_id >= 0) {
    return relaxps::Fail(kName, relaxps::InvalidArgumentError(
                                    "--join takes the next free id: do not pass --server_id"),
                         2);
  }
  if (FLAGS_dense_log_mb < 1) {
    return relaxps::Fail(kName, relaxps::InvalidArgumentError("--dense_log_mb must be >= 1"), 2);
  }
  if (FLAGS_move_drain_timeout_ms < 1) {
    return relaxps::Fail(kName,
                         relaxps::InvalidArgumentError("--move_drain_timeout_ms must be >= 1"), 2);
  }
  if (FLAGS_move_window_pieces < 1 || FLAGS_move_window_pieces > 64) {
    return relaxps::Fail(
        kName, relaxps::InvalidArgumentError("--move_window_pieces must be in [1, 64]"), 2);
  }
  if (FLAGS_move_catchup_rounds < 0 || FLAGS_move_catchup_kb < 0 ||
      FLAGS_move_piece_timeout_ms < 1 || FLAGS_move_forward_window_mb < 1) {
    return relaxps::Fail(kName,
                         relaxps::InvalidArgumentError(
                             "--move_catchup_rounds and --move_catchup_kb must be >= 0, "
                             "--move_piece_timeout_ms and --move_forward_window_mb >= 1"),
                         2);
  }
  options.move_copy_first = FLAGS_move_copy_first;
  options.move_catchup_rounds = FLAGS_move_catchup_rounds;
  options.move_catchup_bytes = static_cast<size_t>(FLAGS_move_catchup_kb) << 10;
  options.move_forward_updates = FLAGS_move_forward_updates;
  options.move_forward_window_bytes = static_cast<size_t>(FLAGS_move_forward_window_mb) << 20;
  options.move_piece_timeout_ms = FLAGS_move_piece_timeout_ms;
  options.join = FLAGS_join;
  options.move_window_pieces = FLAGS_move_window_pieces;
  options.move_drain_timeout_ms = FLAGS_move_drain_timeout_ms;
  options.store.cache_mb = static_cast<size_t>(FLAGS_cache_mb);
  options.store.wal_per_update = FLAGS_wal_per_update;
  options.store.wal_group_commit = FLAGS_wal_group_commit;
  options.store.dense_log_mb = static_cast<size_t>(FLAGS_dense_log_mb);
  options.flush_every_clocks = FLAGS_flush_every_clocks;  // -1: the library's default.
  options.checkpoint_dir = FLAGS_checkpoint_dir;
  options.keep_checkpoints = FLAGS_keep_checkpoints;
  options.restore_from = FLAGS_restore_from;
  options.heartbeat_ms = FLAGS_heartbeat_ms;
  auto wal_reply = relaxps::ParseWalReply(FLAGS_wal_reply);
  if (!wal_reply.ok()) return relaxps::Fail(kName, wal_reply.status(), 2);
  options.wal_reply = *wal_reply;
  auto on_disk_error = relaxps::ParseOnDiskError(FLAGS_on_disk_error);
  if (!on_disk_error.ok()) return relaxps::Fail(kName, on_disk_error.status(), 2);
  options.on_disk_error = *on_disk_error;
  if (FLAGS_max_server_mb < 0 || FLAGS_max_clocks_ahead < 0 || FLAGS_max_queued_replies < 1 ||
      FLAGS_max_message_mb < 1 || FLAGS_state_transfer_chunk_kb < 4 ||
      FLAGS_max_unread_reply_mb < 0 || FLAGS_max_unread_reply_mb_per_peer < 0 ||
      FLAGS_max_parked_mb < 0 || FLAGS_max_parked_mb_per_peer < 0 || FLAGS_reply_pool_trim_ms < 0) {
    return relaxps::Fail(kName, relaxps::InvalidArgumentError(
                                    "--max_server_mb, --max_clocks_ahead, --max_unread_reply_mb"
                                    "[_per_peer], --max_parked_mb[_per_peer] and "
                                    "--reply_pool_trim_ms must be >= 0, "
                                    "--max_queued_replies and --max_message_mb >= 1, "
                                    "--state_transfer_chunk_kb >= 4"),
                         2);
  }
  options.max_bytes = static_cast<uint64_t>(FLAGS_max_server_mb) << 20;
  options.max_clocks_ahead = FLAGS_max_clocks_ahead;
  options.coordinator_timeout_ms = FLAGS_coordinator_timeout_ms;
  auto curve = relaxps::SecurityFromFlags(FLAGS_security, FLAGS_keys_dir,
                                          "server-" + std::to_string(FLAGS_server_id));
  if (!curve.ok()) return relaxps::Fail(kName, curve.status(), 2);
  options.curve = *curve;
  if (relaxps::Status b = relaxps::CheckBindIsSafe(FLAGS_bind, curve->enabled(),
                                                   FLAGS_insecure_bind_public);
      !b.ok()) {
    return relaxps::Fail(kName, b, 2);
  }
  options.max_queued_replies = FLAGS_max_queued_replies;
  options.max_unread_reply_bytes = FLAGS_max_unread_reply_mb << 20;
  options.max_unread_reply_bytes_per_peer = FLAGS_max_unread_reply_mb_per_peer << 20;
  options.max_parked_bytes = FLAGS_max_parked_mb << 20;
  options.max_parked_bytes_per_peer = FLAGS_max_parked_mb_per_peer << 20;
  options.reply_pool_trim_ms = FLAGS_reply_pool_trim_ms;
  options.max_message_bytes = FLAGS_max_message_mb << 20;
  options.state_transfer_chunk_bytes = static_cast<size_t>(FLAGS_state_transfer_chunk_kb) << 10;
  auto device = relaxps::kernels::ParseDeviceType(FLAGS_device);
  if (!device.ok()) return relaxps::Fail(kName, device.status(), 2);
  options.device.type = *device;
  // Named "server-<id>" by the server once it registered.
  auto events = relaxps::EventsFromFlags("");
  if (!events.ok()) return relaxps::Fail(kName, events.status(), 2);
  options.events = *events;
  relaxps::metrics::Registry registry;
  if (relaxps::MetricsEnabled()) options.metrics = &registry;
  // Before the server registers, so a port in use is a startup error; reset
  // before the server is destroyed (scrapes read its loop).
  auto exporter = relaxps::StartMetricsFromFlags(kName, FLAGS_bind, &registry);
  if (!exporter.ok()) {
    return relaxps::Fail(kName, exporter.status(),
                         exporter.status().code() == relaxps::StatusCode::kInvalidArgument ? 2 : 1);
  }
  auto server = relaxps::Server::Start(options);
  if (!server.ok()) {
    exporter->reset();
    const bool usage = server.status().code() == relaxps::StatusCode::kInvalidArgument ||
                       (options.device.type == relaxps::kernels::DeviceType::kCuda &&
                        server.status().code() == relaxps::StatusCode::kUnavailable);
    return relaxps::Fail(kName, server.status(), usage ? 2 : 1);
  }
  g_server = server->get();
  relaxps::StopOnSignals(&Stop);
  relaxps::Status s = relaxps::WriteFileAtomically(FLAGS_endpoint_file, (*server)->endpoint());
  if (!s.ok()) {
    exporter->reset();
    return relaxps::Fail(kName, s, 1);
  }
  std::printf("relaxps-server %d listening on %s\n", (*server)->id(), (*server)->endpoint().c_str());
  std::fflush(stdout);
  s = (*server)->Run();
  exporter->reset();
  g_server = nullptr;
  if (auto restart = (*server)->restart_in_place()) {
    // Declared dead: come back as a restart would (Server::RestartInPlace).
    // The old server is destroyed first: it closes its store and sockets.
    server->reset();
    std::vector<std::string> extra = {"--server_id=" + std::to_string(restart->server_id)};
    std::vector<std::string> names = {"server_id", "restore_from"};
    std::string shown = extra[0];
    for (const std::string& flag : restart->flags) {
      // "--NAME=VALUE": an earlier --NAME is replaced.
      const size_t start = flag.find_first_not_of('-');
      const size_t eq = flag.find('=');
      if (start != std::string::npos) {
        names.push_back(flag.substr(start, eq == std::string::npos ? eq : eq - start));
      }
      extra.push_back(flag);
      shown += " " + flag;
    }
    std::fprintf(stderr, "relaxps-server: %s; re-executing with %s\n", s.ToString().c_str(),
                 shown.c_str());
    s = relaxps::ReExecSelf(relaxps::ReplaceFlags(args, names, extra));
  }
  return s.ok() ? 0 : relaxps::Fail(kName, s, 1);
}
