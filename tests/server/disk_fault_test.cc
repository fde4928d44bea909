// Disk faults that programs can see (issue 40 point 4): the DurabilityMonitor
// alone (FakeClock, events captured in memory, glog lines counted), then a
// real server on the FileSystem seam (FaultInjectingFileSystem): the
// disk_error / durable_again events, SERVER_STATS durable=false since <time>,
// --on_disk_error=stop, and a restore that uses the newest complete
// checkpoint, skipping a damaged newer one, and says which.
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "common/rpc_client.h"
#include "common/wire.h"
#include "coordinator/coordinator.h"
#include "server/internal/durability_monitor.h"
#include "server/server.h"
#include "storage/checkpoint.h"
#include "storage/fault_injecting_fs.h"
#include "tests/coordinator/running_coordinator.h"
#include "tests/operator_session.h"
#include "tests/security/attack_util.h"
#include "tests/storage/storage_test_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using server_internal::DurabilityMonitor;
using server_internal::DurableWrite;

// Events as JSON lines, kept in memory.
struct CapturedEvents {
  std::shared_ptr<EventLog> log;
  std::mutex mu;
  std::vector<std::string> lines;

  explicit CapturedEvents(const Clock* clock = nullptr) {
    EventLogOptions o;
    o.process = "server-3";
    o.clock = clock;
    o.on_line = [this](const std::string& line) {
      std::lock_guard<std::mutex> l(mu);
      lines.push_back(line);
    };
    log = *EventLog::Open(o);
  }
  std::vector<std::string> OfKind(const std::string& kind) {
    std::lock_guard<std::mutex> l(mu);
    std::vector<std::string> out;
    for (const std::string& line : lines) {
      if (line.find("\"kind\":\"" + kind + "\"") != std::string::npos) out.push_back(line);
    }
    return out;
  }
};

// Counts glog lines that contain `needle`.
class LineCounter : public google::LogSink {
 public:
  explicit LineCounter(std::string needle) : needle_(std::move(needle)) {
    google::AddLogSink(this);
  }
  ~LineCounter() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t message_len) override {
    if (std::string(message, message_len).find(needle_) != std::string::npos) ++count_;
  }
  int count() const { return count_; }

 private:
  const std::string needle_;
  std::atomic<int> count_{0};
};

TEST(OnDiskErrorTest, ParsesBothValuesAndRefusesOthers) {
  EXPECT_EQ(*ParseOnDiskError("stop"), OnDiskError::kStop);
  EXPECT_EQ(*ParseOnDiskError("continue"), OnDiskError::kContinue);
  StatusOr<OnDiskError> bad = ParseOnDiskError("ignore");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("stop or continue"), std::string::npos);
}

TEST(DurabilityMonitorTest, OneEventPerOutageThrottledLinesAndDurableAgain) {
  FakeClock clock;
  CapturedEvents events(&clock);
  DurabilityMonitor::Options o;
  o.events = events.log.get();
  o.clock = &clock;
  o.log_period_ms = 10000;
  DurabilityMonitor m(o);
  m.set_server_id(3);
  LineCounter lines("flush write failed");
  wire::ServerStats stats;
  m.FillStats(&stats);
  EXPECT_TRUE(stats.durable());
  EXPECT_EQ(stats.not_durable_since_unix_ms(), 0);

  clock.AdvanceMs(500);
  const int64_t since = clock.NowUnixMs();
  const Status full = IOError("flush at clock 10: IO error: No space left on device");
  // A full disk fails every flush: 100 failures, 1 s apart.
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(m.OnFailure(DurableWrite::kFlush, full).ok());  // kContinue.
    clock.AdvanceMs(1000);
  }
  EXPECT_FALSE(m.durable());
  EXPECT_EQ(m.not_durable_since_unix_ms(), since);
  EXPECT_EQ(m.failures(), 100u);
  EXPECT_EQ(m.failures(DurableWrite::kFlush), 100u);
  // One line per 10 s of failures, not one per failure.
  EXPECT_EQ(lines.count(), 10);
  std::vector<std::string> errors = events.OfKind("disk_error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("\"write\":\"flush\""), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("\"since_unix_ms\":" + std::to_string(since)), std::string::npos)
      << errors[0];
  EXPECT_NE(errors[0].find("\"action\":\"continue\""), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("No space left on device"), std::string::npos) << errors[0];
  m.FillStats(&stats);
  EXPECT_FALSE(stats.durable());
  EXPECT_EQ(stats.not_durable_since_unix_ms(), since);
  EXPECT_EQ(stats.disk_errors(), 100u);
  EXPECT_NE(stats.last_disk_error().find("flush: "), std::string::npos);

  // A checkpoint fails too, then the flush recovers: still not durable (the
  // checkpoint's latest write failed), and the outage keeps its start.
  EXPECT_TRUE(m.OnFailure(DurableWrite::kCheckpoint, IOError("checkpoint: EIO")).ok());
  EXPECT_EQ(events.OfKind("disk_error").size(), 2u);
  m.OnSuccess(DurableWrite::kFlush);
  EXPECT_FALSE(m.durable());
  EXPECT_EQ(m.not_durable_since_unix_ms(), since);
  EXPECT_TRUE(events.OfKind("durable_again").empty());
  m.OnSuccess(DurableWrite::kWal);  // Never failed: changes nothing.
  EXPECT_FALSE(m.durable());
  m.OnSuccess(DurableWrite::kCheckpoint);
  EXPECT_TRUE(m.durable());
  EXPECT_EQ(m.not_durable_since_unix_ms(), 0);
  std::vector<std::string> again = events.OfKind("durable_again");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_NE(again[0].find("\"not_durable_ms\":100000"), std::string::npos) << again[0];
  EXPECT_NE(again[0].find("\"failures\":101"), std::string::npos) << again[0];

  // A new outage is a new event with a new start.
  clock.AdvanceMs(5000);
  EXPECT_TRUE(m.OnFailure(DurableWrite::kWal, IOError("sync")).ok());
  EXPECT_EQ(events.OfKind("disk_error").size(), 3u);
  EXPECT_EQ(m.not_durable_since_unix_ms(), clock.NowUnixMs());
}

TEST(DurabilityMonitorTest, StopModeReturnsTheErrorToStopWith) {
  FakeClock clock;
  CapturedEvents events(&clock);
  DurabilityMonitor::Options o;
  o.on_error = OnDiskError::kStop;
  o.events = events.log.get();
  o.clock = &clock;
  DurabilityMonitor m(o);
  m.set_server_id(1);
  Status stop = m.OnFailure(DurableWrite::kWal, IOError("WAL sync: No space left on device"));
  EXPECT_EQ(stop.code(), StatusCode::kAborted);
  EXPECT_NE(stop.message().find("wal write failed (--on_disk_error=stop)"), std::string::npos)
      << stop;
  EXPECT_NE(stop.message().find("No space left on device"), std::string::npos) << stop;
  std::vector<std::string> errors = events.OfKind("disk_error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("\"action\":\"stop\""), std::string::npos) << errors[0];
}

// ---- A real server on the FileSystem seam ---------------------------------

TableOptions DenseTable(const std::string& name, uint64_t size) {
  TableOptions t;
  t.name = name;
  t.type = TableType::kDense;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 0.1f;
  t.size = size;
  t.init.seed = 7;
  t.init.segments.push_back(InitSegment{0, size, InitKind::kUniform, -1.0f, 1.0f});
  return t;
}


Status TriggerCheckpoint(const std::string& coordinator) {
  return test::TriggerCheckpointAsOperator(coordinator, 60000).status();
}

// The job's coordinator, one server, on a thread of the test.
CoordinatorOptions OneServer() {
  CoordinatorOptions co;
  co.num_servers = 1;
  return co;
}

// --on_disk_error=continue: a checkpoint on a full disk fails, the server
// trains on and says so (event, stats); a later good checkpoint ends the
// outage (durable_again). A restore then uses the newest complete
// checkpoint (the failed one left nothing behind) and names it.
TEST(ServerDiskFaultTest, FullDiskIsReportedAndTheRestoreUsesTheLastGoodCheckpoint) {
  testing_storage::ScopedTempDir dir("server_disk_fault");
  test::RunningCoordinator job(OneServer());
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  CapturedEvents events;
  ServerOptions so;
  so.coordinator = job.endpoint();
  so.server_id = 0;
  so.store.data_dir = dir.path() + "/data/server-0";
  so.store.file_system = fs;
  so.heartbeat_ms = 100;
  so.events = events.log;
  std::string good_dir;
  {
    auto server = Server::Start(so);
    ASSERT_TRUE(server.ok()) << server.status();
    std::thread serving([&] { (*server)->Run().IgnoreError(); });
    {
      ClientOptions cli;
      cli.coordinator = job.endpoint();
      auto client = Client::Connect(cli);
      ASSERT_TRUE(client.ok()) << client.status();
      ASSERT_TRUE((*client)->CreateTable(DenseTable("w", 100)).ok());
      FloatBuffer grads(100);
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = 1.0f;
      ASSERT_TRUE((*client)->Push("w", 0, grads).get().ok());
      ASSERT_TRUE(TriggerCheckpoint(job.endpoint()).ok());
      std::vector<CheckpointInfo> good = ListCheckpoints(dir.path() + "/data/checkpoints/server-0");
      ASSERT_EQ(good.size(), 1u);
      good_dir = good[0].dir;
      EXPECT_TRUE(test::ServerStatsOf((*server)->endpoint()).durable());

      ASSERT_TRUE((*client)->Push("w", 0, grads).get().ok());
      ASSERT_TRUE((*client)->Clock().ok());  // The next checkpoints are at clock 1,
      // once a heartbeat has told the coordinator (it checkpoints at the live
      // workers' smallest clock).
      for (int tries = 0;; ++tries) {
        ASSERT_LT(tries, 1000) << "the coordinator never heard of the worker's clock 1";
        const wire::StatusReply r =
            test::AskOrDie(job.endpoint(), wire::GET_STATUS).status_reply();
        if (r.workers_size() == 1 && r.workers(0).clock() >= 1) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNoSpace, "/checkpoints/");
      const int64_t before_ms = RealClock()->NowUnixMs();
      EXPECT_FALSE(TriggerCheckpoint(job.endpoint()).ok());
      EXPECT_FALSE(TriggerCheckpoint(job.endpoint()).ok());
      wire::ServerStats stats = test::ServerStatsOf((*server)->endpoint());
      EXPECT_FALSE(stats.durable());
      EXPECT_GE(stats.not_durable_since_unix_ms(), before_ms);
      EXPECT_EQ(stats.disk_errors(), 2u);
      EXPECT_NE(stats.last_disk_error().find("No space left on device"), std::string::npos)
          << stats.last_disk_error();
      std::vector<std::string> errors = events.OfKind("disk_error");
      ASSERT_EQ(errors.size(), 1u);  // One per outage, not one per failure.
      EXPECT_NE(errors[0].find("\"write\":\"checkpoint\""), std::string::npos) << errors[0];
      // Trains on: a push and a pull still go through.
      ASSERT_TRUE((*client)->Push("w", 0, grads).get().ok());
      FloatBuffer out(100);
      ASSERT_TRUE((*client)->Pull("w", 0, out).get().ok());

      // The failed checkpoints left nothing a restore could pick up.
      EXPECT_EQ(ListCheckpoints(dir.path() + "/data/checkpoints/server-0").size(), 1u);

      fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNone);
      ASSERT_TRUE(TriggerCheckpoint(job.endpoint()).ok());
      EXPECT_TRUE(test::ServerStatsOf((*server)->endpoint()).durable());
      EXPECT_EQ(events.OfKind("durable_again").size(), 1u);
    }
    (*server)->Stop();
    serving.join();
  }

  // Damage the newest checkpoint where its manifest cannot see it (same
  // size, flipped bytes in an SST file only it has): "latest" skips it for
  // the older complete one, and says which it used.
  std::vector<CheckpointInfo> all = ListCheckpoints(dir.path() + "/data/checkpoints/server-0");
  ASSERT_EQ(all.size(), 2u);
  ASSERT_EQ(all[0].dir, good_dir);
  std::set<std::string> older;
  for (const CheckpointFile& f : all[0].files) older.insert(f.name);
  std::string victim;
  for (const CheckpointFile& f : all[1].files) {
    if (f.name.size() > 4 && f.name.substr(f.name.size() - 4) == ".sst" && !older.count(f.name) &&
        f.size > 64) {
      victim = all[1].dir + "/" + f.name;
    }
  }
  ASSERT_FALSE(victim.empty());
  {
    // The file is a hard link of the live store's: copy it before damaging.
    const std::string copy = victim + ".copy";
    std::filesystem::copy_file(victim, copy);
    std::filesystem::rename(copy, victim);
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(16);
    const char junk[16] = {'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x',
                           'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x'};
    f.write(junk, sizeof junk);
  }
  so.restore_from = "latest";
  CapturedEvents restart_events;
  so.events = restart_events.log;
  auto restored = Server::Start(so);
  ASSERT_TRUE(restored.ok()) << restored.status();
  std::vector<std::string> started = restart_events.OfKind("server_started");
  ASSERT_EQ(started.size(), 1u);
  EXPECT_NE(started[0].find("\"restored_dir\":\"" + std::filesystem::absolute(good_dir).string()),
            std::string::npos)
      << started[0];
}

// --on_disk_error=stop: the first failed checkpoint stops the server, and
// Run() returns the error naming the write.
TEST(ServerDiskFaultTest, StopModeEndsTheServerNamingTheWrite) {
  testing_storage::ScopedTempDir dir("server_disk_stop");
  test::RunningCoordinator job(OneServer());
  auto fs = std::make_shared<FaultInjectingFileSystem>();
  CapturedEvents events;
  ServerOptions so;
  so.coordinator = job.endpoint();
  so.store.data_dir = dir.path() + "/data/server-0";
  so.store.file_system = fs;
  so.heartbeat_ms = 100;
  so.events = events.log;
  so.on_disk_error = OnDiskError::kStop;
  auto server = Server::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  Status ran;
  std::thread serving([&] { ran = (*server)->Run(); });
  {
    ClientOptions cli;
    cli.coordinator = job.endpoint();
    auto client = Client::Connect(cli);
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->CreateTable(DenseTable("w", 100)).ok());
    fs->SetWriteError(FaultInjectingFileSystem::WriteError::kNoSpace, "/checkpoints/");
    EXPECT_FALSE(TriggerCheckpoint(job.endpoint()).ok());
  }
  serving.join();  // Ends by itself.
  EXPECT_EQ(ran.code(), StatusCode::kAborted) << ran;
  EXPECT_NE(ran.message().find("checkpoint write failed (--on_disk_error=stop)"),
            std::string::npos)
      << ran;
  std::vector<std::string> errors = events.OfKind("disk_error");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("\"action\":\"stop\""), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace relaxps
