// relaxps-ctl: command-line client for people and scripts.
//
//   relaxps-ctl --coordinator=EP status        cluster, job config, shard map, clocks
//   relaxps-ctl --coordinator=EP tables        tables and their options
//   relaxps-ctl --coordinator=EP pull TABLE FILE   dense table -> raw float32 LE file
//   relaxps-ctl --coordinator=EP stats         per-server request counters
//   relaxps-ctl --coordinator=EP checkpoint    take a coordinated checkpoint now
//   relaxps-ctl --coordinator=EP checkpoints   complete checkpoints + what servers hold
//   relaxps-ctl keygen DIR [--servers=N --workers=M]   CurveZMQ keys of a job
//   relaxps-ctl policies [--json]              the registered recovery policies, what each
//                                              does and needs (no coordinator needed)
//   relaxps-ctl --coordinator=EP shutdown      end the job in order: workers finish their
//                                              step, servers flush, everyone exits 0
//   relaxps-ctl --coordinator=EP events [--follow]   the coordinator's recent structured
//                                              events (JSON Lines, docs/events.md); --follow
//                                              keeps printing new ones until the job ends
//
// EP: any coordinator of the job, or a comma-separated list of them: a
// standby (or deposed) coordinator answers with the leader's endpoint, and
// every command follows it (common/coordinator_peers.h).
//
// --json: every command prints one JSON document on stdout instead of text
// (protobuf messages in the proto3 JSON mapping: proto field names, 64-bit
// integers as strings); errors still go to stderr with a non-zero exit.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include <gflags/gflags.h>

#include "apps/internal/json_out.h"
#include "apps/internal/main_util.h"
#include "client/client.h"
#include "common/coordinator_peers.h"
#include "common/member_token.h"
#include "common/rpc_client.h"
#include "common/shard_map.h"
#include "relaxps/recovery_policy.h"

DEFINE_string(coordinator, "",
              "Coordinator endpoint, or a comma-separated list of the job's coordinators "
              "(required); a standby redirects to the leader, which is followed");
DEFINE_int32(timeout_ms, 5000, "Deadline of each request");
DEFINE_int32(checkpoint_timeout_ms, 180000, "Deadline of `checkpoint`");
DEFINE_string(security, "plain", "plain or curve (then --keys_dir: the job's keys, key 'ctl')");
DEFINE_string(keys_dir, "", "--security=curve: the job's keys (relaxps-ctl keygen DIR)");
DEFINE_string(key, "ctl",
              "--security=curve: the name of this tool's key in --keys_dir (role operator for "
              "checkpoint and shutdown, operator or observer for the rest)");
DEFINE_int32(servers, 1, "keygen: server keys to write (server-0 ..)");
DEFINE_int32(workers, 1, "keygen: worker keys to write (worker-0 ..)");
DEFINE_string(principals, "",
              "keygen: more keys, comma-separated NAME:ROLE (ROLE operator or observer), e.g. "
              "alice:operator,grafana:observer");
DEFINE_bool(follow, false,
            "events: keep printing new events as they come; exits 0 after the job_end event, "
            "1 if the coordinator goes away before it");
DEFINE_bool(json, false,
            "Print one JSON document on stdout (for scripts): protobuf messages in the proto3 "
            "JSON mapping, 64-bit integers as strings");

namespace relaxps {
namespace {

constexpr const char* kName = "relaxps-ctl";

// --json: prints `json` and a newline; returns `code`.
int PrintJson(const std::string& json, int code = 0) {
  std::printf("%s\n", json.c_str());
  return code;
}

// True if some range or bucket of the map is held by a chain of replicas.
bool HasChains(const wire::ShardMap& map) {
  for (const wire::TableShards& t : map.tables()) {
    for (const wire::DenseRange& r : t.ranges()) {
      if (r.chain_size() > 0) return true;
    }
    for (const wire::SparseBucket& b : t.buckets()) {
      if (b.chain_size() > 0) return true;
    }
  }
  return false;
}

// `policies`: the registry's table, or its JSON array with --json.
int Policies() {
  std::printf("%s", DescribeRecoveryPolicies(FLAGS_json).c_str());
  return 0;
}

StatusOr<wire::StatusReply> FetchStatus(CoordinatorPeers* coordinator) {
  Message m;
  m.header.set_type(wire::GET_STATUS);
  ASSIGN_OR_RETURN(Message reply, coordinator->CallFollowing(m.header, FLAGS_timeout_ms));
  return reply.header.status_reply();
}

int Status_(CoordinatorPeers* coordinator) {
  auto st = FetchStatus(coordinator);
  if (!st.ok()) return Fail(kName, st.status(), 1);
  if (FLAGS_json) return PrintJson(ProtoToJson(*st));
  const wire::JobConfig& j = st->job();
  // The bound the model enforces (async ignores --staleness).
  StatusOr<ConsistencyModel> model = ParseConsistencyModel(j.consistency());
  const std::string staleness =
      model.ok() ? StalenessBoundText({*model, j.staleness()}) : std::to_string(j.staleness());
  std::printf("job: consistency=%s staleness=%s recovery=%s servers=%d workers_expected=%d "
              "uptime_s=%.1f\n",
              j.consistency().c_str(), staleness.c_str(), j.recovery().c_str(), j.num_servers(),
              j.num_workers(), st->uptime_s());
  if (!j.recovery_options().empty()) {
    std::string options;
    for (const auto& [flag, value] : std::map<std::string, std::string>(
             j.recovery_options().begin(), j.recovery_options().end())) {
      options += " " + flag + "=" + value;
    }
    std::printf("recovery_options:%s\n", options.c_str());
  }
  if (!st->job_error().empty()) std::printf("job_error: %s\n", st->job_error().c_str());
  std::printf("shard_map_version: %llu\n",
              static_cast<unsigned long long>(st->shard_map().version()));
  if (HasChains(st->shard_map())) {
    std::printf("chain: replicas=%d epoch=%llu\n", j.replicas(),
                static_cast<unsigned long long>(st->shard_map().epoch()));
  }
  for (const wire::ServerState& s : st->servers()) {
    std::printf("server %d %s %s pid=%d last_heartbeat_ms_ago=%lld\n", s.info().id(),
                s.info().endpoint().c_str(), s.info().alive() ? "alive" : "DEAD", s.pid(),
                static_cast<long long>(s.last_heartbeat_ms_ago()));
  }
  for (const wire::WorkerState& w : st->workers()) {
    std::printf("worker %d %s clock=%lld last_heartbeat_ms_ago=%lld\n", w.id(),
                w.alive() ? "alive" : "dead", static_cast<long long>(w.clock()),
                static_cast<long long>(w.last_heartbeat_ms_ago()));
  }
  if (st->has_latest_checkpoint()) {
    const wire::CheckpointRecord& c = st->latest_checkpoint();
    std::printf("latest_checkpoint: clock=%lld servers=%d seconds=%.3f\n",
                static_cast<long long>(c.clock()), c.shards_size(), c.seconds());
    for (const wire::ShardCheckpoint& sc : c.shards()) {
      std::printf("  server %d %s\n", sc.server(), sc.dir().c_str());
    }
  } else {
    std::printf("latest_checkpoint: none\n");
  }
  if (st->checkpoints_failed() > 0) {
    std::printf("checkpoints_failed: %llu\n",
                static_cast<unsigned long long>(st->checkpoints_failed()));
  }
  auto describe = [](const google::protobuf::RepeatedField<int32_t>& members) {
    std::string chain;
    for (int c : members) chain += (chain.empty() ? " chain " : " -> ") + std::to_string(c);
    return chain;
  };
  for (const wire::TableShards& t : st->shard_map().tables()) {
    for (const wire::DenseRange& r : t.ranges()) {
      std::printf("shard %s [%llu, %llu) -> server %d%s\n", t.table().name().c_str(),
                  static_cast<unsigned long long>(r.begin()),
                  static_cast<unsigned long long>(r.end()), r.server(),
                  describe(r.chain()).c_str());
    }
    for (int b = 0; b < t.buckets_size(); ++b) {
      std::printf("bucket %s #%d of %d -> server %d%s\n", t.table().name().c_str(), b,
                  t.buckets_size(), t.buckets(b).server(), describe(t.buckets(b).chain()).c_str());
    }
  }
  return 0;
}

int Tables(CoordinatorPeers* coordinator) {
  auto st = FetchStatus(coordinator);
  if (!st.ok()) return Fail(kName, st.status(), 1);
  if (FLAGS_json) {
    std::vector<std::string> tables;
    for (const wire::TableShards& t : st->shard_map().tables()) tables.push_back(ProtoToJson(t));
    return PrintJson(JsonObject({{"tables", JsonArray(tables)}}));
  }
  for (const wire::TableShards& t : st->shard_map().tables()) {
    const wire::TableProto& p = t.table();
    std::printf("%s %s size=%llu row_width=%u optimizer=%s lr=%g shards=%d\n", p.name().c_str(),
                p.type() == 0 ? "dense" : "sparse", static_cast<unsigned long long>(p.size()),
                p.row_width(), p.optimizer().name().c_str(), p.optimizer().lr(),
                p.type() == 0 ? t.ranges_size()
                : t.buckets_size() > 0 ? t.buckets_size()
                                       : st->shard_map().servers_size());
  }
  return 0;
}

int Stats(RpcClient* rpc, CoordinatorPeers* coordinator) {
  auto st = FetchStatus(coordinator);
  if (!st.ok()) return Fail(kName, st.status(), 1);
  std::vector<std::string> json;
  // Push parts each worker incarnation's updates left in the servers' states.
  std::map<std::pair<int, uint64_t>, uint64_t> applied;
  for (const wire::ServerState& s : st->servers()) {
    if (!s.info().alive()) continue;
    Message m;
    m.header.set_type(wire::SERVER_STATS);
    auto reply = rpc->CallSync(rpc->Connect(s.info().endpoint(), s.info().curve_public_key()), std::move(m), FLAGS_timeout_ms);
    const std::string id = std::to_string(s.info().id());
    if (!reply.ok()) {
      if (FLAGS_json) {
        json.push_back(JsonObject({{"id", id}, {"error", JsonQuote(reply.status().ToString())}}));
        continue;
      }
      std::printf("server %d: %s\n", s.info().id(), reply.status().ToString().c_str());
      continue;
    }
    const wire::ServerStats& x = reply->header.server_stats();
    for (const wire::AppliedParts& a : x.applied_parts()) {
      applied[{a.worker(), a.incarnation()}] += a.parts();
    }
    if (FLAGS_json) {
      json.push_back(JsonObject({{"id", id}, {"stats", ProtoToJson(x)}}));
      continue;
    }
    std::printf("server %d requests=%llu rejected=%llu nonfinite_rejected=%llu bytes_in=%llu "
                "bytes_out=%llu updates_applied=%llu durable=%s",
                s.info().id(), (unsigned long long)x.requests(), (unsigned long long)x.rejected(),
                (unsigned long long)x.nonfinite_rejected(), (unsigned long long)x.bytes_in(),
                (unsigned long long)x.bytes_out(), (unsigned long long)x.updates_applied(),
                x.durable() ? "true" : "false");
    if (!x.durable()) {
      // "durable=false since <UTC time> disk_errors=N last=<write: status>"
      const std::time_t since = static_cast<std::time_t>(x.not_durable_since_unix_ms() / 1000);
      char when[32] = "?";
      std::tm tm{};
      if (gmtime_r(&since, &tm) != nullptr) std::strftime(when, sizeof when, "%FT%TZ", &tm);
      std::printf(" since %s disk_errors=%llu last_disk_error=\"%s\"", when,
                  (unsigned long long)x.disk_errors(), x.last_disk_error().c_str());
    }
    std::printf("\n");
  }
  // Per worker: acknowledged (its last heartbeat) against reflected (the
  // servers now); the difference is what the servers lost.
  std::vector<std::string> workers;
  for (const wire::WorkerState& w : st->workers()) {
    const uint64_t parts = applied[{w.id(), w.incarnation()}];
    const uint64_t absent = w.acked_updates() > parts ? w.acked_updates() - parts : 0;
    if (FLAGS_json) {
      workers.push_back(JsonObject({{"id", std::to_string(w.id())},
                                    {"incarnation", JsonQuote(std::to_string(w.incarnation()))},
                                    {"alive", w.alive() ? "true" : "false"},
                                    {"acked_updates", std::to_string(w.acked_updates())},
                                    {"applied_parts", std::to_string(parts)},
                                    {"acked_but_absent", std::to_string(absent)}}));
      continue;
    }
    std::printf("worker %d incarnation=%llu acked_updates=%llu applied_parts=%llu "
                "acked_but_absent=%llu%s\n",
                w.id(), (unsigned long long)w.incarnation(),
                (unsigned long long)w.acked_updates(), (unsigned long long)parts,
                (unsigned long long)absent, w.alive() ? "" : " (dead)");
  }
  if (FLAGS_json) {
    return PrintJson(JsonObject({{"servers", JsonArray(json)}, {"workers", JsonArray(workers)}}));
  }
  return 0;
}

void PrintShard(const wire::ShardCheckpoint& sc) {
  std::printf("  server %d clock=%lld bytes=%llu seconds=%.3f dir=%s\n", sc.server(),
              static_cast<long long>(sc.clock()), static_cast<unsigned long long>(sc.bytes()),
              sc.seconds(), sc.dir().c_str());
}

// Registers an operator session with the coordinator and returns its member
// token, which SHUTDOWN and TRIGGER_CHECKPOINT must carry.
StatusOr<std::string> OperatorSession(CoordinatorPeers* coordinator) {
  Message reg;
  reg.header.set_type(wire::REGISTER);
  wire::RegisterRequest* r = reg.header.mutable_register_request();
  r->set_role("operator");
  r->set_requested_id(-1);
  r->set_pid(getpid());
  r->set_protocol_version(kProtocolVersion);
  StatusOr<Message> reply = coordinator->CallFollowing(reg.header, FLAGS_timeout_ms);
  if (!reply.ok()) return reply.status().WithPrefix("opening an operator session");
  return reply->header.register_reply().member_token();
}

int Checkpoint(CoordinatorPeers* coordinator) {
  StatusOr<std::string> token = OperatorSession(coordinator);
  if (!token.ok()) return Fail(kName, token.status(), 1);
  Message m;
  m.header.set_type(wire::TRIGGER_CHECKPOINT);
  SetMemberToken(*token, &m.header);
  auto reply = coordinator->CallFollowing(m.header, FLAGS_checkpoint_timeout_ms);
  if (!reply.ok()) return Fail(kName, reply.status(), 1);
  const wire::CheckpointRecord& c = reply->header.checkpoint_record();
  if (FLAGS_json) return PrintJson(ProtoToJson(c));
  std::printf("checkpoint clock=%lld complete on %d server(s) in %.3f s\n",
              static_cast<long long>(c.clock()), c.shards_size(), c.seconds());
  for (const wire::ShardCheckpoint& sc : c.shards()) PrintShard(sc);
  return 0;
}

int Checkpoints(RpcClient* rpc, CoordinatorPeers* coordinator) {
  auto st = FetchStatus(coordinator);
  if (!st.ok()) return Fail(kName, st.status(), 1);
  std::vector<std::string> complete;
  std::vector<std::string> held;
  for (const wire::CheckpointRecord& c : st->checkpoints()) complete.push_back(ProtoToJson(c));
  if (!FLAGS_json) {
    std::printf("complete checkpoints (coordinator record, oldest first): %d\n",
                st->checkpoints_size());
    for (const wire::CheckpointRecord& c : st->checkpoints()) {
      std::printf("checkpoint clock=%lld servers=%d seconds=%.3f%s\n",
                  static_cast<long long>(c.clock()), c.shards_size(), c.seconds(),
                  st->has_latest_checkpoint() && c.clock() == st->latest_checkpoint().clock() &&
                          c.unix_s() == st->latest_checkpoint().unix_s()
                      ? " (latest)"
                      : "");
      for (const wire::ShardCheckpoint& sc : c.shards()) PrintShard(sc);
    }
  }
  int errors = 0;
  for (const wire::ServerState& s : st->servers()) {
    const std::string id = std::to_string(s.info().id());
    if (!s.info().alive()) {
      if (FLAGS_json) {
        held.push_back(JsonObject({{"id", id}, {"error", JsonQuote("dead, not asked")}}));
        continue;
      }
      std::printf("server %d: DEAD, not asked\n", s.info().id());
      continue;
    }
    Message m;
    m.header.set_type(wire::LIST_CHECKPOINTS);
    auto reply = rpc->CallSync(rpc->Connect(s.info().endpoint(), s.info().curve_public_key()), std::move(m), FLAGS_timeout_ms);
    if (!reply.ok()) {
      ++errors;
      if (FLAGS_json) {
        held.push_back(JsonObject({{"id", id}, {"error", JsonQuote(reply.status().ToString())}}));
        continue;
      }
      std::printf("server %d: %s\n", s.info().id(), reply.status().ToString().c_str());
      continue;
    }
    const wire::CheckpointList& list = reply->header.checkpoint_list();
    if (FLAGS_json) {
      held.push_back(JsonObject({{"id", id}, {"held", ProtoToJson(list)}}));
      continue;
    }
    std::printf("server %d holds %d valid checkpoint(s):\n", s.info().id(),
                list.checkpoints_size());
    for (const wire::ShardCheckpoint& sc : list.checkpoints()) PrintShard(sc);
  }
  if (FLAGS_json) {
    return PrintJson(JsonObject({{"complete", JsonArray(complete)}, {"servers", JsonArray(held)}}),
                     errors == 0 ? 0 : 1);
  }
  return errors == 0 ? 0 : 1;
}

CurveOptions g_curve;  // Set in main() from --security / --keys_dir.

int Keygen(const std::string& dir) {
  if (FLAGS_servers < 0 || FLAGS_workers < 0) {
    return Fail(kName, InvalidArgumentError("--servers and --workers must be >= 0"), 2);
  }
  std::vector<std::string> names = JobPrincipals(FLAGS_servers, FLAGS_workers);
  std::stringstream extra(FLAGS_principals);
  for (std::string p; std::getline(extra, p, ',');) {
    if (!p.empty()) names.push_back(p);
  }
  Status s = GenerateCurveKeys(dir, names);
  if (!s.ok()) return Fail(kName, s, 1);
  if (FLAGS_json) {
    return PrintJson(JsonObject({{"dir", JsonQuote(dir)},
                                 {"servers", std::to_string(FLAGS_servers)},
                                 {"workers", std::to_string(FLAGS_workers)}}));
  }
  std::printf("wrote CurveZMQ keys of %d server(s) and %d worker(s) to %s (*.key secret, "
              "*.pub public)\n",
              FLAGS_servers, FLAGS_workers, dir.c_str());
  return 0;
}

int Pull(const std::string& table, const std::string& path) {
  ClientOptions co;
  co.curve = g_curve;
  co.coordinator = FLAGS_coordinator;
  co.role = "observer";
  co.request_timeout_ms = FLAGS_timeout_ms;
  auto client = Client::Connect(co);
  if (!client.ok()) return Fail(kName, client.status(), 1);
  auto info = (*client)->GetTable(table);
  if (!info.ok()) return Fail(kName, info.status(), 1);
  if (info->options.type != TableType::kDense) {
    return Fail(kName, InvalidArgumentError("pull supports dense tables only"), 2);
  }
  FloatBuffer out(info->options.size);
  Status s = (*client)->Pull(table, 0, out).get();
  if (!s.ok()) return Fail(kName, s, 1);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.bytes()));
  if (!f.flush()) return Fail(kName, IOError("cannot write " + path), 1);
  double sum = 0, sq = 0;
  for (float v : out) {
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  if (FLAGS_json) {
    char stats[64];
    std::snprintf(stats, sizeof(stats), "%.9g,\"l2\":%.9g", sum / out.size(), std::sqrt(sq));
    return PrintJson("{\"table\":" + JsonQuote(table) + ",\"floats\":" +
                     std::to_string(out.size()) + ",\"bytes\":" + std::to_string(out.bytes()) +
                     ",\"path\":" + JsonQuote(path) + ",\"mean\":" + stats + "}");
  }
  std::printf("pulled %s: %zu floats (%zu bytes) to %s; mean=%.6g l2=%.6g\n", table.c_str(),
              out.size(), out.bytes(), path.c_str(), sum / out.size(), std::sqrt(sq));
  return 0;
}

// `events [--follow]`: the coordinator's ring of recent events, as JSON
// Lines on stdout (the same with or without --json).
int Events(CoordinatorPeers* coordinator) {
  constexpr int kPollMs = 10000;  // How long one GET_EVENTS may be held.
  constexpr uint32_t kBatch = 1000;
  uint64_t after = 0;
  for (;;) {
    Message m;
    m.header.set_type(wire::GET_EVENTS);
    wire::EventsRequest* r = m.header.mutable_events_request();
    r->set_after_seq(after);
    r->set_wait_ms(FLAGS_follow ? kPollMs : 0);
    r->set_max_events(kBatch);
    StatusOr<Message> reply =
        coordinator->CallFollowing(m.header, FLAGS_timeout_ms + (FLAGS_follow ? kPollMs : 0));
    if (!reply.ok()) {
      return Fail(kName,
                  reply.status().WithPrefix(FLAGS_follow ? "the coordinator went away before "
                                                           "the job ended"
                                                         : "reading events"),
                  1);
    }
    const wire::EventsReply& er = reply->header.events_reply();
    if (er.missed() > 0) {
      std::fprintf(stderr, "relaxps-ctl: %llu earlier event(s) missed: the coordinator's ring "
                   "no longer held them\n", static_cast<unsigned long long>(er.missed()));
    }
    bool ended = false;
    for (const std::string& line : er.lines()) {
      std::printf("%s\n", line.c_str());
      ended = ended || line.find("\"kind\":\"job_end\"") != std::string::npos;
    }
    std::fflush(stdout);
    after = er.last_seq();
    if (ended) return 0;
    if (!FLAGS_follow && static_cast<uint32_t>(er.lines_size()) < kBatch) return 0;
  }
}

}  // namespace

// add-server: without an id, how to add a server (start one with --join:
// the coordinator then moves ranges to it); with the id of a server that
// joined, plans and starts the range moves to it (docs/elastic.md).
// Server id `arg` of command `cmd` into *id; false (after the usage error)
// if it is none.
bool ParseServerId(const char* cmd, const char* arg, long* id) {
  char* end = nullptr;
  *id = std::strtol(arg, &end, 10);
  if (end != arg && *end == '\0' && *id >= 0 && *id <= 1000000) return true;
  Fail(kName, InvalidArgumentError(std::string(cmd) + ": '" + arg + "' is not a server id"), 2);
  return false;
}

// ADD_SERVER or DRAIN_SERVER for server `id` as an operator: prints the
// moves planned (`what` says where they go) and returns the exit status.
int RunMovePlan(CoordinatorPeers* coordinator, wire::MsgType type, long id,
                const char* what) {
  StatusOr<std::string> token = OperatorSession(coordinator);
  if (!token.ok()) return Fail(kName, token.status(), 1);
  Message m;
  m.header.set_type(type);
  if (type == wire::ADD_SERVER) {
    m.header.mutable_range_move()->set_destination(static_cast<int>(id));
  } else {
    m.header.mutable_range_move()->set_source(static_cast<int>(id));
  }
  SetMemberToken(*token, &m.header);
  StatusOr<Message> reply = coordinator->CallFollowing(m.header, FLAGS_timeout_ms);
  if (!reply.ok()) return Fail(kName, reply.status(), 1);
  const wire::RangePlan& plan = reply->header.range_plan();
  if (FLAGS_json) {
    std::vector<std::string> moves;
    for (const wire::RangeMove& mv : plan.moves()) moves.push_back(ProtoToJson(mv));
    return PrintJson(JsonObject({{"server", std::to_string(id)}, {"moves", JsonArray(moves)}}));
  }
  if (plan.moves_size() == 0) {
    std::printf("server %ld: no range moves %s (nothing to move, or it is balanced)\n", id, what);
    return 0;
  }
  std::printf("server %ld: %d range move(s) %s started, one at a time (`relaxps-ctl events "
              "--follow` shows range_move_done)\n",
              id, plan.moves_size(), what);
  for (const wire::RangeMove& mv : plan.moves()) {
    std::printf("  table '%s' keys [%llu, %llu) from server %d to server %d\n", mv.table().c_str(),
                static_cast<unsigned long long>(mv.begin()),
                static_cast<unsigned long long>(mv.end()), mv.source(), mv.destination());
  }
  return 0;
}

// drain-server ID (operator): moves every range off server ID; it leaves
// once it holds nothing (docs/elastic.md).
int DrainServer(CoordinatorPeers* coordinator, const char* id_arg) {
  long id = 0;
  if (!ParseServerId("drain-server", id_arg, &id)) return 2;
  return RunMovePlan(coordinator, wire::DRAIN_SERVER, id,
                     "off it (it leaves once it holds nothing)");
}

int AddServer(CoordinatorPeers* coordinator, const char* id_arg) {
  if (id_arg == nullptr) {
    if (FLAGS_json) {
      return PrintJson(JsonObject(
          {{"start", JsonQuote("relaxps-server --join --coordinator=" + FLAGS_coordinator +
                               " <the job's server flags>")}}));
    }
    std::printf(
        "To add a server to this running job, start it with --join (and no --server_id):\n"
        "  relaxps-server --join --coordinator=%s <the job's server flags>\n"
        "It registers with the next free id and the coordinator moves part of every dense\n"
        "table to it while training goes on (events range_move_started / _done / _failed).\n"
        "To run the moves again to a server that joined (after a failed move, or for a table\n"
        "created since): relaxps-ctl add-server ID\n",
        FLAGS_coordinator.c_str());
    return 0;
  }
  long id = 0;
  if (!ParseServerId("add-server", id_arg, &id)) return 2;
  return RunMovePlan(coordinator, wire::ADD_SERVER, id, "to it");
}

int Shutdown(CoordinatorPeers* coordinator) {
  StatusOr<std::string> token = OperatorSession(coordinator);
  if (!token.ok()) return Fail(kName, token.status(), 1);
  Message m;
  m.header.set_type(wire::SHUTDOWN);
  SetMemberToken(*token, &m.header);
  StatusOr<Message> reply = coordinator->CallFollowing(m.header, FLAGS_timeout_ms);
  if (!reply.ok()) return Fail(kName, reply.status(), 1);
  if (FLAGS_json) return PrintJson(JsonObject({{"shutdown", JsonQuote("requested")}}));
  std::printf("shutdown requested: workers finish their step and leave, then servers flush "
              "and exit, then the coordinator\n");
  return 0;
}

}  // namespace relaxps

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "relaxps-ctl --coordinator=EP [--json] <status | tables | stats | checkpoint | checkpoints | "
      "shutdown | events [--follow] | pull TABLE FILE | add-server [ID] | drain-server ID> | relaxps-ctl keygen DIR [--servers=N --workers=M] | "
      "relaxps-ctl policies\n  --json: "
      "one JSON document on stdout. Flags may also come from a file: --flagfile=FILE (one "
      "--flag=value per line, # comments).");
  if (relaxps::Status s = relaxps::CheckCommandLine(argc, argv, true); !s.ok()) {
    return relaxps::Fail("relaxps-ctl", s, 2);
  }
  relaxps::ParseFlagsWithHelp(&argc, &argv, relaxps::CtlFlagGroups());
  relaxps::InitLogging(argv[0]);
  relaxps::ScaleTimeoutFlags(relaxps::SanitizerTimeScale(), {"timeout_ms", "checkpoint_timeout_ms"});
  using relaxps::Fail;
  using relaxps::InvalidArgumentError;
  if (argc == 3 && std::string(argv[1]) == "keygen") return relaxps::Keygen(argv[2]);
  if (argc == 2 && std::string(argv[1]) == "policies") return relaxps::Policies();
  if (FLAGS_coordinator.empty()) return Fail(relaxps::kName, InvalidArgumentError("--coordinator is required"), 2);
  auto curve = relaxps::SecurityFromFlags(FLAGS_security, FLAGS_keys_dir, FLAGS_key);
  if (!curve.ok()) return Fail(relaxps::kName, curve.status(), 2);
  relaxps::g_curve = *curve;
  if (argc < 2) return Fail(relaxps::kName, InvalidArgumentError("missing command: status, tables, stats, checkpoint, checkpoints, shutdown, events, pull, add-server or drain-server"), 2);
  const std::string cmd = argv[1];
  if (cmd == "pull") {
    if (argc != 4) return Fail(relaxps::kName, InvalidArgumentError("usage: pull TABLE FILE"), 2);
    return relaxps::Pull(argv[2], argv[3]);
  }
  relaxps::RpcClientOptions rpc_options;
  if (relaxps::Status s = rpc_options.UseCurve(relaxps::g_curve); !s.ok()) {
    return Fail(relaxps::kName, s, 2);
  }
  relaxps::RpcClient rpc(rpc_options);
  // Every command follows a standby's redirect to the leader (and may be
  // given several coordinators): common/coordinator_peers.h.
  relaxps::CoordinatorPeers coordinator;
  if (relaxps::Status s = coordinator.Connect(&rpc, FLAGS_coordinator); !s.ok()) {
    return Fail(relaxps::kName, s, 2);
  }
  if (cmd == "status") return relaxps::Status_(&coordinator);
  if (cmd == "tables") return relaxps::Tables(&coordinator);
  if (cmd == "stats") return relaxps::Stats(&rpc, &coordinator);
  if (cmd == "checkpoint") return relaxps::Checkpoint(&coordinator);
  if (cmd == "checkpoints") return relaxps::Checkpoints(&rpc, &coordinator);
  if (cmd == "shutdown") return relaxps::Shutdown(&coordinator);
  if (cmd == "events") return relaxps::Events(&coordinator);
  if (cmd == "add-server") {
    if (argc > 3) return Fail(relaxps::kName, InvalidArgumentError("usage: add-server [ID]"), 2);
    return relaxps::AddServer(&coordinator, argc == 3 ? argv[2] : nullptr);
  }
  if (cmd == "drain-server") {
    if (argc != 3) return Fail(relaxps::kName, InvalidArgumentError("usage: drain-server ID"), 2);
    return relaxps::DrainServer(&coordinator, argv[2]);
  }
  return Fail(relaxps::kName, InvalidArgumentError("unknown command '" + cmd + "'"), 2);
}
