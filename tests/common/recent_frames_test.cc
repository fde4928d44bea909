// RecentFrames: which received frames it pins (the highest-addressed of each
// 64 MiB region), that a pinned frame's memory outlives its message until a
// frame above it arrives, and its limits. Frames are zmq messages over
// addresses the test chooses (inside one reserved, never touched 256 MiB
// range) with a free function that counts the releases, so every test sees
// exactly when a frame's memory would go back to malloc.
#include "common/recent_frames.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace relaxps {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kRegion = size_t{64} << 20;

// Pins alone: the tests of bursts below turn warming on.
RecentFrames::Options PinsOnly() {
  RecentFrames::Options o;
  o.warm_to_burst = false;
  return o;
}

// The frames freed, by address.
std::vector<const void*> g_freed;
void CountingFree(void* data, void* /*hint*/) { g_freed.push_back(data); }

class RecentFramesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_freed.clear();
    // Three whole regions: 4 reserved, from the first aligned address.
    reserved_ = mmap(nullptr, 4 * kRegion, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    ASSERT_NE(reserved_, MAP_FAILED);
    const uintptr_t p = reinterpret_cast<uintptr_t>(reserved_);
    base_ = reinterpret_cast<char*>((p + kRegion - 1) / kRegion * kRegion);
  }
  void TearDown() override { munmap(reserved_, 4 * kRegion); }

  // A frame as ZeroMQ delivers it, owning a message of `bytes` at `offset`
  // into the test's regions (never read: the range is not accessible).
  Frame At(size_t offset, size_t bytes) {
    return Frame(zmq::message_t(base_ + offset, bytes, &CountingFree, nullptr));
  }
  // A reply of one frame, held and then dropped as the client drops a reply
  // once its bytes are copied out.
  void ReceiveAndDrop(RecentFrames* recent, size_t offset, size_t bytes) {
    Message m;
    m.frames.push_back(At(offset, bytes));
    recent->Hold(&m);
  }
  const void* Addr(size_t offset) const { return base_ + offset; }

  void* reserved_ = nullptr;
  char* base_ = nullptr;
};

TEST_F(RecentFramesTest, PinsTheHighestFrameOfARegionUntilOneAboveArrives) {
  RecentFrames recent(PinsOnly());
  ReceiveAndDrop(&recent, 0, 2 * kMiB);
  ReceiveAndDrop(&recent, 4 * kMiB, 2 * kMiB);  // Above: the new pin.
  ASSERT_EQ(g_freed.size(), 1u);
  EXPECT_EQ(g_freed[0], Addr(0));
  // Frames below the pin (malloc reusing freed ones) are freed at once.
  ReceiveAndDrop(&recent, 0, 2 * kMiB);
  ReceiveAndDrop(&recent, 2 * kMiB, 2 * kMiB);
  ASSERT_EQ(g_freed.size(), 3u);
  EXPECT_EQ(g_freed[2], Addr(2 * kMiB));
  EXPECT_EQ(recent.held_frames(), 1u);
  EXPECT_EQ(recent.held_bytes(), 2 * kMiB);
  // The heap grew: the frame above replaces the pin, which is freed.
  ReceiveAndDrop(&recent, 6 * kMiB, kMiB);
  ASSERT_EQ(g_freed.size(), 4u);
  EXPECT_EQ(g_freed[3], Addr(4 * kMiB));
  EXPECT_EQ(recent.held_bytes(), kMiB);
  recent.Clear();
  ASSERT_EQ(g_freed.size(), 5u);
  EXPECT_EQ(g_freed[4], Addr(6 * kMiB));
  EXPECT_EQ(recent.held_frames(), 0u);
}

TEST_F(RecentFramesTest, APinnedFrameStaysValidInItsMessage) {
  RecentFrames recent;
  Message m;
  m.frames.push_back(At(kMiB, 128 * kKiB));
  recent.Hold(&m);
  // The reader copies out of the frame after Hold, as the data path does.
  EXPECT_EQ(m.frames[0].data(), Addr(kMiB));
  EXPECT_EQ(m.frames[0].size(), 128 * kKiB);
  // A frame shared on (a chain replica keeps a payload) shares the same bytes.
  Buffer<uint8_t> kept = m.frames[0].ShareBytes();
  EXPECT_EQ(static_cast<const void*>(kept.data()), Addr(kMiB));
  m = Message();
  recent.Clear();
  EXPECT_TRUE(g_freed.empty());  // `kept` still holds it.
  kept = Buffer<uint8_t>();
  ASSERT_EQ(g_freed.size(), 1u);
}

TEST_F(RecentFramesTest, SmallHugeAndOwnFramesAreNotHeld) {
  RecentFrames recent;  // Holds [64 KiB, 32 MiB), warming too.
  ReceiveAndDrop(&recent, 8 * kMiB, 64 * kKiB - 1);
  EXPECT_EQ(g_freed.size(), 1u);
  ReceiveAndDrop(&recent, 16 * kMiB, 32 * kMiB);
  EXPECT_EQ(g_freed.size(), 2u);
  // A frame built from the client's own buffer was not received.
  Message m;
  m.frames.push_back(Frame::Share(Buffer<float>(64 * kKiB)));
  recent.Hold(&m);
  EXPECT_EQ(recent.held_frames(), 0u);
  ReceiveAndDrop(&recent, 0, 64 * kKiB);
  EXPECT_EQ(recent.held_frames(), 1u);
  EXPECT_EQ(g_freed.size(), 2u);
}

TEST_F(RecentFramesTest, EachRegionHasItsOwnPin) {
  RecentFrames recent(PinsOnly());
  Message m;
  m.frames.push_back(At(0, 100));  // A small frame (an id list).
  m.frames.push_back(At(kRegion - 2 * kMiB, kMiB));
  m.frames.push_back(At(kRegion, kMiB));  // The next region: below, but its own.
  recent.Hold(&m);
  EXPECT_EQ(recent.held_frames(), 2u);
  m = Message();
  ASSERT_EQ(g_freed.size(), 1u);  // The small one only.
  EXPECT_EQ(g_freed[0], Addr(0));
}

TEST_F(RecentFramesTest, TheRegionsSeenLeastRecentlyAreDroppedBeyondTheLimits) {
  RecentFrames::Options o = PinsOnly();
  o.frames = 2;
  o.max_held_bytes = 8 * kMiB;
  RecentFrames recent(o);
  ReceiveAndDrop(&recent, 4 * kMiB, kMiB);     // Region 0.
  ReceiveAndDrop(&recent, kRegion, kMiB);      // Region 1.
  ReceiveAndDrop(&recent, 0, 64 * kKiB);       // Region 0 again (below its pin).
  ReceiveAndDrop(&recent, 2 * kRegion, kMiB);  // Region 2: region 1 goes.
  EXPECT_EQ(recent.held_frames(), 2u);
  ASSERT_EQ(g_freed.size(), 2u);
  EXPECT_EQ(g_freed[0], Addr(0));  // The 64 KiB frame below region 0's pin.
  EXPECT_EQ(g_freed[1], Addr(kRegion));
  // Region 0's heap grew by a frame larger than the byte cap: it replaces
  // region 0's pin, and region 2's goes.
  ReceiveAndDrop(&recent, 16 * kMiB, 9 * kMiB);
  EXPECT_EQ(recent.held_frames(), 1u);
  EXPECT_EQ(recent.held_bytes(), 9 * kMiB);
  ASSERT_EQ(g_freed.size(), 4u);
  EXPECT_EQ(g_freed[2], Addr(4 * kMiB));
  EXPECT_EQ(g_freed[3], Addr(2 * kRegion));
}

// The pile of frames a burst leaves alive at once (the reader descheduled)
// grows the heap frame by frame; a region keeps what it receives until it
// has its largest burst and a quarter (at least two frames) kept at once.
TEST_F(RecentFramesTest, ARegionKeepsFramesUntilItHoldsItsLargestBurstAndMore) {
  RecentFrames recent;
  // Four 1 MiB parts of one pull, each dropped once copied out: kept.
  for (int i = 0; i < 4; ++i) ReceiveAndDrop(&recent, i * kMiB, kMiB);
  EXPECT_TRUE(g_freed.empty());
  EXPECT_EQ(recent.warming_bytes(), 4 * kMiB);
  // The target is 4 + 2 MiB: the next burst goes on keeping.
  recent.EndBurst();
  EXPECT_TRUE(g_freed.empty());
  ReceiveAndDrop(&recent, 4 * kMiB, kMiB);
  ReceiveAndDrop(&recent, 5 * kMiB, kMiB);
  EXPECT_EQ(recent.warming_bytes(), 6 * kMiB);
  ReceiveAndDrop(&recent, 6 * kMiB, kMiB);  // Not kept: the pin.
  EXPECT_EQ(recent.warming_bytes(), 6 * kMiB);
  EXPECT_TRUE(g_freed.empty());
  recent.EndBurst();
  // All go back below the pin.
  EXPECT_EQ(g_freed.size(), 6u);
  EXPECT_EQ(recent.warming_bytes(), 0u);
  EXPECT_EQ(recent.held_frames(), 1u);
  EXPECT_EQ(recent.held_bytes(), kMiB);
  // Later bursts reuse those pages: nothing kept, each part freed as it is
  // dropped.
  for (int i = 0; i < 4; ++i) ReceiveAndDrop(&recent, i * kMiB, kMiB);
  recent.EndBurst();
  EXPECT_EQ(g_freed.size(), 10u);
  EXPECT_EQ(recent.warming_bytes(), 0u);
}

TEST_F(RecentFramesTest, KeptBytesAreBoundedAndWarmthIsPerRegion) {
  RecentFrames::Options o;
  o.max_held_bytes = 3 * kMiB;
  RecentFrames recent(o);
  // A burst that never ends (pipelined requests) keeps at most 3 MiB; the
  // pins it passed are freed.
  for (int i = 0; i < 8; ++i) ReceiveAndDrop(&recent, i * kMiB, kMiB);
  EXPECT_EQ(recent.warming_bytes(), 3 * kMiB);
  EXPECT_EQ(g_freed.size(), 4u);
  // The region cannot reach its target under the cap: it stops trying.
  recent.EndBurst();
  EXPECT_EQ(g_freed.size(), 7u);
  EXPECT_EQ(recent.warming_bytes(), 0u);
  ReceiveAndDrop(&recent, 0, kMiB);
  EXPECT_EQ(recent.warming_bytes(), 0u);
  EXPECT_EQ(g_freed.size(), 8u);
  // Another region starts cold: its first frame is kept.
  ReceiveAndDrop(&recent, kRegion, kMiB);
  EXPECT_EQ(recent.warming_bytes(), kMiB);
  recent.Clear();
  EXPECT_EQ(recent.warming_bytes(), 0u);
  EXPECT_EQ(recent.held_frames(), 0u);
  EXPECT_EQ(g_freed.size(), 10u);
}

}  // namespace
}  // namespace relaxps
