// Tests of common/events: the JSON Lines event log (docs/events.md).
#include "common/events.h"

#include <cmath>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace relaxps {
namespace {

using test::MakeTempDir;
using test::ReadFile;
using test::RemoveTree;

std::vector<std::string> Lines(const std::string& path) {
  StatusOr<std::string> text = ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  std::vector<std::string> lines;
  size_t begin = 0;
  while (text.ok() && begin < text->size()) {
    size_t end = text->find('\n', begin);
    EXPECT_NE(end, std::string::npos) << "last line without its newline";
    if (end == std::string::npos) end = text->size();
    lines.push_back(text->substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

class EventLogTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override { RemoveTree(dir_); }
  std::string Path() const { return dir_ + "/events.jsonl"; }

  std::string dir_;
  FakeClock clock_{5000};
};

TEST_F(EventLogTest, WritesTheCommonFieldsThenTheKindsFieldsInOrder) {
  auto log = EventLog::Open({Path(), "server-2", &clock_, nullptr});
  ASSERT_TRUE(log.ok()) << log.status();
  (*log)->Emit("server_started", {{"server", 2}, {"restored", true}, {"seq", uint64_t{7}}});
  clock_.AdvanceMs(250);
  (*log)->set_process("server-3");
  (*log)->Emit("job_end");
  const std::vector<std::string> lines = Lines(Path());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "{\"v\":1,\"ts_unix_ms\":1700000005000,\"mono_ms\":5000,\"process\":\"server-2\","
            "\"kind\":\"server_started\",\"server\":2,\"restored\":true,\"seq\":7}");
  EXPECT_EQ(lines[1],
            "{\"v\":1,\"ts_unix_ms\":1700000005250,\"mono_ms\":5250,\"process\":\"server-3\","
            "\"kind\":\"job_end\"}");
  EXPECT_EQ((*log)->events_written(), 2u);
  EXPECT_EQ((*log)->write_errors(), 0u);
}

TEST_F(EventLogTest, EscapesStringsAndEncodesEveryValueType) {
  EXPECT_EQ(JsonQuote("a\"b\\c\nd\te\x01"), "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
  // Valid UTF-8 is kept; a stray byte, a truncated sequence and an overlong
  // form become U+FFFD (JSON text must be Unicode).
  EXPECT_EQ(JsonQuote("caf\xc3\xa9 \xe2\x82\xac"), "\"caf\xc3\xa9 \xe2\x82\xac\"");
  EXPECT_EQ(JsonQuote("x\xff y\xe2\x82 z\xc0\xaf"), "\"x\\ufffd y\\ufffd\\ufffd z\\ufffd\\ufffd\"");
  EXPECT_EQ(EventValue(0.1).json(), "0.1");
  EXPECT_EQ(EventValue(1234.5).json(), "1234.5");
  EXPECT_EQ(EventValue(std::nan("")).json(), "null");
  EXPECT_EQ(EventValue(-1.0 / 0.0).json(), "null");
  EXPECT_EQ(EventValue(int64_t{-9000000000}).json(), "-9000000000");
  EXPECT_EQ(EventValue(std::vector<int>{3, 1, 2}).json(), "[3,1,2]");
  EXPECT_EQ(EventValue(std::vector<int>{}).json(), "[]");
  EXPECT_EQ(EventValue(false).json(), "false");
  EXPECT_EQ(EventValue(std::string("s")).json(), "\"s\"");
}

// Two logs on one file stand for two processes: with O_APPEND and one
// write() per line, no line is torn or lost however the threads interleave.
TEST_F(EventLogTest, ConcurrentAppendsFromTwoLogsKeepEveryLineWhole) {
  auto a = EventLog::Open({Path(), "worker-0", &clock_, nullptr});
  auto b = EventLog::Open({Path(), "worker-1", &clock_, nullptr});
  ASSERT_TRUE(a.ok() && b.ok());
  constexpr int kThreads = 8, kEach = 400;
  const std::string padding(300, 'p');  // Long lines make torn writes likelier.
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    EventLog* log = (t % 2 == 0 ? *a : *b).get();
    threads.emplace_back([log, t, &padding] {
      for (int i = 0; i < kEach; ++i) log->Emit("progress", {{"thread", t}, {"i", i}, {"pad", padding}});
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<std::string> lines = Lines(Path());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kEach));
  std::set<std::string> seen;
  for (const std::string& line : lines) {
    ASSERT_EQ(line.front(), '{') << line;
    ASSERT_EQ(line.substr(line.size() - 2), "\"}") << line;
    const size_t t = line.find("\"thread\":");
    ASSERT_NE(t, std::string::npos) << line;
    const size_t end = line.find(",\"pad\"");
    seen.insert(line.substr(t, end - t));
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kEach));  // Each once.
}

TEST_F(EventLogTest, WriteErrorsAreCountedNotFatal) {
  // /dev/full fails every write with ENOSPC.
  auto log = EventLog::Open({"/dev/full", "coordinator", &clock_, nullptr});
  ASSERT_TRUE(log.ok()) << log.status();
  for (int i = 0; i < 3; ++i) (*log)->Emit("member_joined", {{"role", "worker"}});
  EXPECT_EQ((*log)->write_errors(), 3u);
  EXPECT_EQ((*log)->events_written(), 0u);
}

TEST_F(EventLogTest, AnUnopenablePathIsAnIOErrorNamingIt) {
  auto log = EventLog::Open({dir_ + "/missing/events.jsonl", "coordinator", &clock_, nullptr});
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), StatusCode::kIOError);
  EXPECT_NE(log.status().message().find("missing/events.jsonl"), std::string::npos);
}

TEST_F(EventLogTest, WithoutAFileEventsStillReachTheObserver) {
  std::vector<std::string> seen;
  EventLogOptions options{"", "coordinator", &clock_, nullptr};
  options.on_line = [&seen](const std::string& line) { seen.push_back(line); };
  auto log = EventLog::Open(options);
  ASSERT_TRUE(log.ok());
  (*log)->Emit("leader_elected", {{"term", 3}});
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NE(seen[0].find("\"kind\":\"leader_elected\",\"term\":3}"), std::string::npos) << seen[0];
  EmitEvent(nullptr, "ignored");  // A null log is a no-op.
  EmitEvent(log->get(), "job_end");
  EXPECT_EQ(seen.size(), 2u);
}

}  // namespace
}  // namespace relaxps
