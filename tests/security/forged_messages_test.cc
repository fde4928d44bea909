// Well-formed but forged control messages (issue 13), without --security=curve:
// every one is refused and the job goes on.
//  * Issue 40: every kind from a stranger (no member token or a wrong one)
//    is refused and changes nothing, and an attacked job ends as an
//    unattacked one; damaged header bytes are never a valid kind; a
//    re-registration revokes the old token.
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
    default:
      break;
  }
  return m;
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
                                                             type == wire::SET_LEARNING_RATE);
          if (to_its_peer && type == wire::HEARTBEAT) {
            EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << what << ": " << r.status();
          } else if (to_its_peer && type != wire::CHAIN_SNAPSHOT && type != wire::CHAIN_COMPLETE) {
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
// without a stranger sending every forged kind meanwhile; returns the
// accuracy on the set.
double TrainSmallJob(bool attacked) {
  InProcessCluster cluster(1, ConsistencyModel::kBsp, 0);
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
  std::thread attacker;
  if (attacked) {
    attacker = std::thread([&] {
      RpcClient rpc;
      const int c = rpc.Connect(cluster.coordinator());
      const int s = rpc.Connect(cluster.server(0)->endpoint());
      const std::string wrong(kMemberTokenBytes, '\x33');
      while (!stop.load()) {
        for (wire::MsgType type : AllKinds()) {
          if (OpenUnderPlainTcp(type)) continue;
          for (int peer : {c, s}) {
            rpc.CallSync(peer, Forged(type, wrong), 2000).status().IgnoreError();
          }
        }
      }
    });
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
  CHECK(worker->Pull("w", 0, w).get().ok());
  int right = 0;
  for (int e = 0; e < kExamples; ++e) {
    float dot = 0;
    for (int d = 0; d < kDim; ++d) dot += w[d] * x[e * kDim + d];
    right += (dot > 0) == (y[e] > 0.5f);
  }
  return static_cast<double>(right) / kExamples;
}

TEST(MemberTokenTest, AnAttackedJobFinishesAsAnUnattackedOne) {
  const double clean = TrainSmallJob(false);
  const double attacked = TrainSmallJob(true);
  EXPECT_GT(clean, 0.85);
  EXPECT_NEAR(attacked, clean, 0.02);
}

}  // namespace
}  // namespace relaxps
