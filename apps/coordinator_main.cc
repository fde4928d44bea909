// relaxps-coordinator: the control process of a relaxps job.
#include <cstdio>

#include <gflags/gflags.h>

#include "apps/internal/events_flags.h"
#include "apps/internal/network_flags.h"
#include "apps/internal/main_util.h"
#include "apps/internal/metrics_flags.h"
#include "common/advertise.h"
#include "coordinator/coordinator.h"
#include "relaxps/recovery_policy.h"

DEFINE_string(bind, "tcp://127.0.0.1:*",
              "ZeroMQ endpoint to bind ('*' port: OS-chosen), e.g. tcp://0.0.0.0:5555 for every "
              "interface (then also --advertise)");
DEFINE_string(advertise, "",
              "Address other hosts reach the coordinator at, printed and written to "
              "--endpoint_file: HOST (with the bound port), HOST:PORT or tcp://HOST:PORT "
              "(default: the bound endpoint; required when --bind is a wildcard address)");
DEFINE_string(endpoint_file, "", "If set, the advertised endpoint is written to this file");
DEFINE_int32(num_servers, 1, "Servers the job waits for before tables can be created");
DEFINE_int32(num_workers, 0,
             "Workers expected; under bsp/ssp a start barrier: workers start once this many "
             "registered (0: no barrier)");
DEFINE_int32(start_barrier_timeout_ms, 300000,
             "How long workers wait at the start barrier before failing");
DEFINE_string(consistency, "async", "Consistency model: bsp, ssp or async");
DEFINE_int32(staleness, 2, "SSP staleness bound in clocks");
DEFINE_string(recovery, "none",
              "Recovery policy: what the job does when a server is lost (--recovery=help lists "
              "the registered policies, what each does and what it needs, and exits)");
// --recovery=help: print the registered policies and exit (not a policy).
constexpr char kListPolicies[] = "help";
// The recovery policies' options (RecoveryNeeds::options): only the ones
// given reach the policy, which fills in its defaults and refuses an option
// it does not have.
DEFINE_string(checkpoint_mode, "",
              "--recovery=checkpoint: async (training goes on while snapshots are written) or "
              "sync (each server holds writes until its snapshot is durable); default async");
DEFINE_string(replication, "",
              "--recovery=chain: sync (the head acknowledges once the tail has a write) or async "
              "(once it applied it, at most --replication_max_lag updates per range ahead of "
              "the tail); default sync");
DEFINE_int32(replication_max_lag, 64,
             "--recovery=chain --replication=async: updates per range the head may acknowledge "
             "before the tail has them (a head failure loses at most this many per range)");
DEFINE_int32(replicas, 2,
             "Under a policy that replicates ranges on chains (--recovery=help: replicas>=2): "
             "servers per chain (2 .. --num_servers)");
DEFINE_int32(sparse_buckets, 0,
             "Hash buckets of every sparse table, fixed at its creation and placed like dense "
             "ranges (0: one per server)");
DEFINE_int32(probe_timeout_ms, 100,
             "--recovery=chain: a server whose connection closed and that does not answer a "
             "probe this long is declared dead");
DEFINE_int32(takeover_probe_ms, 500,
             "A server registering with the id of a live one is refused if the old one answers "
             "a probe within this long");
DEFINE_int32(move_timeout_ms, 120000,
             "A range move's source step (drain the range, send it to the joined server) fails "
             "after this long without an answer (docs/elastic.md)");
DEFINE_int32(max_workers, 0,
             "Most live workers; more registrations are refused (0: 2 * --num_workers, at "
             "least --num_workers + 4, or 4096 without --num_workers)");
DEFINE_int64(max_members, 10000,
             "Most members listed at once, live or dead; more registrations are refused "
             "(workers that never sent a heartbeat are dropped once declared dead)");
DEFINE_int32(max_tables, 1024, "Most tables in the job; more CREATE_TABLEs are refused");
DEFINE_int64(max_control_per_min, 600,
             "Most control changes (new tables, learning-rate changes, checkpoints asked for) "
             "accepted per minute from all peers; more are refused (0: unlimited)");
DEFINE_int64(max_control_per_min_per_peer, 120,
             "Most control changes accepted per minute from one connection (0: unlimited)");
DEFINE_int64(max_table_mb, 4096,
             "Largest dense table admitted, in MiB of parameters (0: unlimited)");
DEFINE_int64(max_message_mb, 1024,
             "Largest message accepted, in MiB; a peer sending a bigger one is disconnected");
DEFINE_string(security, "plain",
              "plain (no authentication: anyone who reaches an endpoint can read and change the "
              "model) or curve (CurveZMQ: only the job's keys, roles bound to keys)");
DEFINE_string(keys_dir, "", "--security=curve: the job's keys (relaxps-ctl keygen DIR)");
DEFINE_bool(insecure_bind_public, false,
            "Allow --bind on a non-loopback address without --security=curve");
DEFINE_bool(exit_when_done, true,
            "End the job once --num_workers workers have left (servers flush and exit, then "
            "the coordinator); relaxps-ctl shutdown ends it either way");
DEFINE_int32(failed_exit_ms, 10000,
             "Exit (code 1) this long after the job failed, once clients could learn why "
             "(0: keep serving)");
DEFINE_string(seed_rule, "freshest",
              "--recovery=stateless: seed a new server from the freshest worker copy "
              "(freshest) or a clock-weighted average of the copies (average)");
DEFINE_string(merge_rule, "staleness",
              "--recovery=stateless: weight of the other workers' changes: staleness "
              "(1/staleness), average (1/workers, local SGD) or sum (TTF's blind sum)");
DEFINE_int32(spare_takeover_ms, 0,
             "--recovery=hybrid: a server that registers with another id than a stranded "
             "holder's (a spare, or another restarted server) takes over the ranges and buckets "
             "that holder held alone once it has been lost this long (0: at once); until then "
             "they wait for the holder's own restart");
DEFINE_int32(reseed_timeout_ms, 3000,
             "--recovery=stateless: how long a re-seed waits for the workers' copies");
DEFINE_string(data_dir, "",
              "Keep the job's state in a local RocksDB here: a coordinator restarted with the "
              "same --data_dir (and --bind) resumes the job (empty: in memory only)");
DEFINE_string(coordination, "",
              "zk://HOST:PORT[,HOST:PORT...]/PATH: keep the job's state in ZooKeeper under PATH; "
              "coordinators given the same PATH elect a leader, the others stand by and take "
              "over when it fails");
DEFINE_int32(zk_session_timeout_ms, 4000,
             "ZooKeeper session timeout: a failed leader is replaced within about 2x this; "
             "servers' and workers' --coordinator_timeout_ms must exceed 2x this + "
             "--heartbeat_timeout_ms");
DEFINE_int32(heartbeat_timeout_ms, 3000, "A member silent this long is declared dead");
DEFINE_int64(checkpoint_every_clocks, 0,
             "Coordinated checkpoint when the slowest worker's clock reaches a multiple of "
             "this (0: off)");
DEFINE_double(checkpoint_every_s, 0, "Coordinated checkpoint every this many seconds (0: off)");

namespace {
relaxps::Coordinator* g_coordinator = nullptr;
void Stop() {
  if (g_coordinator != nullptr) g_coordinator->Stop();
}
}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "relaxps coordinator: membership, shard map and job configuration\n  "
      "relaxps-coordinator [--bind=tcp://HOST:PORT] [--advertise=HOST] [--num_servers=N] "
      "[--metrics_port=N] [flags]\n  Flags may also come from a file: --flagfile=FILE (one "
      "--flag=value per line, # comments).");
  if (relaxps::Status s = relaxps::CheckCommandLine(argc, argv, false); !s.ok()) {
    return relaxps::Fail("relaxps-coordinator", s, 2);
  }
  relaxps::ParseFlagsWithHelp(&argc, &argv, relaxps::CoordinatorFlagGroups());
  if (FLAGS_recovery == kListPolicies) {
    std::printf("%s", relaxps::DescribeRecoveryPolicies(false).c_str());
    return 0;
  }
  relaxps::InitLogging(argv[0]);
  relaxps::ScaleTimeoutFlags(relaxps::SanitizerTimeScale(),
                             {"start_barrier_timeout_ms", "probe_timeout_ms", "heartbeat_timeout_ms",
                              "reseed_timeout_ms", "zk_session_timeout_ms"});
  if (argc > 1) {
    return relaxps::Fail("relaxps-coordinator",
                         relaxps::InvalidArgumentError(std::string("unexpected argument '") +
                                                       argv[1] + "'"),
                         2);
  }
  relaxps::CoordinatorOptions options;
  options.bind = FLAGS_bind;
  options.advertise = FLAGS_advertise;
  // A wildcard --bind without --advertise, or a malformed --advertise: a
  // usage error before anything binds (the port is checked once bound).
  if (auto a = relaxps::AdvertisedEndpoint(FLAGS_bind, FLAGS_advertise); !a.ok()) {
    return relaxps::Fail("relaxps-coordinator", a.status(), 2);
  } else if (relaxps::Status r = relaxps::CheckHostResolves(*a); !r.ok()) {
    return relaxps::Fail("relaxps-coordinator", r, 2);
  }
  if (auto src = relaxps::SourceAddressFromFlags(); src.ok()) {
    options.source_address = *src;
  } else {
    return relaxps::Fail("relaxps-coordinator", src.status(), 2);
  }
  options.num_servers = FLAGS_num_servers;
  options.num_workers = FLAGS_num_workers;
  options.start_barrier_timeout_ms = FLAGS_start_barrier_timeout_ms;
  relaxps::StatusOr<relaxps::ConsistencyModel> consistency =
      relaxps::ParseConsistencyModel(FLAGS_consistency);
  if (!consistency.ok()) return relaxps::Fail("relaxps-coordinator", consistency.status(), 2);
  options.consistency = *consistency;
  options.staleness = FLAGS_staleness;
  if (relaxps::Status s = relaxps::CheckRecoveryPolicyName(FLAGS_recovery); !s.ok()) {
    return relaxps::Fail("relaxps-coordinator", s, 2);
  }
  options.recovery = FLAGS_recovery;
  for (const std::string& flag : relaxps::RecoveryOptionFlags()) {
    gflags::CommandLineFlagInfo info;
    CHECK(gflags::GetCommandLineFlagInfo(flag.c_str(), &info))
        << "recovery option --" << flag << " has no coordinator flag";
    if (!info.is_default) options.recovery_options[flag] = info.current_value;
  }
  if (auto resolved = relaxps::ResolveRecoveryOptions(options.recovery, options.recovery_options);
      !resolved.ok()) {
    return relaxps::Fail("relaxps-coordinator", resolved.status(), 2);
  }
  options.replicas = FLAGS_replicas;
  options.probe_timeout_ms = FLAGS_probe_timeout_ms;
  options.takeover_probe_ms = FLAGS_takeover_probe_ms;
  if (FLAGS_move_timeout_ms < 1) {
    return relaxps::Fail("relaxps-coordinator",
                         relaxps::InvalidArgumentError("--move_timeout_ms must be >= 1"), 2);
  }
  options.move_timeout_ms = FLAGS_move_timeout_ms;
  options.max_workers = FLAGS_max_workers;
  if (FLAGS_max_members < 1 || FLAGS_max_tables < 1 || FLAGS_max_control_per_min < 0 ||
      FLAGS_max_control_per_min_per_peer < 0) {
    return relaxps::Fail("relaxps-coordinator",
                         relaxps::InvalidArgumentError(
                             "--max_members and --max_tables must be >= 1, "
                             "--max_control_per_min[_per_peer] >= 0"),
                         2);
  }
  options.max_members = static_cast<size_t>(FLAGS_max_members);
  options.max_tables = FLAGS_max_tables;
  options.max_control_per_min = FLAGS_max_control_per_min;
  options.max_control_per_min_per_peer = FLAGS_max_control_per_min_per_peer;
  options.exit_when_done = FLAGS_exit_when_done;
  auto curve = relaxps::SecurityFromFlags(FLAGS_security, FLAGS_keys_dir, "coordinator");
  if (!curve.ok()) return relaxps::Fail("relaxps-coordinator", curve.status(), 2);
  options.curve = *curve;
  if (relaxps::Status b = relaxps::CheckBindIsSafe(FLAGS_bind, curve->enabled(),
                                                   FLAGS_insecure_bind_public);
      !b.ok()) {
    return relaxps::Fail("relaxps-coordinator", b, 2);
  }
  options.failed_exit_ms = FLAGS_failed_exit_ms;
  if (FLAGS_max_table_mb < 0 || FLAGS_max_message_mb < 1) {
    return relaxps::Fail("relaxps-coordinator",
                         relaxps::InvalidArgumentError(
                             "--max_table_mb must be >= 0 and --max_message_mb >= 1"),
                         2);
  }
  options.max_table_bytes = static_cast<uint64_t>(FLAGS_max_table_mb) << 20;
  options.max_message_bytes = FLAGS_max_message_mb << 20;
  options.sparse_buckets = FLAGS_sparse_buckets;
  options.heartbeat_timeout_ms = FLAGS_heartbeat_timeout_ms;
  options.data_dir = FLAGS_data_dir;
  options.coordination = FLAGS_coordination;
  options.zk_session_timeout_ms = FLAGS_zk_session_timeout_ms;
  relaxps::StatusOr<relaxps::SeedRule> seed_rule = relaxps::ParseSeedRule(FLAGS_seed_rule);
  if (!seed_rule.ok()) return relaxps::Fail("relaxps-coordinator", seed_rule.status(), 2);
  options.seed_rule = *seed_rule;
  relaxps::StatusOr<relaxps::MergeRule> merge_rule = relaxps::ParseMergeRule(FLAGS_merge_rule);
  if (!merge_rule.ok()) return relaxps::Fail("relaxps-coordinator", merge_rule.status(), 2);
  options.merge_rule = *merge_rule;
  options.reseed_timeout_ms = FLAGS_reseed_timeout_ms;
  options.spare_takeover_ms = FLAGS_spare_takeover_ms;
  options.checkpoint_every_clocks = FLAGS_checkpoint_every_clocks;
  options.checkpoint_every_s = FLAGS_checkpoint_every_s;
  options.events_file = relaxps::EventsFileFlag();
  relaxps::metrics::Registry registry;
  if (relaxps::MetricsEnabled()) options.metrics = &registry;
  // Reset before the coordinator is destroyed (scrapes read its loop).
  auto exporter = relaxps::StartMetricsFromFlags("relaxps-coordinator", FLAGS_bind, &registry);
  if (!exporter.ok()) {
    return relaxps::Fail("relaxps-coordinator", exporter.status(),
                         exporter.status().code() == relaxps::StatusCode::kInvalidArgument ? 2 : 1);
  }
  auto coordinator = relaxps::Coordinator::Start(options);
  if (!coordinator.ok()) {
    exporter->reset();
    return relaxps::Fail("relaxps-coordinator", coordinator.status(),
                         coordinator.status().code() == relaxps::StatusCode::kInvalidArgument ? 2 : 1);
  }
  g_coordinator = coordinator->get();
  relaxps::StopOnSignals(&Stop);
  // endpoint() is the advertised one (CoordinatorOptions::advertise).
  const std::string& advertised = (*coordinator)->endpoint();
  relaxps::Status s = relaxps::WriteFileAtomically(FLAGS_endpoint_file, advertised);
  if (!s.ok()) {
    exporter->reset();
    return relaxps::Fail("relaxps-coordinator", s, s.code() == relaxps::StatusCode::kInvalidArgument ? 2 : 1);
  }
  std::printf("relaxps-coordinator listening on %s\n", advertised.c_str());
  std::fflush(stdout);
  (*coordinator)->Run();
  exporter->reset();
  g_coordinator = nullptr;
  // The verdict, its reason and the exit status (docs/events.md, "Exit
  // codes"), also in the job_end event.
  const relaxps::JobEnd end = (*coordinator)->job_end();
  if (end.exit_code != relaxps::kExitDone) {
    std::fprintf(stderr, "relaxps-coordinator: job %s: %s\n", end.verdict.c_str(),
                 end.reason.c_str());
  }
  return end.exit_code;
}
