// relaxps-bench-zmq: the bare-ZeroMQ yardstick. A DEALER client and a ROUTER
// echo server (one thread each) in one process over tcp://127.0.0.1:*,
// message sizes 4 KiB .. 64 MiB, copy and zero-copy variants, 1 and 8
// messages in flight. Reports GB/s (bytes sent + received), round trips/s and,
// for 4 KiB with one in flight, p50/p99 round-trip latency. Each figure is the
// best of --reps time-boxed repetitions of --seconds.
//
// Prints one JSON object on stdout, e.g.
//   {"bench":"zmq_echo","seconds":1,"reps":3,"results":[{"name":"echo/zerocopy/4KiB/if1",
//     "bytes":4096,"zero_copy":true,"in_flight":1,"gbps":0.2,"round_trips_per_s":24000,
//     "p50_us":38,"p99_us":70},...]}
#include <gflags/gflags.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench/internal/bench_util.h"
#include "bench/internal/zmq_echo.h"
#include "common/flag_help.h"

DEFINE_double(seconds, 1.0, "Time box of one repetition, in seconds.");
DEFINE_int32(reps, 3, "Repetitions per configuration; the best one is reported.");
DEFINE_bool(quick, false, "Short run: --seconds=0.25 --reps=2 unless given explicitly.");
DEFINE_string(sizes, "4096,1048576,16777216,67108864", "Comma-separated message sizes (bytes).");

namespace relaxps {
namespace bench {
namespace {

std::vector<size_t> ParseSizes(const std::string& csv) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t end = csv.find(',', pos);
    if (end == std::string::npos) end = csv.size();
    if (end > pos) out.push_back(std::stoull(csv.substr(pos, end - pos)));
    pos = end + 1;
  }
  return out;
}

int Main() {
  JsonWriter json;
  json.BeginObject()
      .Field("bench", "zmq_echo")
      .Field("seconds", FLAGS_seconds)
      .Field("reps", FLAGS_reps)
      .Key("results")
      .BeginArray();
  for (size_t bytes : ParseSizes(FLAGS_sizes)) {
    for (bool zero_copy : {false, true}) {
      for (int in_flight : {1, 8}) {
        EchoOptions o;
        o.request_bytes = o.reply_bytes = bytes;
        o.zero_copy = zero_copy;
        o.in_flight = in_flight;
        o.seconds = FLAGS_seconds;
        o.record_latency = bytes <= 4096 && in_flight == 1;
        if (FLAGS_quick) o.warmup_ops = 1;
        BestOf best;
        for (int rep = 0; rep < FLAGS_reps; ++rep) best.Add(RunEcho(o));
        const Measurement& m = best.best();
        const std::string name = std::string("echo/") + EchoVariantName(zero_copy) + "/" +
                                 SizeLabel(bytes) + "/if" + std::to_string(in_flight);
        json.BeginObject()
            .Field("name", name)
            .Field("bytes", uint64_t(bytes))
            .Field("zero_copy", zero_copy)
            .Field("in_flight", in_flight)
            .Field("gbps", m.gbps())
            .Field("round_trips_per_s", m.ops_per_s());
        if (o.record_latency) json.Field("p50_us", best.p50_us()).Field("p99_us", best.p99_us());
        json.EndObject();
        std::fprintf(stderr, "%s: %.3f GB/s, %.0f rt/s\n", name.c_str(), m.gbps(), m.ops_per_s());
      }
    }
  }
  json.EndArray().EndObject();
  std::printf("%s\n", json.str().c_str());
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace relaxps

int main(int argc, char** argv) {
  relaxps::ParseFlagsWithHelp(&argc, &argv);
  if (FLAGS_quick) {
    if (gflags::GetCommandLineFlagInfoOrDie("seconds").is_default) FLAGS_seconds = 0.25;
    if (gflags::GetCommandLineFlagInfoOrDie("reps").is_default) FLAGS_reps = 2;
  }
  // The 64 MiB echo's own page faults (every message above 32 MiB was
  // mmapped): see TuneMallocForHugeMessages.
  for (size_t bytes : relaxps::bench::ParseSizes(FLAGS_sizes)) {
    if (bytes > (size_t{32} << 20)) {
      relaxps::bench::TuneMallocForHugeMessages();
      break;
    }
  }
  return relaxps::bench::Main();
}
