// Router on its own, over a fake Transport that only hands out peer handles:
// which maps it installs (newer versions only, valid ones only), which
// servers it reports as moved (new endpoint; with cancel_dead, newly dead),
// and that Peer() agrees with the installed map. The router reads no time,
// so no clock and no sleeps.
#include "client/internal/router.h"

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/client/fake_transport.h"
#include "tests/client/test_maps.h"
#include "tests/test_util.h"

namespace relaxps {
namespace client_internal {
namespace {

// A map of `version` with one server per endpoint ("" : none yet), a dense
// table "w" of three chunks and a sparse table "e" of 8 buckets over them.
wire::ShardMap Map(uint64_t version, const std::vector<std::string>& endpoints) {
  wire::ShardMap m = test::ServersMap(version, endpoints, /*epoch=*/0);
  test::AddDenseTable(&m, "w", 3);
  test::AddSparseTable(&m, "e", 8, 4);
  return m;
}

const std::string kA = "tcp://127.0.0.1:1001";
const std::string kB = "tcp://127.0.0.1:1002";
const std::string kC = "tcp://127.0.0.1:1003";
const std::string kB2 = "tcp://127.0.0.1:2002";
const std::string kD = "tcp://127.0.0.1:1004";

TEST(RouterTest, HasNoMapAndNoPeersBeforeTheFirstInstall) {
  FakeTransport transport;
  Router router(&transport);
  EXPECT_EQ(router.map(), nullptr);
  std::string endpoint = "unchanged";
  EXPECT_EQ(router.Peer(0, &endpoint), -1);
  EXPECT_TRUE(router.ServersWithEndpoint().empty());
}

TEST(RouterTest, InstallConnectsEveryServerThatHasAnEndpoint) {
  FakeTransport transport;
  Router router(&transport);
  wire::ShardMap m = Map(1, {kA, kB, ""});
  m.mutable_servers(1)->set_curve_public_key("key-of-server-1");
  ASSERT_OK_AND_ASSIGN(std::vector<Router::Moved> moved, router.Install(m));
  EXPECT_TRUE(moved.empty());
  ASSERT_NE(router.map(), nullptr);
  EXPECT_EQ(router.map()->version(), 1u);

  std::string endpoint;
  const int a = router.Peer(0, &endpoint);
  EXPECT_GE(a, 0);
  EXPECT_EQ(a, transport.HandleOf(kA));
  EXPECT_EQ(endpoint, kA);
  // The server's own CURVE key goes with its connection.
  const int b = router.Peer(1, &endpoint);
  EXPECT_GE(b, 0);
  EXPECT_EQ(b, transport.HandleOf(kB, "key-of-server-1"));
  EXPECT_EQ(endpoint, kB);
  EXPECT_NE(a, b);
  // No endpoint, or no such server: no peer.
  EXPECT_EQ(router.Peer(2, &endpoint), -1);
  EXPECT_EQ(router.Peer(3, &endpoint), -1);
  EXPECT_EQ(router.Peer(-1, &endpoint), -1);
  EXPECT_EQ(router.ServersWithEndpoint(), (std::vector<int>{0, 1}));

  // The other overload hands out the current map itself.
  std::shared_ptr<const ShardMap> map;
  EXPECT_EQ(router.Peer(1, &map), b);
  EXPECT_EQ(map, router.map());
  EXPECT_EQ(map->server_endpoint(1), kB);
}

TEST(RouterTest, DenseRangesAndSparseRowsLeadToTheirOwnersPeers) {
  FakeTransport transport;
  Router router(&transport);
  const std::vector<std::string> endpoints = {kA, kB, kC};
  ASSERT_OK(router.Install(Map(1, endpoints)));
  std::shared_ptr<const ShardMap> map = router.map();
  ASSERT_OK_AND_ASSIGN(std::vector<DenseSlice> slices, map->SplitDense("w", 0, 3 * kDenseChunk));
  std::set<int> owners;
  for (const DenseSlice& s : slices) {
    std::string endpoint;
    EXPECT_EQ(router.Peer(s.server, &endpoint), transport.HandleOf(endpoints[s.server]));
    EXPECT_EQ(endpoint, endpoints[s.server]);
    owners.insert(s.server);
  }
  EXPECT_EQ(owners, (std::set<int>{0, 1, 2}));
  const wire::TableShards* e = map->FindTable("e");
  ASSERT_NE(e, nullptr);
  owners.clear();
  for (uint64_t row = 0; row < 200; ++row) {
    const int server = map->SparseServer(*e, row);
    ASSERT_GE(server, 0);
    ASSERT_LT(server, 3);
    std::string endpoint;
    EXPECT_EQ(router.Peer(server, &endpoint), transport.HandleOf(endpoints[server]));
    owners.insert(server);
  }
  EXPECT_EQ(owners, (std::set<int>{0, 1, 2}));
}

TEST(RouterTest, IgnoresAMapThatIsNotNewer) {
  FakeTransport transport;
  Router router(&transport);
  ASSERT_OK(router.Install(Map(2, {kA, kB, kC})));
  const int b = transport.HandleOf(kB);
  for (uint64_t version : {2u, 1u}) {
    ASSERT_OK_AND_ASSIGN(std::vector<Router::Moved> moved, router.Install(Map(version, {kA, kB2, kC})));
    EXPECT_TRUE(moved.empty()) << "version " << version;
    EXPECT_EQ(router.map()->version(), 2u);
    std::string endpoint;
    EXPECT_EQ(router.Peer(1, &endpoint), b);
    EXPECT_EQ(endpoint, kB);
  }
  EXPECT_FALSE(transport.EverConnected(kB2));
}

TEST(RouterTest, RejectsAMalformedMapAndKeepsTheCurrentOne) {
  FakeTransport transport;
  Router router(&transport);
  wire::ShardMap bad = Map(1, {kA, kB, kC});
  wire::DenseRange* r = bad.mutable_tables(0)->mutable_ranges(1);
  r->set_begin(r->begin() + 1);  // A gap in table "w".
  EXPECT_EQ(router.Install(bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(router.map(), nullptr);

  ASSERT_OK(router.Install(Map(1, {kA, kB, kC})));
  bad = Map(2, {kA, kB2, kC});
  r = bad.mutable_tables(0)->mutable_ranges(1);
  r->set_begin(r->begin() + 1);
  EXPECT_EQ(router.Install(bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(router.map()->version(), 1u);
  std::string endpoint;
  EXPECT_EQ(router.Peer(1, &endpoint), transport.HandleOf(kB));
  EXPECT_EQ(endpoint, kB);
  // The same version, well formed, is still news.
  ASSERT_OK(router.Install(Map(2, {kA, kB2, kC})));
  EXPECT_EQ(router.map()->version(), 2u);
}

TEST(RouterTest, ReportsAServerThatMovedToANewEndpoint) {
  FakeTransport transport;
  Router router(&transport);
  ASSERT_OK(router.Install(Map(1, {kA, kB, kC})));
  std::shared_ptr<const ShardMap> before = router.map();
  const int a = transport.HandleOf(kA);
  const int b = transport.HandleOf(kB);
  ASSERT_OK_AND_ASSIGN(std::vector<Router::Moved> moved, router.Install(Map(2, {kA, kB2, kC})));
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0].server, 1);
  EXPECT_EQ(moved[0].old_peer, b);
  EXPECT_EQ(moved[0].endpoint, kB2);
  EXPECT_TRUE(moved[0].restarted);
  std::string endpoint;
  const int b2 = router.Peer(1, &endpoint);
  EXPECT_EQ(b2, transport.HandleOf(kB2));
  EXPECT_NE(b2, b);
  EXPECT_EQ(endpoint, kB2);
  EXPECT_EQ(router.Peer(0, &endpoint), a);
  // A map handed out earlier is a snapshot: it still names the old endpoint.
  EXPECT_EQ(before->version(), 1u);
  EXPECT_EQ(before->server_endpoint(1), kB);
  EXPECT_EQ(router.map()->version(), 2u);
}

TEST(RouterTest, AServerGainingAnEndpointOrJoiningIsNotAMove) {
  FakeTransport transport;
  Router router(&transport);
  ASSERT_OK(router.Install(Map(1, {kA, "", kC})));
  EXPECT_EQ(router.ServersWithEndpoint(), (std::vector<int>{0, 2}));
  ASSERT_OK_AND_ASSIGN(std::vector<Router::Moved> moved, router.Install(Map(2, {kA, kB, kC, kD})));
  EXPECT_TRUE(moved.empty());
  std::string endpoint;
  EXPECT_EQ(router.Peer(1, &endpoint), transport.HandleOf(kB));
  EXPECT_EQ(router.Peer(3, &endpoint), transport.HandleOf(kD));
  EXPECT_EQ(endpoint, kD);
  EXPECT_EQ(router.ServersWithEndpoint(), (std::vector<int>{0, 1, 2, 3}));
}

TEST(RouterTest, CancelDeadReportsAServerTheNewMapMarksDeadOnce) {
  wire::ShardMap v1 = Map(1, {kA, kB, kC});
  wire::ShardMap v2 = Map(2, {kA, kB, kC});
  v2.mutable_servers(2)->set_alive(false);

  // Without cancel_dead a death at the same endpoint is no move.
  {
    FakeTransport transport;
    Router router(&transport);
    ASSERT_OK(router.Install(v1));
    ASSERT_OK_AND_ASSIGN(std::vector<Router::Moved> moved, router.Install(v2));
    EXPECT_TRUE(moved.empty());
  }

  FakeTransport transport;
  Router router(&transport);
  ASSERT_OK(router.Install(v1, /*cancel_dead=*/true));
  const int c = transport.HandleOf(kC);
  ASSERT_OK_AND_ASSIGN(std::vector<Router::Moved> moved, router.Install(v2, /*cancel_dead=*/true));
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0].server, 2);
  EXPECT_EQ(moved[0].old_peer, c);
  EXPECT_EQ(moved[0].endpoint, kC);  // Unchanged.
  EXPECT_FALSE(moved[0].restarted);

  // Still dead in the next map: already reported.
  wire::ShardMap v3 = v2;
  v3.set_version(3);
  ASSERT_OK_AND_ASSIGN(moved, router.Install(v3, /*cancel_dead=*/true));
  EXPECT_TRUE(moved.empty());
  // Alive again: nothing to cancel.
  wire::ShardMap v4 = Map(4, {kA, kB, kC});
  ASSERT_OK_AND_ASSIGN(moved, router.Install(v4, /*cancel_dead=*/true));
  EXPECT_TRUE(moved.empty());
  // Restarted elsewhere and marked dead in one map: reported once, as a
  // restart (its in-flight requests are lost either way).
  const int b = transport.HandleOf(kB);
  wire::ShardMap v5 = Map(5, {kA, kB2, kC});
  v5.mutable_servers(1)->set_alive(false);
  ASSERT_OK_AND_ASSIGN(moved, router.Install(v5, /*cancel_dead=*/true));
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0].server, 1);
  EXPECT_EQ(moved[0].old_peer, b);
  EXPECT_EQ(moved[0].endpoint, kB2);
  EXPECT_TRUE(moved[0].restarted);
}

TEST(RouterTest, IsMovedNeedsWrongShardAndAMapInTheReply) {
  Message with_map;
  with_map.header.mutable_shard_map()->set_version(3);
  const Message without_map;
  EXPECT_TRUE(Router::IsMoved(WrongShardError("stale map"), with_map));
  EXPECT_FALSE(Router::IsMoved(WrongShardError("stale map"), without_map));
  EXPECT_FALSE(Router::IsMoved(UnavailableError("lost"), with_map));
  EXPECT_FALSE(Router::IsMoved(Status::OK(), with_map));
}

// Peer() and Install() from two threads: the peer handed out always belongs
// to the endpoint of the map handed out with it. No sleeps: the writer
// installs a fixed number of maps and the reader runs until it is done.
TEST(RouterTest, PeerAndMapStayConsistentWhileMapsAreInstalled) {
  FakeTransport transport;
  Router router(&transport);
  ASSERT_OK(router.Install(Map(1, {kA, kB, kC})));
  constexpr uint64_t kVersions = 300;
  std::atomic<bool> done{false};
  std::atomic<int> mismatches{0};
  std::thread reader([&] {
    uint64_t last_version = 0;
    while (!done.load()) {
      std::shared_ptr<const ShardMap> map;
      const int peer = router.Peer(1, &map);
      if (peer < 0 || map == nullptr || transport.EndpointOf(peer) != map->server_endpoint(1) ||
          map->version() < last_version) {
        mismatches.fetch_add(1);
        continue;
      }
      last_version = map->version();
    }
  });
  for (uint64_t v = 2; v <= kVersions; ++v) {
    // Server 1 moves at every version.
    const std::string ep = "tcp://127.0.0.1:" + std::to_string(3000 + v);
    StatusOr<std::vector<Router::Moved>> moved = router.Install(Map(v, {kA, ep, kC}));
    EXPECT_OK(moved);
    if (moved.ok()) {
      EXPECT_EQ(moved->size(), 1u);
    }
  }
  done.store(true);
  reader.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(router.map()->version(), kVersions);
}

// A server whose endpoint a newer map clears has no peer (Peer() returns -1)
// and is not among the servers with an endpoint: requests must not go on to
// its old address.
TEST(RouterTest, AServerThatLosesItsEndpointHasNoPeer) {
  FakeTransport transport;
  Router router(&transport);
  ASSERT_OK(router.Install(Map(1, {kA, kB, kC})));
  ASSERT_OK(router.Install(Map(2, {kA, "", kC})));
  std::string endpoint;
  EXPECT_EQ(router.Peer(1, &endpoint), -1);
  EXPECT_EQ(router.ServersWithEndpoint(), (std::vector<int>{0, 2}));
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
