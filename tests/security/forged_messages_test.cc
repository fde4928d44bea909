// Well-formed but forged control messages (issue 13), without --security=curve:
// every one is refused and the job goes on.
//  * Issue 40: every kind from a stranger (no member token or a wrong one)
//    is refused and changes nothing, and an attacked job ends as an
//    unattacked one; damaged header bytes are never a valid kind; a
//    re-registration revokes the old token.
//  * Server-to-server messages (forwarded updates, CHAIN_COMPLETE,
//    CHAIN_SNAPSHOT) from a stranger claiming to be a server are refused and
//    a chain job's replicated model is the unattacked one; a restarted
//    server's old token is refused.
//  * WORKER_SET / INSTALL_MAP / CHECKPOINT sent straight to a server by
//    someone other than the coordinator: PermissionDenied, nothing changes.
//  * A server REGISTER for the id of a live server: refused while the old
//    instance answers a probe; accepted once it does not.
//  * A REGISTER of another protocol version: refused naming both versions.
//  * A flood of worker registrations: bounded by max_workers.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/member_token.h"
#include "common/rpc_client.h"
#include "coordinator/coordinator.h"
#include "server/server.h"
#include "tests/coordinator/running_coordinator.h"
#include "tests/security/attack_util.h"
#include "tests/server/in_process_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using test::RunningCoordinator;

wire::ShardMap GetMap(RpcClient* rpc, int coordinator) {
  Message m;
  m.header.set_type(wire::GET_SHARD_MAP);
  auto reply = rpc->CallSync(coordinator, std::move(m), 5000);
  CHECK(reply.ok()) << reply.status();
  return reply->header.shard_map();
}

Message Register(const std::string& role, int requested_id, const std::string& endpoint, int pid,
                 int version = kProtocolVersion) {
  Message reg;
  reg.header.set_type(wire::REGISTER);
  wire::RegisterRequest* r = reg.header.mutable_register_request();
  r->set_role(role);
  r->set_requested_id(requested_id);
  r->set_endpoint(endpoint);
  r->set_pid(pid);
  r->set_protocol_version(version);
  return reg;
}

std::unique_ptr<Client> ConnectWorker(const std::string& coordinator) {
  ClientOptions o;
  o.coordinator = coordinator;
  o.request_timeout_ms = static_cast<int>(test::Scaled(test::Millis(10000)).count());
  auto c = Client::Connect(o);
  CHECK(c.ok()) << c.status();
  return std::move(c).value();
}

TEST(ForgedMessagesTest, ControlMessagesFromAnyoneButTheCoordinatorAreRefused) {
  InProcessCluster cluster(1, ConsistencyModel::kBsp, 0);
  auto worker = ConnectWorker(cluster.coordinator());
  ASSERT_OK(worker->CreateTable(test::SgdDenseTable("w", 64, 1.0f)));

  RpcClient rpc;
  const wire::ShardMap map = GetMap(&rpc, rpc.Connect(cluster.coordinator()));
  const int server = rpc.Connect(map.servers(0).endpoint());

  // The attack of the issue: a live set with only worker 424242 at version
  // 2^62 (it made both BSP workers exit).
  Message worker_set;
  worker_set.header.set_type(wire::WORKER_SET);
  worker_set.header.mutable_live_workers()->add_ids(424242);
  worker_set.header.mutable_live_workers()->add_clocks(0);
  worker_set.header.mutable_live_workers()->set_version(uint64_t{1} << 62);
  StatusOr<Message> r = rpc.CallSync(server, std::move(worker_set), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();

  Message install;
  install.header.set_type(wire::INSTALL_MAP);
  wire::ShardMap forged = map;
  forged.set_version(map.version() + 1);
  forged.mutable_tables()->Clear();
  *install.header.mutable_shard_map() = forged;
  r = rpc.CallSync(server, std::move(install), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();

  Message checkpoint;
  checkpoint.header.set_type(wire::CHECKPOINT);
  checkpoint.header.mutable_checkpoint_request()->set_clock(1);
  r = rpc.CallSync(server, std::move(checkpoint), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();

  // The BSP job goes on: the real worker's round closes (it would wait for
  // worker 424242 if the forged set had been applied).
  FloatBuffer grads(64), out(64);
  for (auto& g : grads) g = 1.0f;
  for (int clock = 0; clock < 3; ++clock) {
    ASSERT_OK(worker->PushPull("w", 0, grads, out).get());
    ASSERT_OK(worker->Clock());
  }
  for (float v : out) EXPECT_NE(v, 0.0f);
}

TEST(ForgedMessagesTest, ServerRegisterForALiveIdIsRefusedUntilTheOldOneIsSilent) {
  InProcessCluster cluster(1);
  RpcClient rpc;
  const int coordinator = rpc.Connect(cluster.coordinator());
  const std::string endpoint = GetMap(&rpc, coordinator).servers(0).endpoint();

  // The attack of the issue: role server, id 0, a dead endpoint.
  StatusOr<Message> r =
      rpc.CallSync(coordinator, Register("server", 0, "tcp://127.0.0.1:9", 4242), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  EXPECT_NE(r.status().message().find("answered a probe"), std::string::npos) << r.status();
  wire::ShardMap after = GetMap(&rpc, coordinator);
  EXPECT_EQ(after.servers(0).endpoint(), endpoint);
  EXPECT_TRUE(after.servers(0).alive());
}

TEST(ForgedMessagesTest, ServerWhoseOldInstanceIsSilentTakesItsIdBack) {
  CoordinatorOptions co;
  co.num_servers = 1;
  co.heartbeat_timeout_ms = 60000;  // Never declared dead by heartbeats here.
  RunningCoordinator coordinator(co);
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  // A "server" nobody listens for: it can never answer the probe.
  ASSERT_OK(rpc.CallSync(peer, Register("server", -1, "tcp://127.0.0.1:9", 1111), 5000));
  const auto start = std::chrono::steady_clock::now();
  StatusOr<Message> r =
      rpc.CallSync(peer, Register("server", 0, "tcp://127.0.0.1:11", 2222), 5000);
  ASSERT_OK(r);
  EXPECT_EQ(r->header.register_reply().id(), 0);
  EXPECT_FALSE(r->header.register_reply().coordinator_identity().empty());
  // It waited for the probe (takeover_probe_ms, 500 ms).
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(450));
  EXPECT_EQ(GetMap(&rpc, peer).servers(0).endpoint(), "tcp://127.0.0.1:11");
}

TEST(ForgedMessagesTest, ProtocolVersionMismatchIsRefusedNamingBothVersions) {
  CoordinatorOptions co;
  RunningCoordinator coordinator(co);
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  StatusOr<Message> r = rpc.CallSync(peer, Register("worker", -1, "", 1, 1), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("protocol " + std::to_string(kProtocolVersion)),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("sent version 1"), std::string::npos) << r.status();
  r = rpc.CallSync(peer, Register("server", -1, "tcp://127.0.0.1:9", 1, 0), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("from before protocol versions"), std::string::npos)
      << r.status();
}

TEST(ForgedMessagesTest, WorkerRegistrationsBeyondMaxWorkersAreRefused) {
  CoordinatorOptions co;
  co.num_workers = 2;
  co.max_workers = 3;
  RunningCoordinator coordinator(co);
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  for (int i = 0; i < 3; ++i) ASSERT_OK(rpc.CallSync(peer, Register("worker", -1, "", 10 + i), 5000));
  StatusOr<Message> r = rpc.CallSync(peer, Register("worker", -1, "", 99), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("--max_workers=3"), std::string::npos) << r.status();
  // A worker taking back its own id is not a new one.
  EXPECT_OK(rpc.CallSync(peer, Register("worker", 1, "", 11), 5000));
}

// ---- Issue 40: members bound by their tokens ---------------------------------

// A well-formed request of `type` claiming to come from worker 0 (or, for
// HEARTBEAT / DEREGISTER with `as_server`, server 0), carrying `token`.
Message Forged(wire::MsgType type, const std::string& token, bool as_server = false) {
  Message m;
  m.header.set_type(type);
  SetMemberToken(token, &m.header);
  m.header.set_sender(0);
  m.header.set_table("w");
  m.header.set_key_begin(0);
  m.header.set_key_count(64);
  m.header.set_clock(1);
  switch (type) {
    case wire::HEARTBEAT:
    case wire::DEREGISTER:
      m.header.mutable_heartbeat()->set_role(as_server ? "server" : "worker");
      m.header.mutable_heartbeat()->set_id(0);
      m.header.mutable_heartbeat()->set_finished(true);
      break;
    case wire::WORKER_SET:
      m.header.mutable_live_workers()->add_ids(424242);
      m.header.mutable_live_workers()->add_clocks(0);
      m.header.mutable_live_workers()->set_version(1000);
      break;
    case wire::SET_LEARNING_RATE:
      m.header.mutable_lr_change()->set_lr(1e30f);
      break;
    case wire::SEED_COPY:
      m.header.mutable_seed_data()->set_worker(0);
      break;
    case wire::BARRIER:
      m.header.mutable_barrier()->set_timeout_ms(1);
      break;
    case wire::CREATE_TABLE:
      m.header.mutable_create_table()->set_name("forged");
      m.header.mutable_create_table()->set_size(8);
      break;
    case wire::PUSH:
    case wire::PUSH_PULL: {
      std::vector<float> g(64, 1e6f);
      m.frames.push_back(Frame::Copy(g.data(), g.size() * sizeof(float)));
      break;
    }
    case wire::CHAIN_COMPLETE:
      m.header.set_forwarded(true);
      m.header.set_from_server(0);
      m.header.set_chain_seq(1);
      break;
    case wire::CHAIN_SNAPSHOT:
      m.header.set_forwarded(true);
      m.header.set_from_server(0);
      m.header.set_chain_seq(1);
      m.header.mutable_snapshot_piece()->set_last(true);
      break;
    default:
      break;
  }
  return m;
}

// What a server sends its successor in a chain, forged: claiming to come
// from server `from`, carrying `token` (none, a stranger's or a revoked
// one), at `epoch`, with sequence number `seq` of the range of table "w"
// keys [0, `keys`): a forwarded push of 1e6 per key, a forwarded CLOCK, a
// CHAIN_COMPLETE of clock 1000 and a one-piece CHAIN_SNAPSHOT of 1e6 per key.
std::vector<Message> ForgedServerMessages(const std::string& token, int from, uint64_t epoch,
                                          uint64_t seq, uint64_t keys) {
  std::vector<Message> out;
  for (wire::MsgType type : {wire::PUSH, wire::CLOCK, wire::CHAIN_COMPLETE, wire::CHAIN_SNAPSHOT}) {
    Message m;
    m.header.set_type(type);
    m.header.set_forwarded(true);
    m.header.set_from_server(from);
    SetMemberToken(token, &m.header);
    m.header.set_sender(0);
    m.header.set_table("w");
    m.header.set_key_begin(0);
    m.header.set_key_count(keys);
    m.header.set_clock(1000);
    m.header.set_epoch(epoch);
    m.header.set_chain_seq(seq);
    if (type == wire::PUSH || type == wire::CHAIN_SNAPSHOT) {
      std::vector<float> values(keys, 1e6f);
      m.frames.push_back(Frame::Copy(values.data(), values.size() * sizeof(float)));
    }
    if (type == wire::CHAIN_SNAPSHOT) {
      wire::SnapshotPiece* p = m.header.mutable_snapshot_piece();
      p->set_last(true);
      p->set_num_frames(1);
      p->set_total(keys);
    }
    out.push_back(std::move(m));
  }
  return out;
}

// Kinds anyone who can connect may send under plain TCP (docs/security.md):
// registration and the read-only queries.
bool OpenUnderPlainTcp(wire::MsgType type) {
  return type == wire::REGISTER || type == wire::GET_SHARD_MAP || type == wire::GET_STATUS ||
         type == wire::GET_EVENTS || type == wire::SERVER_STATS ||
         type == wire::LIST_CHECKPOINTS || type == wire::PING;
}

std::vector<wire::MsgType> AllKinds() {
  std::vector<wire::MsgType> kinds;
  const auto* d = wire::MsgType_descriptor();
  for (int i = 0; i < d->value_count(); ++i) {
    const auto type = static_cast<wire::MsgType>(d->value(i)->number());
    if (type != wire::MSG_UNKNOWN) kinds.push_back(type);
  }
  return kinds;
}

// What an attack must not change: who is a member, the map, the job's end,
// the model.
struct JobState {
  wire::StatusReply status;
  uint64_t updates_applied = 0;
  std::vector<float> params;
};

JobState StateOf(RpcClient* rpc, int coordinator, const std::string& server, Client* worker) {
  JobState s;
  Message m;
  m.header.set_type(wire::GET_STATUS);
  auto reply = rpc->CallSync(coordinator, std::move(m), 5000);
  CHECK(reply.ok()) << reply.status();
  s.status = reply->header.status_reply();
  s.updates_applied = test::ServerStatsOf(server).updates_applied();
  FloatBuffer out(64);
  CHECK(worker->Pull("w", 0, out).get().ok());
  s.params.assign(out.begin(), out.end());
  return s;
}

void ExpectUnchanged(const JobState& before, const JobState& after) {
  EXPECT_EQ(after.status.shard_map().version(), before.status.shard_map().version());
  EXPECT_EQ(after.status.job_error(), "");
  ASSERT_EQ(after.status.servers_size(), before.status.servers_size());
  for (int i = 0; i < after.status.servers_size(); ++i) {
    EXPECT_TRUE(after.status.servers(i).info().alive());
    EXPECT_EQ(after.status.servers(i).info().endpoint(),
              before.status.servers(i).info().endpoint());
  }
  ASSERT_EQ(after.status.workers_size(), before.status.workers_size());
  for (int i = 0; i < after.status.workers_size(); ++i) {
    EXPECT_TRUE(after.status.workers(i).alive());
    EXPECT_EQ(after.status.workers(i).incarnation(), before.status.workers(i).incarnation());
  }
  EXPECT_EQ(after.status.shard_map().tables_size(), before.status.shard_map().tables_size());
  for (const auto& t : after.status.shard_map().tables()) {
    EXPECT_EQ(t.table().lr_changes_size(), 0) << t.table().name();
  }
  EXPECT_EQ(after.updates_applied, before.updates_applied);
  EXPECT_EQ(after.params, before.params);
}

TEST(MemberTokenTest, StrangersAreRefusedEveryKindAndChangeNothing) {
  InProcessCluster cluster(1, ConsistencyModel::kBsp, 0);
  auto worker = ConnectWorker(cluster.coordinator());
  ASSERT_OK(worker->CreateTable(test::SgdDenseTable("w", 64, 0.1f)));
  FloatBuffer grads(64), out(64);
  for (auto& g : grads) g = 1.0f;
  ASSERT_OK(worker->PushPull("w", 0, grads, out).get());
  ASSERT_OK(worker->Clock());

  RpcClient rpc;
  const int coordinator = rpc.Connect(cluster.coordinator());
  const std::string server_endpoint = GetMap(&rpc, coordinator).servers(0).endpoint();
  const int server = rpc.Connect(server_endpoint);
  const JobState before = StateOf(&rpc, coordinator, server_endpoint, worker.get());

  const std::string wrong(kMemberTokenBytes, '\x5a');
  int refused = 0;
  for (const std::string& token : {std::string(), wrong}) {
    for (wire::MsgType type : AllKinds()) {
      if (OpenUnderPlainTcp(type)) continue;
      for (bool as_server : {false, true}) {
        if (as_server && type != wire::HEARTBEAT && type != wire::DEREGISTER) continue;
        for (int peer : {coordinator, server}) {
          const std::string what =
              wire::MsgType_Name(type) + (as_server ? " as server 0" : "") +
              (peer == coordinator ? " to the coordinator" : " to the server") +
              (token.empty() ? " without a token" : " with a wrong token");
          StatusOr<Message> r = rpc.CallSync(peer, Forged(type, token, as_server), 5000);
          ASSERT_FALSE(r.ok()) << what << " was accepted";
          EXPECT_NE(r.status().code(), StatusCode::kDeadlineExceeded) << what << ": " << r.status();
          // A member's own kinds name the token; others are no kind of the
          // peer (InvalidArgument) or the coordinator's alone.
          const bool to_its_peer = (peer == coordinator) == (type <= wire::SHUTDOWN ||
                                                             type == wire::SEED_COPY ||
                                                             type == wire::BARRIER ||
                                                             type == wire::SET_LEARNING_RATE ||
                                                             type == wire::ADD_SERVER ||
                                                             type == wire::DRAIN_SERVER);
          if (to_its_peer && type == wire::HEARTBEAT) {
            EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << what << ": " << r.status();
          } else if (to_its_peer) {
            EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied)
                << what << ": " << r.status();
          }
          ++refused;
        }
      }
    }
  }
  EXPECT_GT(refused, 60);
  ExpectUnchanged(before, StateOf(&rpc, coordinator, server_endpoint, worker.get()));
  // The worker trains on: its token still works.
  for (int clock = 1; clock < 4; ++clock) {
    ASSERT_OK(worker->PushPull("w", 0, grads, out).get());
    ASSERT_OK(worker->Clock());
  }
}

TEST(MemberTokenTest, DamagedHeaderBytesAreNeverAValidKind) {
  InProcessCluster cluster(1);
  RpcClient rpc;
  const int coordinator = rpc.Connect(cluster.coordinator());
  // A kind no build sends.
  Message m;
  m.header.set_type(static_cast<wire::MsgType>(99));
  StatusOr<Message> r = rpc.CallSync(coordinator, std::move(m), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("unknown message kind 99"), std::string::npos) << r.status();
  // A SHUTDOWN whose bytes carry a field no build knows (a damaged byte).
  wire::Header h;
  h.set_type(wire::SHUTDOWN);
  std::string bytes;
  h.SerializeToString(&bytes);
  bytes += std::string("\xf8\x3f\x01", 3);  // Field 1023, varint 1.
  std::vector<zmq::message_t> parts;
  parts.emplace_back(bytes.data(), bytes.size());
  Message parsed;
  Status s = ParseMessage(parts, 0, &parsed);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(parsed.header.type(), wire::SHUTDOWN);
  // The job is not over.
  EXPECT_EQ(GetMap(&rpc, coordinator).servers_size(), 1);
}

TEST(MemberTokenTest, ReRegistrationRevokesTheOldToken) {
  CoordinatorOptions co;
  co.heartbeat_timeout_ms = 60000;
  RunningCoordinator coordinator(co);
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator.endpoint());
  ASSERT_OK_AND_ASSIGN(Message first, rpc.CallSync(peer, Register("worker", -1, "", 7), 5000));
  const int id = first.header.register_reply().id();
  const std::string old_token = first.header.register_reply().member_token();
  ASSERT_EQ(old_token.size(), kMemberTokenBytes);
  Message hb = MemberMessage(wire::HEARTBEAT, "worker", id, old_token);
  ASSERT_OK(rpc.CallSync(peer, std::move(hb), 5000));
  ASSERT_OK_AND_ASSIGN(Message second, rpc.CallSync(peer, Register("worker", id, "", 8), 5000));
  const std::string new_token = second.header.register_reply().member_token();
  EXPECT_NE(new_token, old_token);
  // The old token is refused (a heartbeat says register again), the new one works.
  StatusOr<Message> r =
      rpc.CallSync(peer, MemberMessage(wire::HEARTBEAT, "worker", id, old_token), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status();
  Message bye = MemberMessage(wire::DEREGISTER, "worker", id, old_token);
  r = rpc.CallSync(peer, std::move(bye), 5000);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  EXPECT_OK(rpc.CallSync(peer, MemberMessage(wire::HEARTBEAT, "worker", id, new_token), 5000));
  // No reply to a worker carries the coordinator's routing id.
  EXPECT_TRUE(second.header.register_reply().coordinator_identity().empty());
}

// Logistic regression on a fixed synthetic set, one BSP worker, with or
// without a stranger sending every forged kind meanwhile. With `chain`, two
// servers replicate the model (--recovery=chain --replicas=2), the stranger
// also sends every server-to-server kind to both, claiming each server's
// id, at the job's epoch and sweeping the sequence numbers (so some would
// be the next one a replica expects), and at the end the head is stopped:
// the model read is the one its successor holds. Returns the accuracy on
// the set and the model.
struct JobResult {
  double accuracy = 0;
  std::vector<float> model;
  int forged_refused = 0;  // Server-to-server messages of the stranger refused.
};

JobResult TrainSmallJob(bool attacked, bool chain = false) {
  CoordinatorOptions co;
  co.num_servers = chain ? 2 : 1;
  co.consistency = ConsistencyModel::kBsp;
  co.staleness = 0;
  co.heartbeat_timeout_ms = 1000 * test::TimeScale();
  co.start_barrier_timeout_ms = 300000;
  if (chain) {
    co.recovery = "chain";
    co.replicas = 2;
  }
  InProcessCluster cluster(co, ServerOptions());
  auto worker = ConnectWorker(cluster.coordinator());
  constexpr int kDim = 16, kExamples = 256, kSteps = 30;
  CHECK(worker->CreateTable(test::SgdDenseTable("w", kDim, 0.5f)).ok());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> truth(kDim), x(kExamples * kDim), y(kExamples);
  for (float& v : truth) v = normal(rng);
  for (int e = 0; e < kExamples; ++e) {
    float dot = 0;
    for (int d = 0; d < kDim; ++d) dot += (x[e * kDim + d] = normal(rng)) * truth[d];
    y[e] = dot > 0 ? 1.0f : 0.0f;
  }
  std::atomic<bool> stop{false};
  std::atomic<int> chain_refused{0}, chain_accepted{0}, passes{0};
  constexpr uint64_t kMaxSeq = 120;  // Above the updates of a range in this job (~3 a step).
  std::thread attacker;
  if (attacked) {
    attacker = std::thread([&] {
      RpcClient rpc;
      const int c = rpc.Connect(cluster.coordinator());
      std::vector<int> servers;
      for (int i = 0; i < co.num_servers; ++i) {
        servers.push_back(rpc.Connect(cluster.server(i)->endpoint()));
      }
      const std::string wrong(kMemberTokenBytes, '\x33');
      while (!stop.load()) {
        for (wire::MsgType type : AllKinds()) {
          if (OpenUnderPlainTcp(type)) continue;
          for (int peer : {c, servers[0]}) {
            rpc.CallSync(peer, Forged(type, wrong), 2000).status().IgnoreError();
          }
        }
        if (chain) {
          // Ascending: once a replica took the seq it expects, the next
          // one would follow.
          const uint64_t epoch = GetMap(&rpc, c).epoch();
          for (uint64_t seq = 1; seq <= kMaxSeq && !stop.load(); ++seq) {
            for (const std::string& token : {std::string(), wrong}) {
              for (int from = 0; from < co.num_servers; ++from) {
                for (int server : servers) {
                  for (Message& m : ForgedServerMessages(token, from, epoch, seq, kDim)) {
                    StatusOr<Message> r = rpc.CallSync(server, std::move(m), 2000);
                    if (r.status().code() == StatusCode::kPermissionDenied) {
                      ++chain_refused;
                    } else {
                      ++chain_accepted;
                    }
                  }
                }
              }
            }
          }
        }
        ++passes;
      }
    });
    // The first pass before the job trains, the others while it does.
    while (passes.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FloatBuffer w(kDim), grad(kDim);
  for (int step = 0; step < kSteps; ++step) {
    CHECK(worker->Pull("w", 0, w).get().ok());
    for (float& g : grad) g = 0;
    for (int e = 0; e < kExamples; ++e) {
      float dot = 0;
      for (int d = 0; d < kDim; ++d) dot += w[d] * x[e * kDim + d];
      const float err = 1.0f / (1.0f + std::exp(-dot)) - y[e];
      for (int d = 0; d < kDim; ++d) grad[d] += err * x[e * kDim + d] / kExamples;
    }
    CHECK(worker->Push("w", 0, grad).get().ok());
    CHECK(worker->Clock().ok());
  }
  stop.store(true);
  if (attacker.joinable()) attacker.join();
  if (attacked && chain) {
    EXPECT_GT(chain_refused.load(), 0);
    EXPECT_EQ(chain_accepted.load(), 0) << "forged server-to-server messages were not refused";
  }
  if (chain) {
    // The head goes: its successor serves what it replicated.
    RpcClient rpc;
    const wire::ShardMap map = GetMap(&rpc, rpc.Connect(cluster.coordinator()));
    cluster.server(map.tables(0).ranges(0).server())->Stop();
  }
  CHECK(worker->Pull("w", 0, w).get().ok());
  JobResult result;
  result.model.assign(w.begin(), w.end());
  result.forged_refused = chain_refused.load();
  int right = 0;
  for (int e = 0; e < kExamples; ++e) {
    float dot = 0;
    for (int d = 0; d < kDim; ++d) dot += w[d] * x[e * kDim + d];
    right += (dot > 0) == (y[e] > 0.5f);
  }
  result.accuracy = static_cast<double>(right) / kExamples;
  return result;
}

TEST(MemberTokenTest, AnAttackedJobFinishesAsAnUnattackedOne) {
  const double clean = TrainSmallJob(false).accuracy;
  const double attacked = TrainSmallJob(true).accuracy;
  EXPECT_GT(clean, 0.85);
  EXPECT_NEAR(attacked, clean, 0.02);
}

// Server-to-server messages (issue 40): a stranger's forwarded updates,
// CHAIN_COMPLETE and CHAIN_SNAPSHOT to a chain job's servers, claiming to
// come from either server, are refused; the model the job's tail replicated
// is the unattacked job's.
TEST(ServerTokenTest, AChainJobAttackedWithForgedForwardsEndsAsAnUnattackedOne) {
  const JobResult clean = TrainSmallJob(false, /*chain=*/true);
  const JobResult attacked = TrainSmallJob(true, /*chain=*/true);
  EXPECT_GT(clean.accuracy, 0.85);
  EXPECT_NEAR(attacked.accuracy, clean.accuracy, 0.02);
  ASSERT_EQ(attacked.model.size(), clean.model.size());
  for (size_t i = 0; i < clean.model.size(); ++i) {
    EXPECT_NEAR(attacked.model[i], clean.model[i], 1e-4) << "key " << i;
  }
  std::printf("chain job: accuracy %.4f unattacked, %.4f attacked; %d forged server-to-server "
              "messages refused\n",
              clean.accuracy, attacked.accuracy, attacked.forged_refused);
}

// A server's old token is revoked when it registers again: a message with
// it is refused, one with the new token is not (server 1 here is the test,
// registering by hand; server 0 a real server checking its messages).
TEST(ServerTokenTest, ARestartedServersOldTokenIsRefused) {
  CoordinatorOptions co;
  co.num_servers = 2;
  co.recovery = "chain";
  co.replicas = 2;
  co.heartbeat_timeout_ms = 60000;  // The hand-registered server never heartbeats.
  RunningCoordinator coordinator(co);
  ServerOptions so;
  so.coordinator = coordinator.endpoint();
  so.store.kind = "memory";
  so.heartbeat_ms = 100;
  so.server_id = 0;
  auto started = Server::Start(so);
  ASSERT_OK(started.status());
  std::unique_ptr<Server> server = std::move(started).value();
  std::thread loop([&] { server->Run().IgnoreError(); });
  RpcClient rpc;
  const int c = rpc.Connect(coordinator.endpoint());
  const int s = rpc.Connect(server->endpoint());
  // Server 0 refuses (PermissionDenied) or takes (anything else: it holds
  // no table "w") a CHAIN_COMPLETE from server 1 carrying `token`, once its
  // tokens are as they should be (heartbeat replies bring them).
  auto answer = [&](const std::string& token, bool expect_refused) {
    Status last;
    for (int i = 0; i < 100; ++i) {
      Message m = std::move(ForgedServerMessages(token, 1, 0, 1, 8)[2]);  // CHAIN_COMPLETE
      last = rpc.CallSync(s, std::move(m), 5000).status();
      if ((last.code() == StatusCode::kPermissionDenied) == expect_refused) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return last;
  };
  ASSERT_OK_AND_ASSIGN(Message first,
                       rpc.CallSync(c, Register("server", 1, "tcp://127.0.0.1:9", 4001), 5000));
  const std::string old_token = first.header.register_reply().member_token();
  // No reply to anyone but a server carries the servers' tokens.
  Message query;
  query.header.set_type(wire::GET_SHARD_MAP);
  ASSERT_OK_AND_ASSIGN(Message map_reply, rpc.CallSync(c, std::move(query), 5000));
  EXPECT_FALSE(map_reply.header.has_server_tokens());
  // A server's registration reply does: its own among them.
  const wire::ServerTokens& listed = first.header.server_tokens();
  ASSERT_EQ(listed.ids_size(), listed.tokens_size());
  bool lists_itself = false;
  for (int i = 0; i < listed.ids_size(); ++i) {
    lists_itself = lists_itself || (listed.ids(i) == 1 && listed.tokens(i) == old_token);
  }
  EXPECT_TRUE(lists_itself);
  Status st = answer(old_token, /*expect_refused=*/false);
  EXPECT_NE(st.code(), StatusCode::kPermissionDenied) << st;
  // Server 1 restarts (its old instance does not answer the probe).
  ASSERT_OK_AND_ASSIGN(Message second,
                       rpc.CallSync(c, Register("server", 1, "tcp://127.0.0.1:11", 4002), 5000));
  const std::string new_token = second.header.register_reply().member_token();
  ASSERT_NE(new_token, old_token);
  st = answer(new_token, /*expect_refused=*/false);
  EXPECT_NE(st.code(), StatusCode::kPermissionDenied) << st;
  st = answer(old_token, /*expect_refused=*/true);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st;
  EXPECT_NE(st.message().find("current member token of server 1"), std::string::npos) << st;
  // Another server's token does not stand for server 1.
  Message as_other = std::move(ForgedServerMessages(new_token, 0, 0, 1, 8)[2]);
  EXPECT_EQ(rpc.CallSync(s, std::move(as_other), 5000).status().code(),
            StatusCode::kPermissionDenied);
  server->Stop();
  loop.join();
}

}  // namespace
}  // namespace relaxps
