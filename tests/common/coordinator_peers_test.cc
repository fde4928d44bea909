// CoordinatorPeers (common/coordinator_peers.h): how a server or client
// follows a standby's redirect to the leader and learns the job's other
// coordinators from replies, without ZooKeeper. Over a FakeTransport: no
// sockets, no time.
#include "common/coordinator_peers.h"

#include <gtest/gtest.h>

#include "tests/client/fake_transport.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using client_internal::FakeTransport;

constexpr char kA[] = "tcp://127.0.0.1:1001";
constexpr char kB[] = "tcp://127.0.0.1:1002";
constexpr char kC[] = "tcp://127.0.0.1:1003";

Message Redirect(const std::string& leader, std::vector<std::string> listed = {}) {
  Message m;
  m.header.set_leader_endpoint(leader);
  for (const std::string& e : listed) m.header.add_coordinator_endpoints(e);
  return m;
}

TEST(CoordinatorPeersTest, FollowsARedirectToALeaderItDidNotKnow) {
  FakeTransport t;
  CoordinatorPeers peers;
  ASSERT_OK(peers.Connect(&t, kA));
  const int a = peers.current();
  EXPECT_TRUE(peers.Observe(a, UnavailableError("standby"), Redirect(kB)));
  EXPECT_EQ(peers.current_endpoint(), kB);
  EXPECT_EQ(peers.current(), t.HandleOf(kB));
  EXPECT_EQ(peers.size(), 2u);
}

TEST(CoordinatorPeersTest, ARedirectToItselfOrFromAPeerNoLongerCurrentDoesNotMove) {
  FakeTransport t;
  CoordinatorPeers peers;
  ASSERT_OK(peers.Connect(&t, std::string(kA) + "," + kB));
  const int a = peers.current();
  // Taking over: it names itself; the caller retries there.
  EXPECT_FALSE(peers.Observe(a, UnavailableError("taking over"), Redirect(kA)));
  EXPECT_EQ(peers.current_endpoint(), kA);
  peers.Rotate(a);
  ASSERT_EQ(peers.current_endpoint(), kB);
  // A late answer of A, after another call moved on, does not pull it back.
  peers.Observe(a, UnavailableError("standby"), Redirect(kC));
  EXPECT_EQ(peers.current_endpoint(), kB);
}

TEST(CoordinatorPeersTest, LearnsTheListedCoordinatorsAndTriesThemWhenTheLeaderIsSilent) {
  FakeTransport t;
  CoordinatorPeers peers;
  ASSERT_OK(peers.Connect(&t, kA));
  const int a = peers.current();
  // The leader's heartbeat reply lists every coordinator: nothing moves.
  EXPECT_FALSE(peers.Observe(a, Status::OK(), Redirect("", {kA, kB, kC})));
  EXPECT_EQ(peers.size(), 3u);
  EXPECT_EQ(peers.current_endpoint(), kA);
  // The leader dies: a silent call moves on to a coordinator it learned.
  t.SetDown(a, true);
  bool moved = false;
  EXPECT_FALSE(peers.CallSync(Message(), 100, &moved).ok());
  EXPECT_TRUE(moved);
  EXPECT_EQ(peers.current_endpoint(), kB);
  // That standby answers with the new leader: followed.
  EXPECT_TRUE(peers.Observe(peers.current(), UnavailableError("standby"), Redirect(kC)));
  EXPECT_EQ(peers.current_endpoint(), kC);
  ASSERT_OK(peers.CallSync(Message(), 100).status());
}

TEST(CoordinatorPeersTest, IgnoresImplausibleEndpointsAndBoundsWhatItLearns) {
  FakeTransport t;
  CoordinatorPeers peers;
  ASSERT_OK(peers.Connect(&t, kA));
  const int a = peers.current();
  EXPECT_FALSE(peers.Observe(a, UnavailableError("standby"), Redirect("http://evil:80")));
  EXPECT_FALSE(peers.Observe(a, Status::OK(), Redirect("", {"", "tcp://x:1,tcp://y:2",
                                                             std::string(300, 'a')})));
  EXPECT_EQ(peers.size(), 1u);
  std::vector<std::string> many;
  for (int i = 0; i < 200; ++i) many.push_back("tcp://127.0.0.1:" + std::to_string(2000 + i));
  peers.Observe(a, Status::OK(), Redirect("", many));
  EXPECT_EQ(peers.size(), CoordinatorPeers::kMaxCoordinators);
  EXPECT_EQ(peers.current_endpoint(), kA);
}

// relaxps-ctl's calls (CallFollowing): sent again to the leader a standby
// names, answered there; a redirect loop ends with the last answer.
TEST(CoordinatorPeersTest, CallFollowingAsksTheLeaderAStandbyNames) {
  FakeTransport t;
  CoordinatorPeers peers;
  ASSERT_OK(peers.Connect(&t, kA));
  const int a = peers.current();
  t.SetAnswer(a, UnavailableError("standby"), Redirect(kB).header);
  wire::Header status;
  status.set_type(wire::GET_STATUS);
  ASSERT_OK(peers.CallFollowing(status, 100));
  EXPECT_EQ(peers.current_endpoint(), kB);
  const auto calls = t.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].first, a);
  EXPECT_EQ(calls[1].first, t.HandleOf(kB));
  EXPECT_EQ(calls[1].second, wire::GET_STATUS);

  // B and C name each other: bounded, the last answer is returned.
  const int b = t.HandleOf(kB);
  t.SetAnswer(b, UnavailableError("standby"), Redirect(kC).header);
  peers.Follow(kC);
  t.SetAnswer(t.HandleOf(kC), UnavailableError("standby"), Redirect(kB).header);
  StatusOr<Message> r = peers.CallFollowing(status, 100);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_LE(t.calls().size(), 2u + CoordinatorPeers::kMaxCoordinators + 1);
}

}  // namespace
}  // namespace relaxps
