// --security=curve (issue 13): a job whose coordinator and server admit
// only the job's keys.
//  * The job's worker key trains (create, push, pull).
//  * A client without keys, or with a key of another keygen (knowing the
//    coordinator's and the server's public keys), can neither register, pull
//    nor push.
//  * A worker key cannot send WORKER_SET or INSTALL_MAP, act as another
//    worker, or register as a server.
//  * Every ROUTER proves its own key: the map lists server 0's public key,
//    and neither the server nor the coordinator is answered by a client
//    that expects the other's key.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/curve_auth.h"
#include "common/member_token.h"
#include "common/rpc_client.h"
#include "coordinator/coordinator.h"
#include "server/server.h"
#include "tests/security/attack_util.h"
#include "tests/server/in_process_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

// A job's coordinator options under curve: `num_servers` servers, each with
// its own key (InProcessCluster gives server i the key "server-<i>"); with
// `chain`, under --recovery=chain with 2 replicas.
CoordinatorOptions CurveCoordinator(const std::string& keys, int num_servers = 1,
                                    bool chain = false) {
  CoordinatorOptions co;
  co.curve = CurveOptions{keys, "coordinator"};
  co.num_servers = num_servers;
  if (chain) {
    co.recovery = "chain";
    co.replicas = 2;
  }
  return co;
}

ServerOptions CurveServers(const std::string& keys) {
  ServerOptions so;
  so.curve = CurveOptions{keys, "server-0"};
  return so;
}

StatusOr<std::unique_ptr<Client>> Connect(const std::string& coordinator, CurveOptions curve,
                                          int worker_id, int timeout_ms) {
  ClientOptions o;
  o.coordinator = coordinator;
  o.worker_id = worker_id;
  o.request_timeout_ms = timeout_ms;
  o.curve = std::move(curve);
  return Client::Connect(o);
}

std::unique_ptr<RpcClient> RawClient(const CurveOptions& curve) {
  RpcClientOptions o;
  CHECK(o.UseCurve(curve).ok());
  return std::make_unique<RpcClient>(o);
}

Message Pull(uint64_t n, int sender) {
  Message m;
  m.header.set_type(wire::PULL);
  m.header.set_table("w");
  m.header.set_key_count(n);
  m.header.set_sender(sender);
  return m;
}

Message Stats() {
  Message m;
  m.header.set_type(wire::SERVER_STATS);
  return m;
}

TEST(CurveTest, OnlyTheJobsKeysGetInAndRolesAreBoundToKeys) {
  const std::string dir = test::MakeTempDir();
  const std::string keys = dir + "/keys";
  ASSERT_OK(GenerateCurveKeys(keys, JobPrincipals(1, 2)));
  InProcessCluster job(CurveCoordinator(keys), CurveServers(keys));
  const int timeout_ms = static_cast<int>(test::Scaled(test::Millis(10000)).count());

  // The job's worker key trains.
  ASSERT_OK_AND_ASSIGN(auto worker,
                       Connect(job.coordinator(), CurveOptions{keys, "worker-0"}, 0, timeout_ms));
  ASSERT_OK(worker->CreateTable(test::SgdDenseTable("w", 64, 1.0f)));
  FloatBuffer g(64), out(64);
  for (auto& v : g) v = 1.0f;
  ASSERT_OK(worker->PushPull("w", 0, g, out).get());
  EXPECT_FLOAT_EQ(out[0], -1.0f);

  // No keys: the handshake fails (the security mechanisms differ), nothing
  // is answered, and the client says so at once (issue 40 point 5).
  StatusOr<std::unique_ptr<Client>> plain = Connect(job.coordinator(), CurveOptions(), -1, 1500);
  EXPECT_FALSE(plain.ok());
  // Which of two handshake failures ZeroMQ reports depends on a race (the
  // server resets the connection, sometimes before this client read its
  // greeting); both are said well before the deadline.
  RpcClient raw;
  StatusOr<Message> r =
      raw.CallSync(raw.Connect(job.server(0)->endpoint()), Pull(64, -1), timeout_ms);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  EXPECT_NE(r.status().message().find("authentication failed (handshake with " +
                                      job.server(0)->endpoint()),
            std::string::npos)
      << r.status();

  // A key of another keygen, though it knows the job's public keys.
  const std::string stranger = dir + "/stranger";
  ASSERT_OK(GenerateCurveKeys(stranger, {"worker-0"}));
  ASSERT_OK_AND_ASSIGN(std::string server_pub, LoadPublicKey(keys, "server-0"));
  for (const char* name : {"coordinator", "server-0"}) {
    ASSERT_OK_AND_ASSIGN(std::string pub, LoadPublicKey(keys, name));
    std::ofstream f(stranger + "/" + name + ".pub");
    f << pub << "\n";
  }
  // Issue 40 point 5: said as such, within 1 s, not as a timeout.
  const auto asked = std::chrono::steady_clock::now();
  StatusOr<std::unique_ptr<Client>> impostor =
      Connect(job.coordinator(), CurveOptions{stranger, "worker-0"}, 0, 3000);
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(1));
  EXPECT_EQ(impostor.status().code(), StatusCode::kPermissionDenied) << impostor.status();
  EXPECT_NE(impostor.status().message().find(
                "authentication failed (server rejected this client's key)"),
            std::string::npos)
      << impostor.status();
  auto stranger_rpc = RawClient(CurveOptions{stranger, "worker-0"});
  Message push = Pull(64, 0);
  push.header.set_type(wire::PUSH);
  push.frames.push_back(Frame::Copy(g.data(), 64 * sizeof(float)));
  r = stranger_rpc->CallSync(stranger_rpc->Connect(job.server(0)->endpoint(), server_pub), std::move(push),
                             1500);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  EXPECT_NE(r.status().message().find("authentication failed"), std::string::npos) << r.status();

  // A worker key may not send the coordinator's control messages ...
  auto worker1 = RawClient(CurveOptions{keys, "worker-1"});
  const int server = worker1->Connect(job.server(0)->endpoint(), server_pub);
  Message worker_set;
  worker_set.header.set_type(wire::WORKER_SET);
  worker_set.header.mutable_live_workers()->set_version(99);
  r = worker1->CallSync(server, std::move(worker_set), timeout_ms);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  Message install;
  install.header.set_type(wire::INSTALL_MAP);
  install.header.mutable_shard_map()->set_version(1000);
  r = worker1->CallSync(server, std::move(install), timeout_ms);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  // ... nor pull or push as another worker ...
  r = worker1->CallSync(server, Pull(64, 0), timeout_ms);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  // ... nor register as another worker or as a server.
  const int coordinator = worker1->Connect(job.coordinator());
  for (const char* role : {"worker", "server"}) {
    Message reg;
    reg.header.set_type(wire::REGISTER);
    reg.header.mutable_register_request()->set_role(role);
    reg.header.mutable_register_request()->set_requested_id(0);
    reg.header.mutable_register_request()->set_endpoint("tcp://127.0.0.1:9");
    reg.header.mutable_register_request()->set_protocol_version(kProtocolVersion);
    r = worker1->CallSync(coordinator, std::move(reg), timeout_ms);
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << role << ": " << r.status();
  }
  // Registered with its own id, its own pulls work (with the member token
  // its registration returned).
  Message reg;
  reg.header.set_type(wire::REGISTER);
  reg.header.mutable_register_request()->set_role("worker");
  reg.header.mutable_register_request()->set_requested_id(1);
  reg.header.mutable_register_request()->set_protocol_version(kProtocolVersion);
  ASSERT_OK_AND_ASSIGN(Message registered,
                       worker1->CallSync(coordinator, std::move(reg), timeout_ms));
  ASSERT_EQ(registered.header.register_reply().id(), 1);
  Message own = Pull(64, 1);
  SetMemberToken(registered.header.register_reply().member_token(), &own.header);
  r = worker1->CallSync(server, std::move(own), timeout_ms);
  EXPECT_OK(r.status());
  // Without it, even its own key's pull is refused.
  r = worker1->CallSync(server, Pull(64, 1), timeout_ms);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status();
  if (!::testing::Test::HasFailure()) test::RemoveTree(dir);
}

TEST(CurveTest, EachRouterProvesItsOwnKey) {
  const std::string dir = test::MakeTempDir();
  const std::string keys = dir + "/keys";
  ASSERT_OK(GenerateCurveKeys(keys, JobPrincipals(2, 1)));
  InProcessCluster job(CurveCoordinator(keys), CurveServers(keys));
  const int timeout_ms = static_cast<int>(test::Scaled(test::Millis(10000)).count());
  ASSERT_OK_AND_ASSIGN(std::string server0_pub, LoadPublicKey(keys, "server-0"));
  ASSERT_OK_AND_ASSIGN(std::string server1_pub, LoadPublicKey(keys, "server-1"));
  auto worker = RawClient(CurveOptions{keys, "worker-0"});

  // The map the coordinator hands out lists the server's own key.
  Message get;
  get.header.set_type(wire::GET_SHARD_MAP);
  StatusOr<Message> r = worker->CallSync(worker->Connect(job.coordinator()), std::move(get),
                                         timeout_ms);
  ASSERT_OK(r.status());
  ASSERT_EQ(r->header.shard_map().servers_size(), 1);
  EXPECT_EQ(r->header.shard_map().servers(0).curve_public_key(), server0_pub);

  // The right key is answered ...
  EXPECT_OK(
      worker->CallSync(worker->Connect(job.server(0)->endpoint(), server0_pub), Stats(), timeout_ms).status());
  // ... but the server cannot pose as the coordinator or as server 1, nor
  // the coordinator as a server: the handshake fails, nothing is answered.
  const struct {
    std::string endpoint, key, what;
  } impostors[] = {{job.server(0)->endpoint(), "", "the server as the coordinator"},
                   {job.server(0)->endpoint(), server1_pub, "server 0 as server 1"},
                   {job.coordinator(), server0_pub, "the coordinator as server 0"}};
  // Such a server just ends the connection during the handshake, which a
  // client cannot tell from one that died then; ended three times in a row,
  // it is a refusal, said long before the deadline (issue 40 point 5).
  for (const auto& i : impostors) {
    const auto asked = std::chrono::steady_clock::now();
    r = worker->CallSync(worker->Connect(i.endpoint, i.key), Stats(), timeout_ms);
    EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::milliseconds(timeout_ms / 2))
        << i.what;
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << i.what << ": " << r.status();
    EXPECT_NE(r.status().message().find("authentication failed (handshake with " + i.endpoint +
                                        " ended 3 times in a row"),
              std::string::npos)
        << i.what << ": " << r.status();
  }
  if (!::testing::Test::HasFailure()) test::RemoveTree(dir);
}

// Chain replication under curve: each head forwards to its successor,
// authenticating it by the key the map lists, and a push is acknowledged
// only once the tail applied it.
TEST(CurveTest, ChainReplicasAuthenticateTheirSuccessors) {
  const std::string dir = test::MakeTempDir();
  const std::string keys = dir + "/keys";
  ASSERT_OK(GenerateCurveKeys(keys, JobPrincipals(2, 1)));
  InProcessCluster job(CurveCoordinator(keys, 2, /*chain=*/true), CurveServers(keys));
  const int timeout_ms = static_cast<int>(test::Scaled(test::Millis(10000)).count());
  ASSERT_OK_AND_ASSIGN(auto worker,
                       Connect(job.coordinator(), CurveOptions{keys, "worker-0"}, 0, timeout_ms));
  ASSERT_OK(worker->CreateTable(test::SgdDenseTable("w", 1000, 1.0f)));
  FloatBuffer g(1000), out(1000);
  for (auto& v : g) v = 1.0f;
  for (int step = 1; step <= 3; ++step) {
    ASSERT_OK(worker->PushPull("w", 0, g, out).get()) << "step " << step;
    EXPECT_FLOAT_EQ(out[0], -step);
    EXPECT_FLOAT_EQ(out[999], -step);
  }
  if (!::testing::Test::HasFailure()) test::RemoveTree(dir);
}

// Issue 40 point 2: every kind from every role's key that may not send it is
// refused and changes nothing; the job trains on.
TEST(CurveTest, EveryKindFromEveryRoleThatMayNotSendItIsRefused) {
  const std::string dir = test::MakeTempDir();
  const std::string keys = dir + "/keys";
  std::vector<std::string> names = JobPrincipals(1, 2);
  names.push_back("alice:operator");
  names.push_back("grafana:observer");
  ASSERT_OK(GenerateCurveKeys(keys, names));
  InProcessCluster job(CurveCoordinator(keys), CurveServers(keys));
  const int timeout_ms = static_cast<int>(test::Scaled(test::Millis(10000)).count());
  ASSERT_OK_AND_ASSIGN(auto worker,
                       Connect(job.coordinator(), CurveOptions{keys, "worker-0"}, 0, timeout_ms));
  ASSERT_OK(worker->CreateTable(test::SgdDenseTable("w", 64, 1.0f)));
  FloatBuffer g(64), out(64);
  for (auto& v : g) v = 1.0f;
  ASSERT_OK(worker->PushPull("w", 0, g, out).get());
  ASSERT_OK_AND_ASSIGN(std::string server_pub, LoadPublicKey(keys, "server-0"));
  const wire::MsgType kinds[] = {
      wire::REGISTER,    wire::HEARTBEAT,     wire::CREATE_TABLE,  wire::GET_SHARD_MAP,
      wire::GET_STATUS,  wire::DEREGISTER,    wire::SHUTDOWN,      wire::TRIGGER_CHECKPOINT,
      wire::PUSH,        wire::PULL,          wire::PUSH_PULL,     wire::PUSH_ROWS,
      wire::PULL_ROWS,   wire::INSTALL_MAP,   wire::SERVER_STATS,  wire::WORKER_SET,
      wire::CLOCK,       wire::CHECKPOINT,    wire::LIST_CHECKPOINTS, wire::CHAIN_SNAPSHOT,
      wire::CHAIN_COMPLETE, wire::PING,       wire::SEED_COPY,     wire::SEED,
      wire::BARRIER,     wire::SET_LEARNING_RATE, wire::GET_EVENTS, wire::ADD_SERVER,
      wire::DRAIN_SERVER, wire::MOVE_RANGE,   wire::MOVE_STATE};
  ASSERT_EQ(std::size(kinds) + 1, static_cast<size_t>(wire::MsgType_descriptor()->value_count()))
      << "a new message kind: add it here and to RoleMaySend";
  const struct {
    std::string key;
    Role role;
  } principals[] = {{"worker-1", Role::kWorker},     {"server-0", Role::kServer},
                    {"ctl", Role::kOperator},        {"alice", Role::kOperator},
                    {"observer", Role::kObserver},   {"grafana", Role::kObserver},
                    {"coordinator", Role::kCoordinator}};
  int refused = 0;
  for (const auto& p : principals) {
    auto rpc = RawClient(CurveOptions{keys, p.key});
    const int coordinator = rpc->Connect(job.coordinator());
    const int server = rpc->Connect(job.server(0)->endpoint(), server_pub);
    for (wire::MsgType type : kinds) {
      if (RoleMaySend(p.role, type)) continue;
      for (int peer : {coordinator, server}) {
        Message m;
        m.header.set_type(type);
        m.header.set_sender(1);
        m.header.set_table("w");
        m.header.set_key_count(64);
        m.header.mutable_lr_change()->set_lr(1e30f);
        StatusOr<Message> r = rpc->CallSync(peer, std::move(m), timeout_ms);
        EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied)
            << p.key << " sent " << wire::MsgType_Name(type) << " to the "
            << (peer == coordinator ? "coordinator" : "server") << ": " << r.status();
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 100);
  // An observer's key may not change the learning rate (the 1e30).
  EXPECT_FALSE(RoleMaySend(Role::kObserver, wire::SET_LEARNING_RATE));
  EXPECT_TRUE(RoleMaySend(Role::kOperator, wire::SET_LEARNING_RATE));
  // Nothing changed: the model is where the worker left it, and it trains on.
  ASSERT_OK(worker->Pull("w", 0, out).get());
  EXPECT_FLOAT_EQ(out[0], -1.0f);
  ASSERT_OK(worker->PushPull("w", 0, g, out).get());
  EXPECT_FLOAT_EQ(out[0], -2.0f);
  if (!::testing::Test::HasFailure()) test::RemoveTree(dir);
}

TEST(CurveTest, KeyFilesCarryRolesAndNamesAreBoundToThem) {
  const std::string dir = test::MakeTempDir();
  ASSERT_OK(GenerateCurveKeys(dir, {"worker-3", "ctl", "bob:observer"}));
  ASSERT_OK_AND_ASSIGN(auto admitted, LoadAdmittedKeys(dir));
  std::set<std::string> ids;
  for (const auto& [pub, id] : admitted) ids.insert(id);
  EXPECT_EQ(ids, (std::set<std::string>{"worker:worker-3", "operator:ctl", "observer:bob"}));
  EXPECT_TRUE(RoleAllows("worker:worker-3", "worker", 3));
  EXPECT_FALSE(RoleAllows("worker:worker-3", "worker", 4));
  EXPECT_TRUE(RoleAllows("operator:ctl", "observer"));
  EXPECT_FALSE(RoleAllows("observer:bob", "operator"));
  // A worker key must be named by its id; an unknown name needs a role.
  EXPECT_EQ(GenerateCurveKeys(dir, {"eve:worker"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GenerateCurveKeys(dir, {"eve"}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GenerateCurveKeys(dir, {"eve:admin"}).code(), StatusCode::kInvalidArgument);
  test::RemoveTree(dir);
}

TEST(CurveTest, AnUnreachableEndpointIsNamed) {
  RpcClient rpc;
  // A port nobody listens on: bound, never listened on, and held for the
  // test (a port bound and closed again could be taken by a test running
  // next to this one).
  const int held = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  ASSERT_EQ(::bind(held, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::getsockname(held, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  Message m;
  m.header.set_type(wire::GET_STATUS);
  StatusOr<Message> r = rpc.CallSync(rpc.Connect(endpoint), std::move(m), 600);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_NE(r.status().message().find(endpoint + " is unreachable"), std::string::npos)
      << r.status();
  ::close(held);
}

TEST(CurveTest, PublicBindNeedsCurveOrAnExplicitOptOut) {
  EXPECT_OK(CheckBindIsSafe("tcp://127.0.0.1:*", false, false));
  Status s = CheckBindIsSafe("tcp://0.0.0.0:5555", false, false);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("--insecure_bind_public"), std::string::npos) << s;
  EXPECT_OK(CheckBindIsSafe("tcp://0.0.0.0:5555", true, false));
  EXPECT_OK(CheckBindIsSafe("tcp://0.0.0.0:5555", false, true));
}

}  // namespace
}  // namespace relaxps
