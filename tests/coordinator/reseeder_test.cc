// Reseeder: rounds, copies, readiness and the SEED message, without network.
#include "coordinator/reseeder.h"

#include <gtest/gtest.h>

#include "common/table.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using test::FrameFloats;

// A dense table "w" of 8 keys on two servers: server 1 holds [4, 8).
wire::ShardMap TwoServerMap() {
  wire::ShardMap m;
  m.set_version(7);
  wire::TableShards* ts = m.add_tables();
  ts->mutable_table()->set_name("w");
  ts->mutable_table()->set_type(static_cast<int>(TableType::kDense));
  ts->mutable_table()->set_size(8);
  for (int server = 0; server < 2; ++server) {
    wire::DenseRange* r = ts->add_ranges();
    r->set_begin(4 * server);
    r->set_end(4 * server + 4);
    r->set_server(server);
  }
  return m;
}

Message Copy(int worker, int64_t clock, int64_t base, std::vector<float> x, std::vector<float> d,
             uint64_t version = 7) {
  Message msg;
  msg.header.set_type(wire::SEED_COPY);
  wire::SeedData* s = msg.header.mutable_seed_data();
  s->set_server(1);
  s->set_map_version(version);
  s->set_worker(worker);
  s->set_worker_clock(clock);
  wire::SeedRange* r = s->add_ranges();
  r->set_table("w");
  r->set_begin(4);
  r->set_end(8);
  r->set_has_copy(true);
  r->set_clock(base);
  r->set_local_steps(clock - base);
  msg.frames.push_back(Frame::Copy(x.data(), x.size() * sizeof(float)));
  msg.frames.push_back(Frame::Copy(d.data(), d.size() * sizeof(float)));
  return msg;
}

TEST(ReseederTest, WaitsForEveryLiveWorkerThenMergesTheirCopies) {
  Reseeder r(ReseedOptions{SeedRule::kFreshest, MergeRule::kAverage, 3000});
  r.Begin(1, 7, {0, 1}, /*now_ms=*/0);
  EXPECT_EQ(r.RequestsFor(0).size(), 1u);
  EXPECT_EQ(r.RequestsFor(2).size(), 0u);  // Not expected.
  ASSERT_OK(r.AddCopy(Copy(0, 12, 10, {1, 2, 3, 4}, {-1, -1, -1, -1})));
  EXPECT_EQ(r.RequestsFor(0).size(), 0u);  // Answered.
  EXPECT_TRUE(r.Ready({0, 1}, 100).empty());
  // A dead worker is not waited for.
  EXPECT_EQ(r.Ready({0}, 100), std::vector<int>({1}));
  ASSERT_OK(r.AddCopy(Copy(1, 11, 10, {3, 4, 5, 6}, {1, 2, 3, 4})));
  ASSERT_EQ(r.Ready({0, 1}, 100), std::vector<int>({1}));

  ReseedSummary summary;
  ASSERT_OK_AND_ASSIGN(Message seed, r.Finish(1, TwoServerMap(), &summary));
  EXPECT_FALSE(r.Active(1));
  EXPECT_EQ(seed.header.type(), wire::SEED);
  ASSERT_EQ(seed.header.seed_data().ranges_size(), 1);
  const wire::SeedRange& range = seed.header.seed_data().ranges(0);
  EXPECT_EQ(range.begin(), 4u);
  EXPECT_EQ(range.end(), 8u);
  EXPECT_EQ(range.clock(), 12);
  ASSERT_EQ(seed.frames.size(), 1u);
  // Freshest (worker 0) + average: x0 - d0/2 + d1/2.
  const float* p = seed.frames[0].as<float>();
  EXPECT_EQ(std::vector<float>(p, p + 4), (std::vector<float>{2, 3.5f, 5, 6.5f}));
  EXPECT_EQ(summary.source, "worker:0");
  EXPECT_EQ(summary.missing_workers, 0);
  EXPECT_NE(summary.ToString().find("contributions=0:2:0.5;1:1:0.5"), std::string::npos)
      << summary.ToString();
}

TEST(ReseederTest, TimesOutAndKeepsTheInitializerWithoutCopies) {
  Reseeder r(ReseedOptions{SeedRule::kFreshest, MergeRule::kStaleness, 3000});
  r.Begin(1, 7, {0}, 0);
  EXPECT_TRUE(r.Ready({0}, 2999).empty());
  ASSERT_EQ(r.Ready({0}, 3000), std::vector<int>({1}));
  ReseedSummary summary;
  ASSERT_OK_AND_ASSIGN(Message seed, r.Finish(1, TwoServerMap(), &summary));
  ASSERT_EQ(seed.header.seed_data().ranges_size(), 1);
  EXPECT_FALSE(seed.header.seed_data().ranges(0).has_copy());
  EXPECT_TRUE(seed.frames.empty());
  EXPECT_EQ(summary.source, "initializer");
  EXPECT_EQ(summary.missing_workers, 1);
}

TEST(ReseederTest, TheSeedsVelocityGoesWithTheMergedRange) {
  Reseeder r(ReseedOptions{});
  r.Begin(1, 7, {0, 1}, 0);
  const std::vector<float> v = {1, -2, 3, -4};
  Message fresh = Copy(0, 5, 1, {1, 2, 3, 4}, {0, 0, 0, 0});
  fresh.header.mutable_seed_data()->mutable_ranges(0)->set_slots(1);
  fresh.frames.push_back(Frame::Copy(v.data(), v.size() * sizeof(float)));
  ASSERT_OK(r.AddCopy(std::move(fresh)));
  ASSERT_OK(r.AddCopy(Copy(1, 3, 1, {5, 6, 7, 8}, {0, 0, 0, 0})));  // SGD locally: none.
  ReseedSummary summary;
  ASSERT_OK_AND_ASSIGN(Message seed, r.Finish(1, TwoServerMap(), &summary));
  ASSERT_EQ(seed.header.seed_data().ranges_size(), 1);
  EXPECT_EQ(seed.header.seed_data().ranges(0).slots(), 1u);
  ASSERT_EQ(seed.frames.size(), 2u);
  EXPECT_EQ(FrameFloats(seed.frames[1]), v);
  EXPECT_NE(summary.ToString().find("velocity_ranges=1"), std::string::npos) << summary.ToString();
}

TEST(ReseederTest, RefusesStaleOrMalformedCopies) {
  Reseeder r(ReseedOptions{});
  r.Begin(1, 7, {0}, 0);
  EXPECT_EQ(r.AddCopy(Copy(0, 3, 1, {1, 2, 3, 4}, {0, 0, 0, 0}, /*version=*/6)).code(),
            StatusCode::kFailedPrecondition);
  Message short_frame = Copy(0, 3, 1, {1, 2, 3}, {0, 0, 0, 0});
  EXPECT_EQ(r.AddCopy(std::move(short_frame)).code(), StatusCode::kInvalidArgument);
  Message no_body;
  EXPECT_EQ(r.AddCopy(std::move(no_body)).code(), StatusCode::kInvalidArgument);
  // A velocity announced but not sent, two slots, or one with a change-only copy.
  Message no_velocity = Copy(0, 3, 1, {1, 2, 3, 4}, {0, 0, 0, 0});
  no_velocity.header.mutable_seed_data()->mutable_ranges(0)->set_slots(1);
  EXPECT_EQ(r.AddCopy(std::move(no_velocity)).code(), StatusCode::kInvalidArgument);
  const std::vector<float> v = {1, 1, 1, 1};
  Message two = Copy(0, 3, 1, {1, 2, 3, 4}, {0, 0, 0, 0});
  two.header.mutable_seed_data()->mutable_ranges(0)->set_slots(2);
  two.frames.push_back(Frame::Copy(v.data(), 16));
  two.frames.push_back(Frame::Copy(v.data(), 16));
  EXPECT_EQ(r.AddCopy(std::move(two)).code(), StatusCode::kInvalidArgument);
  Message change_only = Copy(0, 3, 1, {1, 2, 3, 4}, {0, 0, 0, 0});
  change_only.header.mutable_seed_data()->mutable_ranges(0)->set_slots(1);
  change_only.header.mutable_seed_data()->mutable_ranges(0)->set_change_only(true);
  change_only.frames.push_back(Frame::Copy(v.data(), 16));
  EXPECT_EQ(r.AddCopy(std::move(change_only)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.RequestsFor(0).size(), 1u);  // Still expected.
}

}  // namespace
}  // namespace relaxps
