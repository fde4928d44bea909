// relaxps-bench-range-move: range migration throughput (issue 43), in GB/s,
// against the bare ZeroMQ yardstick measured in the same run.
//
// Each repetition starts an in-process job over real ZeroMQ TCP on
// 127.0.0.1: a coordinator (--recovery=none, async), server 0 (memory store)
// holding a dense sgd table of 2 x --mb MiB, and then server 1 with --join:
// the coordinator splits the range in two halves and moves the tail (--mb
// MiB of parameters) to server 1 (docs/elastic.md: prepare, drain and cut,
// copy in MOVE_STATE pieces, publish). The figure is the moved bytes over the
// move's time as the coordinator measures it (range_move_done's `ms`: from
// its first MOVE_RANGE to the published map).
//
// The yardstick is the ZeroMQ DEALER/ROUTER echo (bench/internal/zmq_echo.h,
// zero-copy) with the mover's message: requests of one MOVE_STATE piece's
// payload (--chunk_kb), small replies (the piece's acknowledgement), as many
// in flight as the mover keeps (--window), measured right before each
// repetition so that both see the same machine load. Its GB/s counts bytes
// sent + received, i.e. the one-way payload rate plus the tiny replies.
// `ratio` = migration GB/s / echo GB/s (target >= 0.5, docs/benchmarks.md).
//
// The cut-over (docs/elastic.md "One move"): with --push_kb > 0 a worker
// pushes slices of that many KiB of gradients at rotating offsets all over
// the table throughout the move, one every --push_interval_ms, and server 0 reports the move's
// range_move_cutover event: the pause (`pause_ms`, the moved keys' writes
// held, from the cut to the published map), the bytes the cut-over sent
// (`cutover_bytes`), the catch-up rounds. With --compare_whole each
// repetition also runs the move with the whole range sent at the cut
// (--nomove_copy_first, the mechanism before the copy phase), alternating
// which goes first, and reports it as range_move/dense/whole_cutover; with
// --compare_catchup also the copy phase without forwarding its updates
// (--nomove_forward_updates: catch-up rounds), as range_move/dense/catchup.
//
// Prints one JSON object on stdout: {"bench":"range_move", ..., "results":[
//   {"name":"range_move/dense","moved_bytes":268435456,"value":1.1,"unit":"GB/s",
//    "ms":230,"yardstick":"zmq_echo/zerocopy/oneway/8MiB/if4",
//    "yardstick_value":1.9,"ratio":0.58,"better":"higher"}]}
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/internal/bench_util.h"
#include "bench/internal/zmq_echo.h"
#include "client/client.h"
#include "common/flag_help.h"
#include "coordinator/coordinator.h"
#include "server/server.h"

DEFINE_int32(mb, 256, "MiB of parameters moved (the table holds twice as many; half moves).");
DEFINE_int32(reps, 3, "Repetitions (a fresh job each); the best is reported.");
DEFINE_int32(chunk_kb, 8192,
             "Payload KiB per MOVE_STATE piece (the server's --state_transfer_chunk_kb) and the "
             "yardstick's request size.");
DEFINE_int32(window, 0,
             "MOVE_STATE pieces in flight (the server's --move_window_pieces; 0: its default). "
             "The yardstick keeps as many echoes in flight.");
DEFINE_double(echo_seconds, 1.0, "Time box of the yardstick's measurement per repetition.");
DEFINE_int32(push_kb, 0,
             "KiB of gradients per push of the worker that pushes throughout the move (0: none).");
DEFINE_int32(push_interval_ms, 5,
             "Pause between two pushes of that worker (its compute time per step).");
DEFINE_bool(compare_whole, false,
            "Also run each repetition with the whole range sent at the cut-over (no copy phase).");
DEFINE_bool(compare_catchup, false,
            "Also run each repetition with the copy phase's catch-up rounds instead of forwarded "
            "updates (--nomove_forward_updates).");
DEFINE_bool(quick, false, "Short run: --mb=64 --reps=2 --echo_seconds=0.3 unless given.");

namespace relaxps {
namespace bench {
namespace {

// The `ms` of the first range_move_done in a coordinator's events file, or
// -1 (no such event yet).
int64_t MoveDoneMs(const std::string& events_file) {
  std::ifstream in(events_file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"kind\":\"range_move_done\"") == std::string::npos) continue;
    const size_t at = line.find("\"ms\":");
    if (at == std::string::npos) return -1;
    return std::strtoll(line.c_str() + at + 5, nullptr, 10);
  }
  return -1;
}

struct MoveResult {
  Status status;
  int64_t ms = 0;
  // Server 0's range_move_cutover.
  int64_t pause_ms = -1;
  int64_t cutover_bytes = -1;
  int64_t catchup_rounds = -1;
  int64_t copied_bytes = -1;
  int64_t forwarded_updates = -1;
  uint64_t pushes = 0;  // The pushing worker's, during the run.
};

// Integer field `key` of a JSON event line (-1: absent).
int64_t EventField(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  return std::strtoll(line.c_str() + at + key.size() + 3, nullptr, 10);
}

// One job: server 0 with the table, server 1 joins, the tail half moves.
MoveResult RunMove(uint64_t moved_bytes, const std::string& events_file, bool copy_first,
                   bool forward) {
  MoveResult result;
  std::mutex cutover_mu;
  std::string cutover;  // Guarded by cutover_mu.
  EventLogOptions eo;
  eo.process = "server-0";
  eo.on_line = [&](const std::string& line) {
    if (line.find("\"kind\":\"range_move_cutover\"") == std::string::npos) return;
    std::lock_guard<std::mutex> lock(cutover_mu);
    cutover = line;
  };
  auto source_events = EventLog::Open(eo);
  CHECK(source_events.ok()) << source_events.status();
  std::filesystem::remove(events_file);
  CoordinatorOptions co;
  co.num_servers = 1;
  co.consistency = ConsistencyModel::kAsync;
  co.events_file = events_file;
  auto c = Coordinator::Start(co);
  CHECK(c.ok()) << c.status();
  std::unique_ptr<Coordinator> coordinator = std::move(c).value();
  std::thread coordinator_thread([&] { coordinator->Run(); });
  auto server_options = [&](bool join) {
    ServerOptions so;
    so.coordinator = coordinator->endpoint();
    so.store.kind = "memory";
    so.join = join;
    so.state_transfer_chunk_bytes = size_t(FLAGS_chunk_kb) << 10;
    if (FLAGS_window > 0) so.move_window_pieces = FLAGS_window;
    so.move_copy_first = copy_first;
    so.move_forward_updates = forward;
    if (!join) so.events = *source_events;
    return so;
  };
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::thread> threads;
  auto start_server = [&](bool join) {
    auto s = Server::Start(server_options(join));
    CHECK(s.ok()) << s.status();
    servers.push_back(std::move(s).value());
    Server* raw = servers.back().get();
    threads.emplace_back([raw] { raw->Run().IgnoreError(); });
  };
  start_server(false);
  ClientOptions o;
  o.coordinator = coordinator->endpoint();
  o.request_timeout_ms = 120000;
  auto client = Client::Connect(o);
  CHECK(client.ok()) << client.status();
  TableOptions t;
  t.name = "w";
  t.size = 2 * moved_bytes / sizeof(float);
  t.optimizer.name = "sgd";
  Status created = (*client)->CreateTable(t);
  CHECK(created.ok()) << created;
  // The table exists on server 0 once a pull of it is answered.
  Status pulled = (*client)->Pull("w", 0, FloatBuffer(1)).get();
  CHECK(pulled.ok()) << pulled;
  // The worker that pushes throughout: slices at rotating offsets.
  std::atomic<bool> stop_pushing{false};
  std::atomic<uint64_t> pushes{0};
  std::thread pusher;
  const uint64_t slice = std::min<uint64_t>(uint64_t(FLAGS_push_kb) << 8, t.size);
  if (slice > 0) {
    pusher = std::thread([&] {
      FloatBuffer grads(slice);
      std::fill(grads.begin(), grads.end(), 1e-6f);
      const uint64_t slices = t.size / slice;
      for (uint64_t k = 0; !stop_pushing.load(); ++k) {
        Status s = (*client)->Push("w", ((k * 7919) % slices) * slice, grads).get();
        CHECK(s.ok()) << s;
        pushes.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_push_interval_ms));
      }
    });
    while (pushes.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  start_server(true);
  const auto give_up = Clock::now() + std::chrono::seconds(120);
  while ((result.ms = MoveDoneMs(events_file)) < 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (result.ms < 0) result.status = DeadlineExceededError("the range never moved");
  // The source reports the cut-over once it installed the publishing map.
  while (result.ms >= 0 && Clock::now() < give_up) {
    {
      std::lock_guard<std::mutex> lock(cutover_mu);
      if (!cutover.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  {
    std::lock_guard<std::mutex> lock(cutover_mu);
    result.pause_ms = EventField(cutover, "pause_ms");
    result.cutover_bytes = EventField(cutover, "cutover_bytes");
    result.catchup_rounds = EventField(cutover, "catchup_rounds");
    result.copied_bytes = EventField(cutover, "copied_bytes");
    result.forwarded_updates = EventField(cutover, "forwarded_updates");
  }
  stop_pushing = true;
  if (pusher.joinable()) pusher.join();
  result.pushes = pushes.load();
  client->reset();
  for (auto& s : servers) s->Stop();
  coordinator->Stop();
  for (auto& t : threads) t.join();
  coordinator_thread.join();
  std::filesystem::remove(events_file);
  return result;
}

int Main() {
  const uint64_t moved_bytes = uint64_t(FLAGS_mb) << 20;
  const size_t chunk = size_t(FLAGS_chunk_kb) << 10;
  const int window = FLAGS_window > 0 ? FLAGS_window : ServerOptions().move_window_pieces;
  const std::string events_file = (std::filesystem::temp_directory_path() /
                                   ("relaxps-bench-range-move-" + std::to_string(getpid()) +
                                    ".jsonl"))
                                      .string();
  // Per mode: the copy phase (the default) and, with --compare_whole, the
  // whole range sent at the cut.
  struct Mode {
    std::string name;
    bool copy_first = true;
    bool forward = true;
    double best_gbps = 0;
    int64_t best_ms = 0;
    std::vector<MoveResult> runs;
  };
  std::vector<Mode> modes(1);
  modes[0].name = "range_move/dense";
  if (FLAGS_compare_whole) {
    modes.emplace_back();
    modes.back().name = "range_move/dense/whole_cutover";
    modes.back().copy_first = false;
  }
  if (FLAGS_compare_catchup) {
    modes.emplace_back();
    modes.back().name = "range_move/dense/catchup";
    modes.back().forward = false;
  }
  double best_echo = 0;
  std::string error;
  for (int rep = 0; rep < FLAGS_reps && error.empty(); ++rep) {
    EchoOptions e;
    e.request_bytes = chunk;
    e.reply_bytes = 64;  // A piece's acknowledgement: a header.
    e.in_flight = window;
    e.zero_copy = true;
    e.seconds = FLAGS_echo_seconds;
    const Measurement echo = RunEcho(e);
    best_echo = std::max(best_echo, echo.gbps());
    for (size_t i = 0; i < modes.size() && error.empty(); ++i) {
      // Alternate which mode goes first.
      Mode& mode = modes[(i + rep) % modes.size()];
      MoveResult move = RunMove(moved_bytes, events_file, mode.copy_first, mode.forward);
      if (!move.status.ok()) {
        error = move.status.ToString();
        break;
      }
      const double gbps = move.ms > 0 ? moved_bytes / (move.ms / 1000.0) / 1e9 : 0;
      std::fprintf(stderr,
                   "rep %d %s: moved %d MiB in %lld ms: %.3f GB/s; echo %.3f GB/s; cut-over "
                   "%lld bytes, pause %lld ms, %lld catch-up round(s), %lld forwarded, "
                   "%llu pushes\n",
                   rep, mode.name.c_str(), FLAGS_mb, static_cast<long long>(move.ms), gbps,
                   echo.gbps(), static_cast<long long>(move.cutover_bytes),
                   static_cast<long long>(move.pause_ms),
                   static_cast<long long>(move.catchup_rounds),
                   static_cast<long long>(move.forwarded_updates),
                   static_cast<unsigned long long>(move.pushes));
      if (gbps > mode.best_gbps) {
        mode.best_gbps = gbps;
        mode.best_ms = move.ms;
      }
      mode.runs.push_back(move);
    }
  }
  JsonWriter json;
  json.BeginObject()
      .Field("bench", "range_move")
      .Field("mb", FLAGS_mb)
      .Field("reps", FLAGS_reps)
      .Field("chunk_bytes", uint64_t(chunk))
      .Field("window", window)
      .Field("push_kb", FLAGS_push_kb)
      .Field("push_interval_ms", FLAGS_push_interval_ms)
      .Key("results")
      .BeginArray();
  for (const Mode& mode : modes) {
    if (!error.empty()) break;
    // The median repetition's pause and cut-over bytes.
    std::vector<int64_t> pauses, cutovers;
    for (const MoveResult& r : mode.runs) {
      pauses.push_back(r.pause_ms);
      cutovers.push_back(r.cutover_bytes);
    }
    std::sort(pauses.begin(), pauses.end());
    std::sort(cutovers.begin(), cutovers.end());
    json.BeginObject()
        .Field("name", mode.name)
        .Field("moved_bytes", moved_bytes)
        .Field("value", mode.best_gbps)
        .Field("unit", "GB/s")
        .Field("ms", mode.best_ms)
        .Field("pause_ms_median", pauses[pauses.size() / 2])
        .Field("pause_ms_max", pauses.back())
        .Field("cutover_bytes_median", cutovers[cutovers.size() / 2])
        .Field("yardstick", "zmq_echo/zerocopy/oneway/" + SizeLabel(chunk) + "/if" +
                                std::to_string(window))
        .Field("yardstick_value", best_echo)
        .Field("ratio", best_echo > 0 ? mode.best_gbps / best_echo : 0.0)
        .Field("better", "higher")
        .EndObject();
  }
  json.EndArray();
  if (!error.empty()) json.Field("error", error);
  json.EndObject();
  std::printf("%s\n", json.str().c_str());
  return error.empty() ? 0 : 1;
}

}  // namespace
}  // namespace bench
}  // namespace relaxps

int main(int argc, char** argv) {
  relaxps::ParseFlagsWithHelp(&argc, &argv);
  if (FLAGS_quick) {
    if (gflags::GetCommandLineFlagInfoOrDie("mb").is_default) FLAGS_mb = 64;
    if (gflags::GetCommandLineFlagInfoOrDie("reps").is_default) FLAGS_reps = 2;
    if (gflags::GetCommandLineFlagInfoOrDie("echo_seconds").is_default) FLAGS_echo_seconds = 0.3;
  }
  if (FLAGS_mb < 1 || FLAGS_reps < 1 || FLAGS_chunk_kb < 4 || FLAGS_window < 0 ||
      FLAGS_push_kb < 0 || FLAGS_push_interval_ms < 0) {
    std::fprintf(stderr, "relaxps-bench-range-move: --mb, --reps must be >= 1, --chunk_kb >= 4, "
                         "--window, --push_kb, --push_interval_ms >= 0\n");
    return 2;
  }
  // Both the echo's and the mover's pieces are 8 MiB by default; the moved
  // range's copies are hundreds of MiB: one heap, nothing mmapped per message.
  relaxps::bench::TuneMallocForHugeMessages();
  return relaxps::bench::Main();
}
