// relaxps::Client against an in-process cluster: its destructor returns
// promptly once the servers and the coordinator are gone (no deadline is
// waited out), and a request to a dead cluster fails instead of hanging.
#include "client/client.h"
#include "client/testing.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <map>
#include <thread>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/table.h"
#include "tests/allocation_counter.h"
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

// Client::Barrier(): the first worker to arrive returns only after the other
// one arrived (no timing in the assertion: the flag is set before the second
// worker's call).
TEST(ClientTest, BarrierReturnsOnlyOnceEveryLiveWorkerArrived) {
  InProcessCluster cluster(1, ConsistencyModel::kBsp);
  ClientOptions options;
  options.coordinator = cluster.coordinator();
  auto a = Client::Connect(options);
  auto b = Client::Connect(options);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int round = 0; round < 2; ++round) {
    std::atomic<bool> b_arrived{false};
    std::thread first([&] {
      Status s = (*a)->Barrier();
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_TRUE(b_arrived.load()) << "round " << round;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    b_arrived.store(true);
    ASSERT_TRUE((*b)->Barrier().ok());
    first.join();
  }
  // A late joiner is not held at the barriers already passed, and waits
  // with the others at the next one.
  auto c = Client::Connect(options);
  ASSERT_TRUE(c.ok());
  std::thread t1([&] { EXPECT_TRUE((*a)->Barrier().ok()); });
  std::thread t2([&] { EXPECT_TRUE((*b)->Barrier().ok()); });
  EXPECT_TRUE((*c)->Barrier().ok());
  t1.join();
  t2.join();
}

TEST(ClientTest, BarrierTimesOutNamingTheMissingWorker) {
  InProcessCluster cluster(1);
  ClientOptions options;
  options.coordinator = cluster.coordinator();
  auto a = Client::Connect(options);
  auto b = Client::Connect(options);
  ASSERT_TRUE(a.ok() && b.ok());
  options.barrier_timeout_ms = 300;
  auto c = Client::Connect(options);
  ASSERT_TRUE(c.ok());
  Status s = (*c)->Barrier();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  int x = (*a)->worker_id(), y = (*b)->worker_id();
  if (x > y) std::swap(x, y);
  const std::string missing = "worker(s) " + std::to_string(x) + ", " + std::to_string(y);
  EXPECT_NE(s.message().find(missing), std::string::npos) << s;
}

TEST(ClientTest, MalformedEndpointIsRefusedAtOnce) {
  for (const char* endpoint : {"", "127.0.0.1:5555", "tcp://127.0.0.1", "tcp://:5555",
                               "tcp://127.0.0.1:0", "tcp://127.0.0.1:70000", "udp://h:1"}) {
    ClientOptions options;
    options.coordinator = endpoint;
    const auto t0 = std::chrono::steady_clock::now();
    auto c = Client::Connect(options);
    ASSERT_FALSE(c.ok()) << endpoint;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << endpoint << ": " << c.status();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500)) << endpoint;
  }
}

TEST(ClientTest, CoordinatorLossIsVisibleAsUnhealthy) {
  auto cluster = std::make_unique<InProcessCluster>(1);
  ClientOptions options;
  options.coordinator = cluster->coordinator();
  options.heartbeat_ms = 50;
  auto c = Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->coordinator_healthy());
  cluster.reset();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*c)->coordinator_healthy() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE((*c)->coordinator_healthy());
}

TEST(ClientTest, JobInfoStalenessIsZeroUnderBsp) {
  InProcessCluster cluster(1, ConsistencyModel::kBsp, /*staleness=*/2);
  ClientOptions options;
  options.coordinator = cluster.coordinator();
  auto a = Client::Connect(options);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->job().staleness, 0);
}

TableOptions AdamTable(const std::string& name, uint64_t size) {
  TableOptions t;
  t.name = name;
  t.type = TableType::kDense;
  t.size = size;
  t.optimizer.name = "adam";
  t.optimizer.lr = 0.01f;
  t.init.seed = 5;
  t.init.segments.push_back(InitSegment{0, size, InitKind::kUniform, -1.0f, 1.0f});
  return t;
}

// A sparse table of `width` floats per row, rows starting at zero, trained
// by SGD with lr 1 (a row is minus the sum of the gradients pushed to it).
TableOptions SgdRowsTable(const std::string& name, size_t width) {
  TableOptions t;
  t.name = name;
  t.type = TableType::kSparse;
  t.row_width = width;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;
  return t;
}

// Options of a client on `cluster` that splits dense parts of more than 64
// floats into parts of 16 floats (part_bytes 0: never splits).
ClientOptions SplittingOptions(const InProcessCluster& cluster, int64_t part_bytes = 64) {
  ClientOptions options;
  options.coordinator = cluster.coordinator();
  options.dense_part_bytes = part_bytes;
  options.dense_split_bytes = 256;
  return options;
}

// A dense request split into many parts in flight (ClientOptions::
// dense_part_bytes) lands exactly as the whole request does: same keys, same
// replies at the same offsets, and one optimizer step per push (Adam's bias
// correction would differ if each part counted as a step).
TEST(ClientTest, SplitDenseRequestsMatchWholeOnesBitForBit) {
  InProcessCluster cluster(2);
  constexpr uint64_t kSize = 1000;
  auto whole = Client::Connect(SplittingOptions(cluster, /*part_bytes=*/0));
  auto split = Client::Connect(SplittingOptions(cluster));
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_TRUE((*whole)->CreateTable(AdamTable("whole", kSize)).ok());
  ASSERT_TRUE((*split)->CreateTable(AdamTable("split", kSize)).ok());
  for (int round = 0; round < 3; ++round) {
    FloatBuffer g(kSize);
    for (uint64_t i = 0; i < kSize; ++i) g[i] = 0.01f * static_cast<float>((i * 7 + round) % 13) - 0.05f;
    FloatBuffer a(kSize), b(kSize);
    ASSERT_TRUE((*whole)->PushPull("whole", 0, g, a).get().ok());
    ASSERT_TRUE((*split)->PushPull("split", 0, g, b).get().ok());
    for (uint64_t i = 0; i < kSize; ++i) ASSERT_EQ(a[i], b[i]) << "round " << round << " key " << i;
    // A push alone and a pull of an inner range (offsets inside parts).
    ASSERT_TRUE((*whole)->Push("whole", 100, g.Slice(100, 700)).get().ok());
    ASSERT_TRUE((*split)->Push("split", 100, g.Slice(100, 700)).get().ok());
    FloatBuffer c(900), d(900);
    ASSERT_TRUE((*whole)->Pull("whole", 37, c).get().ok());
    ASSERT_TRUE((*split)->Pull("split", 37, d).get().ok());
    for (uint64_t i = 0; i < 900; ++i) ASSERT_EQ(c[i], d[i]) << "round " << round << " key " << 37 + i;
  }
}

// Parts large enough to start on aligned keys (client/internal/
// dense_parts.h), over two servers and at an offset that is not: the
// request lands exactly as the whole one does.
TEST(ClientTest, AlignedSplitPartsAtAnOddOffsetMatchWholeRequests) {
  InProcessCluster cluster(2);
  constexpr uint64_t kSize = 40000, kOffset = 77, kCount = 39000;
  ClientOptions whole_options = SplittingOptions(cluster, /*part_bytes=*/0);
  ClientOptions split_options = SplittingOptions(cluster, /*part_bytes=*/8192);
  split_options.dense_split_bytes = 16384;  // 4096 keys: each server's ~19,500 split.
  auto whole = Client::Connect(whole_options);
  auto split = Client::Connect(split_options);
  ASSERT_TRUE(whole.ok() && split.ok());
  ASSERT_TRUE((*whole)->CreateTable(AdamTable("whole", kSize)).ok());
  ASSERT_TRUE((*split)->CreateTable(AdamTable("split", kSize)).ok());
  const uint64_t before = (*split)->stats().requests;
  for (int round = 0; round < 2; ++round) {
    FloatBuffer g(kCount);
    for (uint64_t i = 0; i < kCount; ++i) g[i] = 0.001f * static_cast<float>((i * 31 + round) % 17) - 0.008f;
    FloatBuffer a(kCount), b(kCount);
    ASSERT_TRUE((*whole)->PushPull("whole", kOffset, g, a).get().ok());
    ASSERT_TRUE((*split)->PushPull("split", kOffset, g, b).get().ok());
    for (uint64_t i = 0; i < kCount; ++i) ASSERT_EQ(a[i], b[i]) << "round " << round << " key " << kOffset + i;
  }
  // Split for real: more than one request per server and round.
  EXPECT_GT((*split)->stats().requests - before, 2u * 2u * 2u);
}

// A request is split into at most 8 parts per server, whatever
// dense_part_bytes asks for: a server queues at most --max_queued_replies
// replies per client and drops the rest, and 8 requests in flight of 32
// parts each hung the bench.
TEST(ClientTest, SplitRequestsUseAtMostEightPartsPerServer) {
  InProcessCluster cluster(1);
  constexpr uint64_t kSize = 1000;  // 63 parts of 64 bytes if uncapped.
  auto c = Client::Connect(SplittingOptions(cluster));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->CreateTable(AdamTable("w", kSize)).ok());
  FloatBuffer g(kSize), out(kSize);
  for (uint64_t i = 0; i < kSize; ++i) g[i] = 0.25f;
  const uint64_t before = (*c)->stats().requests;
  ASSERT_TRUE((*c)->PushPull("w", 0, g, out).get().ok());
  EXPECT_EQ((*c)->stats().requests - before, 8u);
}

// A large row pull is sent as several requests per server (ClientOptions::
// pull_rows_part), at most 8, and fills `out` exactly as the whole pull does:
// every row at its position, duplicates and all. With one server each part
// is a run of consecutive positions (filled in place), with two it is not.
// Row pushes are never split.
TEST(ClientTest, SplitRowPullsMatchWholeOnes) {
  for (int servers : {1, 2}) {
    SCOPED_TRACE(std::to_string(servers) + " servers");
    InProcessCluster cluster(servers);
    ClientOptions whole_options;
    whole_options.coordinator = cluster.coordinator();
    whole_options.pull_rows_part = 0;
    ClientOptions split_options = whole_options;
    split_options.pull_rows_part = 16;
    split_options.pull_rows_split = 24;
    auto whole = Client::Connect(whole_options);
    auto split = Client::Connect(split_options);
    ASSERT_TRUE(whole.ok() && split.ok());
    constexpr size_t kWidth = 3, kRows = 300;
    const TableOptions t = SgdRowsTable("rows", kWidth);
    for (auto* c : {whole->get(), split->get()}) {
      ASSERT_TRUE(c->CreateTable(t).ok());  // Each learns the map.
    }
    // Ids in no order, a third of them repeated.
    KeyBuffer ids(kRows);
    for (size_t i = 0; i < kRows; ++i) ids[i] = (i * 7919) % 200 + 1000000;
    FloatBuffer g(kRows * kWidth);
    for (size_t i = 0; i < kRows * kWidth; ++i) g[i] = static_cast<float>(i % 97) - 40.0f;
    const uint64_t pushes_before = (*split)->stats().requests;
    const Status pushed = (*split)->PushRows("rows", ids, g).get();
    ASSERT_TRUE(pushed.ok()) << pushed;
    EXPECT_EQ((*split)->stats().requests - pushes_before, static_cast<uint64_t>(servers));
    FloatBuffer a(kRows * kWidth), b(kRows * kWidth);
    ASSERT_TRUE((*whole)->PullRows("rows", ids, a).get().ok());
    const uint64_t before = (*split)->stats().requests;
    ASSERT_TRUE((*split)->PullRows("rows", ids, b).get().ok());
    EXPECT_EQ((*split)->stats().requests - before, 8u * servers);  // 19 parts if uncapped.
    // Rows start at zero and SGD with lr 1 subtracts every gradient pushed
    // to them (small integers: exact in any order).
    std::map<uint64_t, std::vector<float>> expected;
    for (size_t r = 0; r < kRows; ++r) {
      std::vector<float>& row = expected.try_emplace(ids[r], kWidth, 0.0f).first->second;
      for (size_t k = 0; k < kWidth; ++k) row[k] -= g[r * kWidth + k];
    }
    for (size_t r = 0; r < kRows; ++r) {
      for (size_t k = 0; k < kWidth; ++k) {
        ASSERT_EQ(a[r * kWidth + k], expected[ids[r]][k]) << "whole: row " << r << " float " << k;
        ASSERT_EQ(b[r * kWidth + k], expected[ids[r]][k]) << "split: row " << r << " float " << k;
      }
    }
    // Fewer rows than pull_rows_split per server: one request per server.
    KeyBuffer few = ids.Slice(0, 20);
    FloatBuffer c(20 * kWidth);
    const uint64_t small_before = (*split)->stats().requests;
    ASSERT_TRUE((*split)->PullRows("rows", few, c).get().ok());
    EXPECT_EQ((*split)->stats().requests - small_before, static_cast<uint64_t>(servers));
    for (size_t i = 0; i < 20 * kWidth; ++i) ASSERT_EQ(a[i], c[i]) << "float " << i;
  }
}

// Pushes `size` gradients of 0.5 but for `bad` in the last key, by Push and
// by PushPull: both must be refused as non-finite.
void ExpectNonFinitePushRefused(Client* c, const std::string& table, uint64_t size, float bad) {
  FloatBuffer g(size);
  for (uint64_t i = 0; i < size; ++i) g[i] = 0.5f;
  g[size - 1] = bad;
  FloatBuffer out(size);
  const Status push = c->Push(table, 0, g).get();
  EXPECT_EQ(push.code(), StatusCode::kInvalidArgument) << push;
  EXPECT_NE(push.message().find("non-finite"), std::string::npos) << push;
  const Status push_pull = c->PushPull(table, 0, g, out).get();
  EXPECT_EQ(push_pull.code(), StatusCode::kInvalidArgument) << push_pull;
}

// A push split into parts is refused whole when any value is not finite:
// NaN in the very last key leaves every key of the table as it was (each part
// alone would have been applied by its server).
TEST(ClientTest, SplitPushWithNanInTheLastPartChangesNothing) {
  InProcessCluster cluster(1);
  constexpr uint64_t kSize = 1000;
  auto c = Client::Connect(SplittingOptions(cluster));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->CreateTable(AdamTable("w", kSize)).ok());
  FloatBuffer before(kSize);
  ASSERT_TRUE((*c)->Pull("w", 0, before).get().ok());
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    ExpectNonFinitePushRefused(c->get(), "w", kSize, bad);
  }
  FloatBuffer after(kSize);
  ASSERT_TRUE((*c)->Pull("w", 0, after).get().ok());
  for (uint64_t i = 0; i < kSize; ++i) ASSERT_EQ(before[i], after[i]) << "key " << i;
}

// A push spread over two servers is refused whole when any value is not
// finite, dense or rows: NaN or Inf among the second server's keys (each
// server would have applied its own part) leaves both servers as they were.
TEST(ClientTest, PushOverTwoServersWithNanChangesNeitherServer) {
  InProcessCluster cluster(2);
  constexpr uint64_t kSize = 10000;  // 3 chunks of 4,096 keys: both servers; not split.
  ClientOptions options;
  options.coordinator = cluster.coordinator();
  auto c = Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->CreateTable(AdamTable("w", kSize)).ok());
  ASSERT_TRUE((*c)->CreateTable(SgdRowsTable("rows", 2)).ok());
  constexpr size_t kRows = 64;  // Both servers own some of them.
  KeyBuffer ids(kRows);
  for (size_t i = 0; i < kRows; ++i) ids[i] = 1000 + i;
  FloatBuffer before(kSize), rows_before(kRows * 2);
  ASSERT_TRUE((*c)->Pull("w", 0, before).get().ok());
  ASSERT_TRUE((*c)->PullRows("rows", ids, rows_before).get().ok());
  const uint64_t requests_before = (*c)->stats().requests;
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    ExpectNonFinitePushRefused(c->get(), "w", kSize, bad);
    FloatBuffer row_grads(kRows * 2);
    for (size_t i = 0; i < kRows * 2; ++i) row_grads[i] = 0.25f;
    row_grads[kRows * 2 - 1] = bad;
    const Status push_rows = (*c)->PushRows("rows", ids, row_grads).get();
    EXPECT_EQ(push_rows.code(), StatusCode::kInvalidArgument) << push_rows;
  }
  // Refused before any part was sent.
  EXPECT_EQ((*c)->stats().requests, requests_before);
  FloatBuffer after(kSize), rows_after(kRows * 2);
  ASSERT_TRUE((*c)->Pull("w", 0, after).get().ok());
  ASSERT_TRUE((*c)->PullRows("rows", ids, rows_after).get().ok());
  for (uint64_t i = 0; i < kSize; ++i) ASSERT_EQ(before[i], after[i]) << "key " << i;
  for (size_t i = 0; i < kRows * 2; ++i) ASSERT_EQ(rows_before[i], rows_after[i]) << "float " << i;
  // A finite push over both servers still goes through.
  FloatBuffer g(kSize);
  for (uint64_t i = 0; i < kSize; ++i) g[i] = 0.5f;
  ASSERT_TRUE((*c)->Push("w", 0, g).get().ok());
  ASSERT_TRUE((*c)->Pull("w", 0, after).get().ok());
  EXPECT_NE(before[0], after[0]);
  EXPECT_NE(before[kSize - 1], after[kSize - 1]);
}

// A dense request whose range is outside the table, or whose end
// offset + size wraps past 2^64, is refused with InvalidArgument before
// anything is sent, by every dense call. Under SSP the cache is on and holds
// a pull of the whole table: a wrapped range must not count as inside it
// (it would be answered from far outside the cached values), and a huge
// PullZeroCopy must not allocate its buffer first.
TEST(ClientTest, DenseRangesOutsideTheTableOrWrappingAreRefusedBeforeSending) {
  InProcessCluster cluster(1, ConsistencyModel::kSsp, /*staleness=*/2);
  constexpr uint64_t kSize = 100;
  ClientOptions options;
  options.coordinator = cluster.coordinator();
  auto c = Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->CreateTable(AdamTable("w", kSize)).ok());
  FloatBuffer before(kSize);
  ASSERT_TRUE((*c)->Pull("w", 0, before).get().ok());  // Fills the SSP cache.
  const uint64_t requests_before = (*c)->stats().requests;
  const uint64_t hits_before = (*c)->stats().cache_hits;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  constexpr float kUntouched = -7.0f;
  // (offset, size): wrapping near 2^64, just past the end, starting past it.
  const std::vector<std::pair<uint64_t, size_t>> ranges = {
      {kMax - 1, 4}, {kMax, 1}, {kSize - 1, 2}, {kSize, 1}, {kSize + 5, 3}};
  for (const auto& [offset, size] : ranges) {
    SCOPED_TRACE("offset " + std::to_string(offset) + ", " + std::to_string(size) + " keys");
    FloatBuffer out(size), grads(size);
    for (size_t i = 0; i < size; ++i) {
      out[i] = kUntouched;
      grads[i] = 0.5f;
    }
    const Status pull = (*c)->Pull("w", offset, out).get();
    EXPECT_EQ(pull.code(), StatusCode::kInvalidArgument) << pull;
    for (size_t i = 0; i < size; ++i) EXPECT_EQ(out[i], kUntouched) << "float " << i;
    const Status push = (*c)->Push("w", offset, grads).get();
    EXPECT_EQ(push.code(), StatusCode::kInvalidArgument) << push;
    const Status push_pull = (*c)->PushPull("w", offset, grads, out).get();
    EXPECT_EQ(push_pull.code(), StatusCode::kInvalidArgument) << push_pull;
    StatusOr<FloatBuffer> zero_copy = (*c)->PullZeroCopy("w", offset, size).get();
    EXPECT_EQ(zero_copy.status().code(), StatusCode::kInvalidArgument) << zero_copy.status();
    StatusOr<FloatBuffer> push_pull_zero_copy = (*c)->PushPullZeroCopy("w", offset, grads).get();
    EXPECT_EQ(push_pull_zero_copy.status().code(), StatusCode::kInvalidArgument)
        << push_pull_zero_copy.status();
  }
  // A size whose end wraps (no buffer of that size is ever allocated).
  StatusOr<FloatBuffer> huge = (*c)->PullZeroCopy("w", 1, static_cast<size_t>(kMax)).get();
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument) << huge.status();
  EXPECT_EQ((*c)->stats().requests, requests_before);
  EXPECT_EQ((*c)->stats().cache_hits, hits_before);
  // Nothing was pushed: the table is as it was.
  FloatBuffer after(kSize);
  ASSERT_TRUE((*c)->Pull("w", 0, after).get().ok());
  for (uint64_t i = 0; i < kSize; ++i) ASSERT_EQ(before[i], after[i]) << "key " << i;
}

// PullZeroCopy / PushPullZeroCopy: a request answered in one piece hands
// the received message over (counted in replies_handed_over) with exactly
// what Pull copies; one split into parts, or fp16 on the wire, is assembled
// into a new buffer with the same values. (Payloads are above ZeroMQ's 8 KiB
// receive batch, so the message has a buffer of its own, aligned; a smaller
// one may sit unaligned inside the batch and is then copied.)
TEST(ClientTest, ZeroCopyRequestsHandOverOnePieceAndAssembleParts) {
  InProcessCluster cluster(1);
  constexpr uint64_t kSize = 4000;
  auto whole = Client::Connect(SplittingOptions(cluster, /*part_bytes=*/0));
  auto split = Client::Connect(SplittingOptions(cluster));
  ClientOptions fp16_options = SplittingOptions(cluster, /*part_bytes=*/0);
  fp16_options.wire_dtype = "fp16";
  auto fp16 = Client::Connect(fp16_options);
  ASSERT_TRUE(whole.ok() && split.ok() && fp16.ok());
  for (auto* c : {whole->get(), split->get(), fp16->get()}) {
    ASSERT_TRUE(c->CreateTable(AdamTable("w", kSize)).ok());  // Each learns the map.
  }
  FloatBuffer g(kSize);
  for (uint64_t i = 0; i < kSize; ++i) g[i] = 0.01f * static_cast<float>(i % 11) - 0.05f;

  for (Client* c : {whole->get(), split->get()}) {
    const bool one_piece = c == whole->get();
    SCOPED_TRACE(one_piece ? "one piece" : "split into parts");
    const uint64_t handed_before = c->stats().replies_handed_over;
    StatusOr<FloatBuffer> pushed = c->PushPullZeroCopy("w", 0, g).get();
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    FloatBuffer now(kSize);
    ASSERT_TRUE(c->Pull("w", 0, now).get().ok());
    ASSERT_EQ(pushed->size(), kSize);
    ASSERT_EQ(0, std::memcmp(pushed->data(), now.data(), kSize * sizeof(float)));
    StatusOr<FloatBuffer> inner = c->PullZeroCopy("w", 100, 3000).get();  // Split too.
    ASSERT_TRUE(inner.ok()) << inner.status();
    ASSERT_EQ(0, std::memcmp(inner->data(), now.data() + 100, 3000 * sizeof(float)));
    (*inner)[0] = 42.0f;  // The caller's to write.
    EXPECT_EQ(c->stats().replies_handed_over - handed_before, one_piece ? 2u : 0u);
  }
  const uint64_t handed_before = (*fp16)->stats().replies_handed_over;
  FloatBuffer now(kSize);
  ASSERT_TRUE((*whole)->Pull("w", 0, now).get().ok());
  StatusOr<FloatBuffer> halves = (*fp16)->PullZeroCopy("w", 0, kSize).get();
  ASSERT_TRUE(halves.ok()) << halves.status();
  for (uint64_t i = 0; i < kSize; ++i) ASSERT_NEAR((*halves)[i], now[i], 2e-3f) << i;
  EXPECT_EQ((*fp16)->stats().replies_handed_over, handed_before);

  StatusOr<FloatBuffer> unknown = (*whole)->PullZeroCopy("nope", 0, 10).get();
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound) << unknown.status();
  StatusOr<FloatBuffer> past_end = (*whole)->PullZeroCopy("w", kSize - 1, 2).get();
  EXPECT_EQ(past_end.status().code(), StatusCode::kInvalidArgument) << past_end.status();
  StatusOr<FloatBuffer> nothing = (*whole)->PushPullZeroCopy("w", 0, FloatBuffer()).get();
  EXPECT_EQ(nothing.status().code(), StatusCode::kInvalidArgument) << nothing.status();
}

// A range spanning two servers comes back in two pieces (the client splits
// nothing itself), assembled in order.
TEST(ClientTest, ZeroCopyPullAcrossServersAssemblesThePieces) {
  InProcessCluster cluster(2);
  auto c = Client::Connect(SplittingOptions(cluster, /*part_bytes=*/0));
  ASSERT_TRUE(c.ok()) << c.status();
  constexpr uint64_t kSize = 3 * 4096 + 123;
  ASSERT_TRUE((*c)->CreateTable(AdamTable("w", kSize)).ok());
  FloatBuffer want(kSize);
  ASSERT_TRUE((*c)->Pull("w", 0, want).get().ok());
  StatusOr<FloatBuffer> got = (*c)->PullZeroCopy("w", 0, kSize).get();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(0, std::memcmp(got->data(), want.data(), kSize * sizeof(float)));
  EXPECT_EQ((*c)->stats().replies_handed_over, 0u);
}

// Issuing a dense push (routing it and sending it to its one server) makes
// few heap allocations on the calling thread: no strings naming the server
// (built only if the part fails) and no re-split vectors for a part too small
// to split. Each used to be a malloc and a free per request, about a fifth of
// those of a 4 KiB push. The fewest of 50 pushes is counted, so that a hash
// table growing now and then does not count.
// A worker that waits in Drive() gets its replies, and runs its callbacks,
// on its own thread; what it pushed and pulled is what a plain Pull reads.
// With fault injection on (a wrapped transport) Drive() declines at once and
// the callbacks stay on the I/O thread.
TEST(ClientTest, DriveRunsTheCallbacksOnTheWaitingThread) {
  InProcessCluster cluster(2);
  const ClientOptions options = SplittingOptions(cluster, /*part_bytes=*/0);
  auto c = Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->CreateTable(AdamTable("w", 1000)).ok());
  FloatBuffer g(1000), out(1000), now(1000);
  for (uint64_t i = 0; i < g.size(); ++i) g[i] = 0.001f * static_cast<float>(i % 7);
  const std::thread::id me = std::this_thread::get_id();
  int on_me = 0;
  for (int step = 0; step < 50; ++step) {
    std::atomic<bool> done{false};
    Status result;
    std::thread::id ran_on;
    (*c)->PushPull("w", 0, g, out, [&](const Status& s) {  // Spans both servers.
      result = s;
      ran_on = std::this_thread::get_id();
      done = true;
    });
    ASSERT_TRUE((*c)->Drive([&] { return done.load(); }, 10000)) << "step " << step;
    ASSERT_TRUE(result.ok()) << result;
    on_me += ran_on == me ? 1 : 0;
  }
  // Nearly all on a quiet machine (see the RpcClient test); none would mean
  // that Drive() reads nothing.
  EXPECT_GT(on_me, 0);
  EXPECT_GE((*c)->stats().replies_read_by_caller, static_cast<uint64_t>(on_me));
  ASSERT_TRUE((*c)->Pull("w", 0, now).get().ok());
  EXPECT_EQ(0, std::memcmp(out.data(), now.data(), now.size() * sizeof(float)));

  FaultOptions faults;
  faults.delay_ms = 1;
  auto f = ConnectWithFaults(options, faults);
  ASSERT_TRUE(f.ok()) << f.status();
  std::atomic<bool> pulled{false};
  (*f)->Pull("w", 0, now, [&](const Status&) { pulled = true; });
  EXPECT_FALSE((*f)->Drive([] { return false; }, 10000));
  while (!pulled.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(ClientTest, DensePushAllocatesLittleOnTheCallingThread) {
  InProcessCluster cluster(1);
  ClientOptions options;
  options.coordinator = cluster.coordinator();
  auto c = Client::Connect(options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->CreateTable(AdamTable("w", 1024)).ok());
  FloatBuffer g(1024);
  for (uint64_t i = 0; i < g.size(); ++i) g[i] = 0.25f;
  int64_t fewest = INT64_MAX;
  for (int i = 0; i < 50; ++i) {
    std::promise<Status> done;
    std::future<Status> pushed = done.get_future();
    Client::Callback callback = [&done](const Status& s) { done.set_value(s); };
    test::StartCountingAllocations();
    (*c)->Push("w", 0, g, std::move(callback));
    fewest = std::min(fewest, test::StopCountingAllocations());
    ASSERT_TRUE(pushed.get().ok());
  }
  // 24 before the strings and vectors went, 12 after (libstdc++ 12).
  EXPECT_LE(fewest, 14) << "heap allocations on the calling thread per dense push";
}

}  // namespace
}  // namespace relaxps
