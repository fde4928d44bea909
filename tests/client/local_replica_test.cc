// LocalReplica: local SGD steps on a lost server's ranges, the accumulated
// change, SEED_COPY contents and the change handed back on rejoin; copies
// that follow a range move.
#include "client/internal/local_replica.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace client_internal {
namespace {

using test::FrameFloats;

// Issue 41: a split pull remembers its range in parts; together (in any
// order) they are a whole copy to train on. A split push served here is one
// local step for its range (the later parts say `continues`), and a doubtful
// later part is resent as one.
TEST(LocalReplicaTest, PartsOfASplitRequestMakeAWholeCopyAndOneStep) {
  LocalReplica r;
  const float a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, c[2] = {7, 8};
  r.Remember(1, "w", 0, 8, 3, b, 3, 10);  // Keys [3, 6), then [6, 8) and [0, 3).
  r.Remember(1, "w", 0, 8, 6, c, 2, 10);
  ASSERT_TRUE(r.GoLocal(1, "tcp://a", /*stalled=*/true));
  float out[8];
  // Not whole yet: nothing to train on.
  EXPECT_EQ(r.Serve(1, "w", 0, {0.5f}, 0, nullptr, out, 8).status().code(),
            StatusCode::kUnavailable);
  std::vector<DoubtfulPush> resend;
  r.Rejoin(1, true, &resend);
  r.Remember(1, "w", 0, 8, 0, a, 3, 10);
  ASSERT_TRUE(r.GoLocal(1, "tcp://a", true));
  ASSERT_OK(r.Serve(1, "w", 0, {0.5f}, 0, nullptr, out, 8).status());
  EXPECT_EQ(std::vector<float>(out, out + 8), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  // One push in two parts, the second doubtful: one step.
  const float g[4] = {2, 2, 2, 2};
  ASSERT_OK(r.Serve(1, "w", 0, {0.5f}, 0, g, nullptr, 4).status());
  FloatBuffer doubtful = FloatBuffer::CopyOf(g, 4);
  ASSERT_OK(r.Serve(1, "w", 0, {0.5f}, 4, g, nullptr, 4, /*doubtful_id=*/9, doubtful,
                    /*continues=*/true)
                .status());
  wire::SeedData data;
  std::vector<Frame> frames;
  r.FillSeedCopy(1, &data, &frames);
  ASSERT_EQ(data.ranges_size(), 1);
  EXPECT_EQ(data.ranges(0).local_steps(), 1);
  ASSERT_OK(r.Serve(1, "w", 0, {0.5f}, 4, g, nullptr, 4, 9, doubtful, /*continues=*/true)
                .status());
  resend.clear();
  r.Rejoin(1, /*same_server=*/true, &resend);
  ASSERT_EQ(resend.size(), 1u);
  EXPECT_TRUE(resend[0].continues);
  EXPECT_EQ(resend[0].begin, 4u);
}

TEST(LocalReplicaTest, TrainsLocallyAndReportsCopyAndChange) {
  LocalReplica r;
  const float pulled[4] = {8, 8, 8, 8};
  r.Remember(/*server=*/1, "w", 4, 8, 4, pulled, 4, /*params_clock=*/10);
  const float g[2] = {2, -4};
  float out[4];
  // Nothing is local before the server is lost; no copy of an unknown range.
  EXPECT_FALSE(r.IsLocal(1));
  EXPECT_EQ(r.Serve(1, "w", 0, {0.5f}, 0, g, out, 2).status().code(), StatusCode::kUnavailable);

  ASSERT_TRUE(r.GoLocal(1, "tcp://a", /*stalled=*/true));
  EXPECT_FALSE(r.GoLocal(1, "tcp://a", true));  // Already local.
  std::string at;
  bool stalled = false;
  ASSERT_TRUE(r.LostAt(1, &at, &stalled));
  EXPECT_EQ(at, "tcp://a");
  EXPECT_TRUE(stalled);
  // A push to keys [5, 7) then a pull of the whole range, both local.
  ASSERT_OK_AND_ASSIGN(int64_t c, r.Serve(1, "w", 4, {0.5f}, 5, g, nullptr, 2));
  EXPECT_EQ(c, 10);
  ASSERT_OK(r.Serve(1, "w", 4, {0.5f}, 4, nullptr, out, 4).status());
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{8, 7, 10, 8}));
  r.CountLocalStep();  // Once per request, by the client.
  EXPECT_EQ(r.local_steps(), 1u);
  // A pull reply arriving late for a local server does not overwrite the copy.
  const float late[4] = {0, 0, 0, 0};
  r.Remember(1, "w", 4, 8, 4, late, 4, 11);

  wire::SeedData data;
  std::vector<Frame> frames;
  r.FillSeedCopy(1, &data, &frames);
  ASSERT_EQ(data.ranges_size(), 1);
  EXPECT_TRUE(data.ranges(0).has_copy());
  EXPECT_EQ(data.ranges(0).clock(), 10);
  EXPECT_EQ(data.ranges(0).local_steps(), 1);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(FrameFloats(frames[0]), (std::vector<float>{8, 7, 10, 8}));
  EXPECT_EQ(FrameFloats(frames[1]), (std::vector<float>{0, -1, 2, 0}));

  // One more local step after the copy: that change goes back on rejoin.
  ASSERT_OK(r.Serve(1, "w", 4, {0.5f}, 4, g, nullptr, 2).status());
  std::vector<DoubtfulPush> resend;
  std::vector<RangeDelta> back = r.Rejoin(1, /*same_server=*/false, &resend);
  EXPECT_TRUE(resend.empty());
  EXPECT_FALSE(r.IsLocal(1));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].begin, 4u);
  EXPECT_EQ(back[0].local_steps, 1);
  EXPECT_EQ(std::vector<float>(back[0].delta.data(), back[0].delta.data() + 4),
            (std::vector<float>{-1, 2, 0, 0}));
  EXPECT_TRUE(r.Rejoin(1, false, &resend).empty());  // Not local any more.
}

TEST(LocalReplicaTest, MomentumStepsKeepAVelocityThatGoesWithTheSeedCopy) {
  LocalReplica r;
  const float pulled[2] = {8, 8};
  r.Remember(0, "w", 0, 2, 0, pulled, 2, 10);
  ASSERT_TRUE(r.GoLocal(0, "tcp://a", false));
  const LocalStep step{0.5f, 0.5f};
  const float g1[2] = {2, -4}, g2[2] = {4, 0};
  ASSERT_OK(r.Serve(0, "w", 0, step, 0, g1, nullptr, 2).status());  // v = {2, -4}
  ASSERT_OK(r.Serve(0, "w", 0, step, 0, g2, nullptr, 2).status());  // v = {5, -2}
  float out[2];
  ASSERT_OK(r.Serve(0, "w", 0, step, 0, nullptr, out, 2).status());
  // w = 8 - 0.5 * (2 + 5), 8 - 0.5 * (-4 - 2).
  EXPECT_EQ(std::vector<float>(out, out + 2), (std::vector<float>{4.5f, 11}));
  wire::SeedData data;
  std::vector<Frame> frames;
  r.FillSeedCopy(0, &data, &frames);
  ASSERT_EQ(data.ranges_size(), 1);
  EXPECT_EQ(data.ranges(0).slots(), 1u);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(FrameFloats(frames[1]), (std::vector<float>{-3.5f, 3}));
  EXPECT_EQ(FrameFloats(frames[2]), (std::vector<float>{5, -2}));
  // Back on a server: the next outage starts from a zero velocity again.
  std::vector<DoubtfulPush> resend;
  r.Rejoin(0, false, &resend);
  const float fresh[2] = {0, 0};
  r.Remember(0, "w", 0, 2, 0, fresh, 2, 20);
  ASSERT_TRUE(r.GoLocal(0, "tcp://a", false));
  ASSERT_OK(r.Serve(0, "w", 0, step, 0, g2, nullptr, 2).status());
  ASSERT_OK(r.Serve(0, "w", 0, step, 0, nullptr, out, 2).status());
  EXPECT_EQ(std::vector<float>(out, out + 2), (std::vector<float>{-2, 0}));
  // Plain SGD (momentum 0) keeps no velocity and sends no slot.
  LocalReplica sgd;
  sgd.Remember(0, "w", 0, 2, 0, pulled, 2, 10);
  ASSERT_TRUE(sgd.GoLocal(0, "tcp://a", false));
  ASSERT_OK(sgd.Serve(0, "w", 0, {0.5f}, 0, g1, nullptr, 2).status());
  wire::SeedData plain;
  frames.clear();
  sgd.FillSeedCopy(0, &plain, &frames);
  EXPECT_EQ(plain.ranges(0).slots(), 0u);
  EXPECT_EQ(frames.size(), 2u);
}

TEST(LocalReplicaTest, DoubtfulPushesAreResentToTheSameServerAndMergedForANewOne) {
  LocalReplica r;
  const float pulled[2] = {8, 8};
  FloatBuffer g1(2), g2(2);
  g1[0] = 2;
  g1[1] = 4;
  g2[0] = -2;
  g2[1] = 0;
  for (bool same_server : {true, false}) {
    r.Remember(0, "w", 0, 2, 0, pulled, 2, 5);
    ASSERT_TRUE(r.GoLocal(0, "tcp://c", /*stalled=*/true));
    // The push that timed out (sent with key 7), then one served locally only.
    ASSERT_OK(r.Serve(0, "w", 0, {0.5f}, 0, g1.data(), nullptr, 2, /*doubtful_id=*/7, g1).status());
    ASSERT_OK(r.Serve(0, "w", 0, {0.5f}, 0, g2.data(), nullptr, 2).status());
    std::vector<DoubtfulPush> resend;
    std::vector<RangeDelta> back = r.Rejoin(0, same_server, &resend);
    ASSERT_EQ(back.size(), 1u);
    const std::vector<float> delta(back[0].delta.data(), back[0].delta.data() + 2);
    if (same_server) {
      // The server may have applied the first push: it is resent with its
      // key (applied at most once more), and the delta holds only the second.
      EXPECT_EQ(delta, (std::vector<float>{1, 0}));
      ASSERT_EQ(resend.size(), 1u);
      EXPECT_EQ(resend[0].push_id, 7u);
      EXPECT_EQ(resend[0].grads[1], 4.0f);
    } else {
      // A new server never saw it: both changes are handed back.
      EXPECT_EQ(delta, (std::vector<float>{0, -2}));
      EXPECT_TRUE(resend.empty());
    }
  }
  // A re-seed copy carries the doubtful change too.
  r.Remember(0, "w", 0, 2, 0, pulled, 2, 6);
  ASSERT_TRUE(r.GoLocal(0, "tcp://c", true));
  ASSERT_OK(r.Serve(0, "w", 0, {0.5f}, 0, g1.data(), nullptr, 2, 8, g1).status());
  wire::SeedData data;
  std::vector<Frame> frames;
  r.FillSeedCopy(0, &data, &frames);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(FrameFloats(frames[1]), (std::vector<float>{-1, -2}));
  std::vector<DoubtfulPush> resend;
  EXPECT_TRUE(r.Rejoin(0, true, &resend).empty());  // Nothing since the copy.
  EXPECT_TRUE(resend.empty());
}

TEST(LocalReplicaTest, ReassignMovesARangeToItsLastReplica) {
  LocalReplica r;
  const float pulled[2] = {1, 2};
  r.Remember(0, "w", 0, 2, 0, pulled, 2, 3);  // Pulled from head 0.
  ASSERT_TRUE(r.GoLocal(1, "tcp://d", false));
  float out[2];
  EXPECT_FALSE(r.Serve(1, "w", 0, {1.0f}, 0, nullptr, out, 2).ok());
  r.Reassign("w", 0, 1);  // Hybrid: server 1 held it last.
  ASSERT_OK(r.Serve(1, "w", 0, {1.0f}, 0, nullptr, out, 2).status());
  EXPECT_EQ(out[1], 2.0f);
  r.Reassign("x", 0, 1);  // Unknown range: no-op.
}

TEST(LocalReplicaTest, RangesNeverPulledWholeHaveNoCopy) {
  LocalReplica r;
  const float part[2] = {1, 2};
  r.Remember(0, "w", 0, 4, 0, part, 2, 3);  // Half the range only.
  ASSERT_TRUE(r.GoLocal(0, "tcp://b", false));
  float out[2];
  EXPECT_EQ(r.Serve(0, "w", 0, {1.0f}, 0, nullptr, out, 2).status().code(),
            StatusCode::kUnavailable);
  wire::SeedData data;
  std::vector<Frame> frames;
  r.FillSeedCopy(0, &data, &frames);
  ASSERT_EQ(data.ranges_size(), 1);
  EXPECT_FALSE(data.ranges(0).has_copy());
  EXPECT_TRUE(frames.empty());
}

// Table "w" of 12 keys cut at `cut` (0: one range) between servers 0 and
// `tail_server`.
ShardMap CutMap(uint64_t cut, int tail_server) {
  wire::ShardMap m;
  m.set_version(1);
  test::AddLiveServers(&m, 3);
  wire::TableShards* ts = m.add_tables();
  ts->mutable_table()->set_name("w");
  ts->mutable_table()->set_size(12);
  wire::DenseRange* head = ts->add_ranges();
  head->set_begin(0);
  head->set_end(cut == 0 ? 12 : cut);
  head->set_server(0);
  if (cut != 0) {
    wire::DenseRange* tail = ts->add_ranges();
    tail->set_begin(cut);
    tail->set_end(12);
    tail->set_server(tail_server);
  }
  auto map = ShardMap::FromProto(m);
  CHECK(map.ok()) << map.status();
  return std::move(map).value();
}

TEST(LocalReplicaTest, ACopyFollowsAMoveOfItsRangesTailAndTrainsItLocally) {
  LocalReplica r;
  std::vector<float> pulled(12);
  for (int i = 0; i < 12; ++i) pulled[i] = static_cast<float>(i);
  r.Remember(0, "w", 0, 12, 0, pulled.data(), 12, /*params_clock=*/7);
  EXPECT_EQ(r.FollowMoves(CutMap(0, 0)), 0);  // The same ranges: nothing changes.
  EXPECT_EQ(r.FollowMoves(CutMap(8, 1)), 1);  // [8, 12) moved to server 1.
  EXPECT_EQ(r.FollowMoves(CutMap(8, 1)), 0);
  // Server 1 is lost: its piece of the copy trains locally, server 0's does not.
  ASSERT_TRUE(r.GoLocal(1, "tcp://b", false));
  const float g[2] = {2, 2};
  ASSERT_OK_AND_ASSIGN(int64_t c, r.Serve(1, "w", 8, {0.5f}, 10, g, nullptr, 2));
  EXPECT_EQ(c, 7);  // The copy's clock goes with the piece.
  float out[4];
  ASSERT_OK(r.Serve(1, "w", 8, {0.5f}, 8, nullptr, out, 4).status());
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{8, 9, 9, 10}));
  EXPECT_EQ(r.Serve(1, "w", 0, {0.5f}, 0, g, nullptr, 2).status().code(),
            StatusCode::kUnavailable);
  wire::SeedData data;
  std::vector<Frame> frames;
  r.FillSeedCopy(1, &data, &frames);
  ASSERT_EQ(data.ranges_size(), 1);
  EXPECT_EQ(data.ranges(0).begin(), 8u);
  EXPECT_EQ(data.ranges(0).end(), 12u);
  EXPECT_EQ(FrameFloats(frames[0]), (std::vector<float>{8, 9, 9, 10}));
  // A local server's copy keeps its server whatever the map says (its
  // change belongs to its re-seed).
  EXPECT_EQ(r.FollowMoves(CutMap(8, 0)), 0);
  EXPECT_TRUE(r.Serve(1, "w", 8, {0.5f}, 8, nullptr, out, 4).ok());
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
