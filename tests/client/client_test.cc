// relaxps::Client against an in-process cluster: its destructor returns
// promptly once the servers and the coordinator are gone (no deadline is
// waited out), and a request to a dead cluster fails instead of hanging.
#include "client/client.h"

#include <chrono>
#include <memory>

#include <gtest/gtest.h>

#include "tests/server/in_process_cluster.h"

namespace relaxps {
namespace {

TEST(ClientTest, DestructorIsPromptWhenServersAndCoordinatorAreGone) {
  auto cluster = std::make_unique<InProcessCluster>(1);
  ClientOptions options;
  options.coordinator = cluster->coordinator();
  options.heartbeat_ms = 50;
  options.request_timeout_ms = 60000;  // Nothing may wait this out.
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  TableOptions t;
  t.name = "w";
  t.size = 1000;
  ASSERT_TRUE((*client)->CreateTable(t).ok());
  ASSERT_TRUE((*client)->Pull("w", 0, FloatBuffer(1000)).get().ok());

  cluster.reset();  // Servers and coordinator stop; their sockets close.
  // In flight to the dead server: fails at shutdown, not after 60 s.
  std::future<Status> pending = (*client)->Pull("w", 0, FloatBuffer(1000));
  const auto t0 = std::chrono::steady_clock::now();
  client->reset();
  const auto took = std::chrono::steady_clock::now() - t0;
  // A goodbye to a dead coordinator is bounded by 300 ms; the old
  // destructor waited a full second for it.
  EXPECT_LT(took, std::chrono::milliseconds(900))
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(pending.get().code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace relaxps
