// LocalRows: sparse rows served locally while their server is lost, the
// pending row changes in a SEED_COPY, and doubtful row pushes on rejoin.
#include "client/internal/local_rows.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace client_internal {
namespace {

constexpr size_t kWidth = 2;

Initializer Constant(float v) {
  Initializer init;
  init.segments.push_back(InitSegment{0, kWidth, InitKind::kConstant, v, 0.0f});
  return init;
}

KeyBuffer Ids(std::initializer_list<uint64_t> ids) {
  KeyBuffer k(ids.size());
  size_t i = 0;
  for (uint64_t id : ids) k[i++] = id;
  return k;
}

FloatBuffer Floats(std::initializer_list<float> v) {
  FloatBuffer f(v.size());
  size_t i = 0;
  for (float x : v) f[i++] = x;
  return f;
}

using test::FrameFloats;

TEST(LocalRowsTest, PulledRowsAndInitializerServeLocallyAndChangesGoToTheSeed) {
  LocalRows rows;
  const float pulled[2] = {4, 6};
  rows.Remember("s", kWidth, Ids({1}).data(), pulled, 1);
  float out[4];
  // Row 1 as pulled, row 2 from the initializer.
  rows.Serve(0, "s", Constant(1.0f), kWidth, 0.5f, Ids({1, 2}), FloatBuffer(), out);
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{4, 6, 1, 1}));
  rows.Serve(0, "s", Constant(1.0f), kWidth, 0.5f, Ids({1, 2}), Floats({2, 2, -2, 0}), nullptr);
  rows.Serve(0, "s", Constant(1.0f), kWidth, 0.5f, Ids({1, 2}), FloatBuffer(), out);
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{3, 5, 2, 1}));
  // A late pull reply does not overwrite a row changed locally.
  const float late[2] = {0, 0};
  rows.Remember("s", kWidth, Ids({1}).data(), late, 1);

  wire::SeedData data;
  std::vector<Frame> frames;
  rows.FillSeedCopy(0, /*base_clock=*/7, &data, &frames);
  ASSERT_EQ(data.rows_size(), 1);
  EXPECT_EQ(data.rows(0).count(), 2u);
  EXPECT_EQ(data.rows(0).base_clock(), 7);
  EXPECT_EQ(data.rows(0).local_steps(), 1);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(FrameFloats(frames[1]).size(), 4u);
  std::vector<DoubtfulRowPush> resend;
  EXPECT_TRUE(rows.Take(0, true, &resend).empty());  // Handed over with the copy.
  // Another server's rows are not part of it.
  rows.FillSeedCopy(1, 7, &data, &frames);
  EXPECT_EQ(data.rows_size(), 1);
}

TEST(LocalRowsTest, DoubtfulRowPushesAreResentToTheSameServer) {
  for (bool same_server : {true, false}) {
    LocalRows rows;
    rows.Serve(0, "s", Constant(1.0f), kWidth, 0.5f, Ids({3}), Floats({2, 4}), nullptr,
               /*doubtful_id=*/11);
    rows.Serve(0, "s", Constant(1.0f), kWidth, 0.5f, Ids({3}), Floats({-2, 0}), nullptr);
    std::vector<DoubtfulRowPush> resend;
    std::vector<RowsDelta> back = rows.Take(0, same_server, &resend);
    ASSERT_EQ(back.size(), 1u);
    ASSERT_EQ(back[0].ids.size(), 1u);
    const std::vector<float> delta(back[0].delta.data(), back[0].delta.data() + kWidth);
    if (same_server) {
      EXPECT_EQ(delta, (std::vector<float>{1, 0}));  // The second push only.
      ASSERT_EQ(resend.size(), 1u);
      EXPECT_EQ(resend[0].push_id, 11u);
      EXPECT_EQ(resend[0].ids[0], 3u);
    } else {
      EXPECT_EQ(delta, (std::vector<float>{0, -2}));  // Both.
      EXPECT_TRUE(resend.empty());
    }
  }
}

}  // namespace
}  // namespace client_internal
}  // namespace relaxps
