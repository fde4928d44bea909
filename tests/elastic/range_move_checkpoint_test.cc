// Range moves under --recovery=checkpoint (docs/elastic.md): a checkpoint
// taken after a move restores the moved ranges where the map now has them,
// and one taken before the move restores too: the source's range, now the
// head of the one it held then, is assembled from the old store shard.
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "common/rpc_client.h"
#include "common/shard_map.h"
#include "coordinator/coordinator.h"
#include "server/server.h"
#include "tests/operator_session.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

constexpr uint64_t kDim = 3 * kDenseChunk + 1000;
constexpr uint64_t kCut = 2 * kDenseChunk;  // The joined server's share: [kCut, kDim).

// A server on its own thread, stopped when it goes.
class RunningServer {
 public:
  static StatusOr<std::unique_ptr<RunningServer>> Start(const ServerOptions& so) {
    ASSIGN_OR_RETURN(std::unique_ptr<Server> s, Server::Start(so));
    auto r = std::unique_ptr<RunningServer>(new RunningServer());
    r->server_ = std::move(s);
    Server* raw = r->server_.get();
    r->thread_ = std::thread([raw] { raw->Run().IgnoreError(); });
    return r;
  }
  ~RunningServer() {
    server_->Stop();
    thread_.join();
  }

 private:
  RunningServer() = default;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

int HolderOfCut(const std::string& coordinator) {
  RpcClient rpc;
  Message m;
  m.header.set_type(wire::GET_SHARD_MAP);
  auto reply = rpc.CallSync(rpc.Connect(coordinator), std::move(m), 10000);
  CHECK(reply.ok()) << reply.status();
  for (const wire::DenseRange& r : reply->header.shard_map().tables(0).ranges()) {
    if (r.begin() <= kCut && kCut < r.end()) return r.server();
  }
  return -1;
}

// Integer gradients and SGD with lr 1: the model is exact whatever the
// order. Then the clock: checkpoints are named by it (ckpt-<clock>).
Status PushStep(Client* c, int step) {
  FloatBuffer grads(kDim);
  for (uint64_t d = 0; d < kDim; ++d) grads[d] = static_cast<float>((d + step) % 3 + 1);
  RETURN_IF_ERROR(c->Push("w", 0, grads).get());
  return c->Clock();
}

// Checkpoints are taken at the slowest worker's clock as the coordinator
// knows it (from heartbeats): waits until it knows `clock`.
void WaitForCoordinatorClock(const std::string& coordinator, int64_t clock) {
  RpcClient rpc;
  const int peer = rpc.Connect(coordinator);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up) {
    Message m;
    m.header.set_type(wire::GET_STATUS);
    auto reply = rpc.CallSync(peer, std::move(m), 10000);
    CHECK(reply.ok()) << reply.status();
    const auto& workers = reply->header.status_reply().workers();
    if (!workers.empty() && workers[0].clock() >= clock) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  FAIL() << "the coordinator never learned clock " << clock;
}

std::vector<float> PullAll(Client* c) {
  FloatBuffer out(kDim);
  Status s = c->Pull("w", 0, out).get();
  EXPECT_OK(s);
  return std::vector<float>(out.begin(), out.end());
}

TEST(RangeMoveCheckpointTest, ACheckpointAfterAMoveRestoresAndSoDoesOneBeforeIt) {
  const std::string dir = test::MakeTempDir();
  CoordinatorOptions co;
  co.num_servers = 1;
  co.recovery = "checkpoint";
  co.heartbeat_timeout_ms = 60000;  // The restart below is by hand.
  co.takeover_probe_ms = 200;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Coordinator> coordinator, Coordinator::Start(co));
  std::thread coordinator_thread([&] { coordinator->Run(); });
  auto server_options = [&](const std::string& name) {
    ServerOptions so;
    so.coordinator = coordinator->endpoint();
    so.store.kind = "rocksdb";
    so.store.data_dir = dir + "/" + name;
    so.heartbeat_ms = 100;
    return so;
  };
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<RunningServer> s0,
                         RunningServer::Start(server_options("s0")));
    ClientOptions o;
    o.coordinator = coordinator->endpoint();
    o.request_timeout_ms = 20000 * test::TimeScale();
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> c, Client::Connect(o));
    TableOptions t;
    t.name = "w";
    t.size = kDim;
    t.optimizer.name = "sgd";
    t.optimizer.lr = 1.0f;
    ASSERT_OK(c->CreateTable(t));
    for (int step = 0; step < 3; ++step) ASSERT_OK(PushStep(c.get(), step));
    WaitForCoordinatorClock(coordinator->endpoint(), 3);
    ASSERT_OK_AND_ASSIGN(Message before, test::TriggerCheckpointAsOperator(coordinator->endpoint(), 60000));
    ASSERT_EQ(before.header.checkpoint_record().shards_size(), 1);
    const std::string before_dir = before.header.checkpoint_record().shards(0).dir();
    const std::vector<float> at_before = PullAll(c.get());

    ServerOptions joining = server_options("s1");
    joining.join = true;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<RunningServer> s1, RunningServer::Start(joining));
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (HolderOfCut(coordinator->endpoint()) != 1 && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(HolderOfCut(coordinator->endpoint()), 1) << "the range never moved";
    for (int step = 3; step < 6; ++step) ASSERT_OK(PushStep(c.get(), step));
    WaitForCoordinatorClock(coordinator->endpoint(), 6);
    ASSERT_OK_AND_ASSIGN(Message after, test::TriggerCheckpointAsOperator(coordinator->endpoint(), 60000));
    ASSERT_EQ(after.header.checkpoint_record().shards_size(), 2);  // The joined server too.
    const std::vector<float> at_checkpoint = PullAll(c.get());
    for (int step = 6; step < 9; ++step) ASSERT_OK(PushStep(c.get(), step));
    const std::vector<float> latest = PullAll(c.get());

    // Server 0 goes and comes back from the checkpoint taken after the move.
    s0.reset();
    ServerOptions restart = server_options("s0");
    restart.server_id = 0;
    restart.restore_from = "latest";
    ASSERT_OK_AND_ASSIGN(s0, RunningServer::Start(restart));
    const std::vector<float> restored = PullAll(c.get());
    size_t head_wrong = 0, tail_wrong = 0;
    for (uint64_t d = 0; d < kDim; ++d) {
      if (d < kCut) {
        head_wrong += restored[d] != at_checkpoint[d];  // Rolled back to the checkpoint.
      } else {
        tail_wrong += restored[d] != latest[d];  // Server 1 was not restarted.
      }
    }
    EXPECT_EQ(head_wrong, 0u);
    EXPECT_EQ(tail_wrong, 0u);
    EXPECT_NE(at_checkpoint, latest);  // The steps after the checkpoint changed the head.

    // The checkpoint from before the move holds [0, kDim) as one shard: the
    // map's [0, kCut) comes out of it.
    s0.reset();
    restart.restore_from = before_dir;
    ASSERT_OK_AND_ASSIGN(s0, RunningServer::Start(restart));
    const std::vector<float> from_before = PullAll(c.get());
    size_t before_head_wrong = 0, before_tail_wrong = 0;
    for (uint64_t d = 0; d < kDim; ++d) {
      if (d < kCut) {
        before_head_wrong += from_before[d] != at_before[d];
      } else {
        before_tail_wrong += from_before[d] != latest[d];
      }
    }
    EXPECT_EQ(before_head_wrong, 0u);
    EXPECT_EQ(before_tail_wrong, 0u);
    EXPECT_NE(at_before, at_checkpoint);  // The two checkpoints differ in the head.
    // Training goes on from the restored head.
    ASSERT_OK(PushStep(c.get(), 9));
    const std::vector<float> trained = PullAll(c.get());
    size_t trained_wrong = 0;
    for (uint64_t d = 0; d < kCut; ++d) {
      trained_wrong += trained[d] != at_before[d] - static_cast<float>((d + 9) % 3 + 1);
    }
    EXPECT_EQ(trained_wrong, 0u);
    std::printf("checkpoint after a move: %zu + %zu keys differ after the restore; one before "
                "it: %zu + %zu, then %zu after a step\n",
                head_wrong, tail_wrong, before_head_wrong, before_tail_wrong, trained_wrong);
  }
  coordinator->Stop();
  coordinator_thread.join();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace relaxps
