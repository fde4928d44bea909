// The copy phase of a range move (docs/elastic.md "One move"): the source
// copies the moved keys to the destination while it serves them and forwards
// their updates meanwhile (or, without forwarding, catches up with what was
// written meanwhile), and cuts over with only what the copy missed. In-process jobs over ZeroMQ TCP, two async workers pushing
// known gradients (SGD, lr 1: the sums are exact in any order) throughout.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "client/client.h"
#include "tests/elastic/elastic_test_util.h"
#include "tests/server/in_process_cluster.h"
#include "tests/test_util.h"

namespace relaxps {
namespace {

using test::Ask;
using test::EventKinds;
using test::JoinedServer;
using test::MapOf;

constexpr uint64_t kSlice = 16384;  // Keys per push.
constexpr uint64_t kHot = 16;       // Slices the pushes go to.

int HolderOf(const wire::ShardMap& map, uint64_t key) {
  for (const wire::DenseRange& r : map.tables(0).ranges()) {
    if (r.begin() <= key && key < r.end()) return r.server();
  }
  return -1;
}

float Gradient(int worker, int step, uint64_t key) {
  return static_cast<float>(static_cast<int>((7 * worker + 3 * step + key) % 5) - 2);
}

// The coordinator's event lines, oldest first.
std::vector<std::string> EventLines(const std::string& coordinator) {
  Message m;
  m.header.set_type(wire::GET_EVENTS);
  m.header.mutable_events_request()->set_after_seq(0);
  const wire::Header reply = Ask(coordinator, std::move(m));
  return {reply.events_reply().lines().begin(), reply.events_reply().lines().end()};
}

// Integer field `key` of a JSON event line (-1: absent).
long long Field(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  const std::string rest = line.substr(at + key.size() + 3);
  if (rest.compare(0, 4, "true") == 0) return 1;
  if (rest.compare(0, 5, "false") == 0) return 0;
  return std::strtoll(rest.c_str(), nullptr, 10);
}

// A one-server async job of table "w" (`size` keys, SGD lr 1) with server
// options `so`, two workers pushing slices of kSlice keys (kHot of them) until
// told to stop (`whole`: every push the whole table); the expected model is
// minus the sum of every acknowledged push. Server 0's events are kept.
class PushingJob {
 public:
  PushingJob(uint64_t size, ServerOptions so, int heartbeat_timeout_ms = 5000, bool whole = false)
      : size_(size), whole_(whole) {
    EventLogOptions eo;
    eo.process = "server-0";
    eo.on_line = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      source_events_.push_back(line);
    };
    so.events = *EventLog::Open(eo);
    CoordinatorOptions co;
    co.num_servers = 1;
    co.consistency = ConsistencyModel::kAsync;
    co.heartbeat_timeout_ms = heartbeat_timeout_ms * test::TimeScale();
    cluster_ = std::make_unique<InProcessCluster>(co, so);
    TableOptions t;
    t.name = "w";
    t.size = size;
    t.optimizer.name = "sgd";
    t.optimizer.lr = 1.0f;
    for (int k = 0; k < 2; ++k) {
      ClientOptions o;
      o.coordinator = cluster_->coordinator();
      o.request_timeout_ms = 20000 * test::TimeScale();
      auto c = Client::Connect(o);
      CHECK(c.ok()) << c.status();
      CHECK((*c)->CreateTable(t).ok());
      workers_.push_back(std::move(c).value());
    }
    failures_.resize(workers_.size());
    expected_.assign(workers_.size(), std::vector<float>(size, 0.0f));
    for (size_t k = 0; k < workers_.size(); ++k) {
      threads_.emplace_back([this, k] { Push(k); });
    }
  }
  ~PushingJob() { Stop(); }

  // Waits until the workers made `n` more steps together.
  void WaitSteps(int n) {
    const int until = steps_.load() + n;
    while (steps_.load() < until && !failed_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void Stop() {
    stop_ = true;
    for (std::thread& th : threads_) th.join();
    threads_.clear();
  }
  // Keys whose value is not minus the sum of the acknowledged pushes.
  size_t WrongKeys() {
    FloatBuffer params(size_);
    Status s = workers_[0]->Pull("w", 0, params).get();
    EXPECT_OK(s) << "events: " << testing::PrintToString(EventKinds(cluster_->coordinator()));
    if (!s.ok()) return size_;
    size_t wrong = 0;
    for (uint64_t d = 0; d < size_; ++d) {
      float sum = 0;
      for (const auto& e : expected_) sum += e[d];
      wrong += params[d] != sum;
    }
    return wrong;
  }
  std::vector<Status> failures() const { return failures_; }
  std::vector<std::string> SourceEvents(const std::string& kind) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const std::string& l : source_events_) {
      if (l.find("\"kind\":\"" + kind + "\"") != std::string::npos) out.push_back(l);
    }
    return out;
  }
  InProcessCluster* cluster() { return cluster_.get(); }

 private:
  void Push(size_t k) {
    Client* c = workers_[k].get();
    // kHot slices spread over the table take every push (half of them in
    // the tail that moves): a copy round sees some of them written, never
    // all of the range.
    const uint64_t stride = size_ / kSlice / kHot;
    const uint64_t n = whole_ ? size_ : kSlice;
    for (int step = 0; !stop_.load(); ++step) {
      const uint64_t begin = whole_ ? 0 : ((step * 7 + k * 3) % kHot) * stride * kSlice;
      FloatBuffer grads(n);
      for (uint64_t d = 0; d < n; ++d) grads[d] = Gradient(c->worker_id(), step, begin + d);
      Status s = c->Push("w", begin, grads).get();
      if (!s.ok()) {
        failures_[k] = s;
        failed_ = true;
        return;
      }
      for (uint64_t d = 0; d < n; ++d) expected_[k][begin + d] -= grads[d];
      steps_.fetch_add(1);
    }
  }

  const uint64_t size_;
  const bool whole_;
  std::unique_ptr<InProcessCluster> cluster_;
  std::vector<std::unique_ptr<Client>> workers_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::atomic<int> steps_{0};
  std::vector<Status> failures_;                // Per worker (its thread).
  std::vector<std::vector<float>> expected_;    // Per worker (its thread).
  std::mutex mu_;
  std::vector<std::string> source_events_;  // Guarded by mu_.
};

// After `steps_before` steps a server joins and the tail half of the
// `size`-key table moves to it; `steps_after` more steps on the new map, then
// the workers stop. Checks that nothing failed, the tail moved and every key
// is right; returns the source's range_move_cutover event ("" if not one).
std::string JoinAndMove(PushingJob* job, uint64_t size, int steps_before, int steps_after) {
  job->WaitSteps(steps_before);
  auto joined = std::make_unique<JoinedServer>(job->cluster()->coordinator());
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (HolderOf(MapOf(job->cluster()->coordinator()), size - 1) != 1 &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  job->WaitSteps(steps_after);  // On the new map, both servers.
  job->Stop();
  for (const Status& s : job->failures()) EXPECT_OK(s);
  EXPECT_EQ(HolderOf(MapOf(job->cluster()->coordinator()), size - 1), 1) << "the range never moved";
  EXPECT_EQ(job->WrongKeys(), 0u);
  const std::vector<std::string> cutover = job->SourceEvents("range_move_cutover");
  EXPECT_EQ(cutover.size(), 1u);
  return cutover.size() == 1 ? cutover[0] : "";
}

// A server joins and the tail half (8 MiB) moves while both workers push:
// the source copies it, catches up at least once, and the cut-over sends
// less than the range; every acknowledged push is in the final model once.
TEST(RangeCopyTest, ACopyWithCatchUpRoundsUnderPushesLosesNothingAndCutsOverLessThanTheRange) {
  constexpr uint64_t kSize = 4 << 20;
  ServerOptions so;
  so.move_forward_updates = false;  // The catch-up rounds.
  so.move_catchup_bytes = 0;        // Catch up while the writes shrink.
  so.state_transfer_chunk_bytes = 256 << 10;
  PushingJob job(kSize, so);
  const std::string e = JoinAndMove(&job, kSize, /*steps_before=*/20, /*steps_after=*/40);
  ASSERT_FALSE(e.empty());
  EXPECT_EQ(Field(e, "copy_phase"), 1) << e;
  EXPECT_GE(Field(e, "catchup_rounds"), 1) << e;
  EXPECT_EQ(Field(e, "range_bytes"), static_cast<long long>(kSize / 2 * sizeof(float))) << e;
  EXPECT_GE(Field(e, "copied_bytes"), Field(e, "range_bytes")) << e;
  EXPECT_LT(Field(e, "cutover_bytes"), Field(e, "range_bytes")) << e;
  std::printf("copy phase under pushes: %s\n", e.c_str());
}

// Both workers push the whole table at every step: every chunk of the moved
// tail is written during every copy round, and catch-up rounds never
// converge. The source forwards those updates during the copy, and the
// cut-over sends only the metadata; every acknowledged push is in the final
// model exactly once (a forward applied to keys whose copy already held it
// would count it twice, one lost would miss it).
TEST(RangeCopyTest, ForwardedUpdatesCutOverWithoutTheRangeWhenEveryKeyIsWrittenEveryStep) {
  constexpr uint64_t kSize = 2 << 20;  // The tail: 4 MiB.
  ServerOptions so;
  so.state_transfer_chunk_bytes = 4096;  // 1,024 pieces: pushes fall between them.
  PushingJob job(kSize, so, /*heartbeat_timeout_ms=*/5000, /*whole=*/true);
  const std::string e = JoinAndMove(&job, kSize, /*steps_before=*/4, /*steps_after=*/6);
  ASSERT_FALSE(e.empty());
  EXPECT_EQ(Field(e, "forwarding"), 1) << e;
  EXPECT_GE(Field(e, "forwarded_updates"), 1) << e;
  EXPECT_GT(Field(e, "forwarded_bytes"), 0) << e;
  EXPECT_EQ(Field(e, "catchup_rounds"), 0) << e;
  EXPECT_EQ(Field(e, "range_bytes"), static_cast<long long>(kSize / 2 * sizeof(float))) << e;
  EXPECT_LT(Field(e, "cutover_bytes"), Field(e, "range_bytes") / 16) << e;
  std::printf("forwarding under whole-table pushes: %s\n", e.c_str());
}

// The copy phase's pieces leave straight out of the source's memory, lent to
// ZeroMQ, while both workers push slices of the table, half of them in the
// moved tail, as fast as they can: pushes write keys of a piece in flight,
// and wait until ZeroMQ sent it (a piece read while the optimizer writes it
// would hold part of an update that is also forwarded: counted twice).
// Every acknowledged push is in the final model exactly once. A move where
// no push happened to meet a piece in flight is run again (at most 20).
TEST(RangeCopyTest, PushesOfKeysInFlightWaitForZeroMqAndTheDestinationGetsExactlyTheirValues) {
  constexpr uint64_t kSize = 2 << 20;  // The tail: 4 MiB.
  ServerOptions so;
  so.state_transfer_chunk_bytes = 1 << 20;  // 4 pieces, each lent (above 8 KiB).
  long long waits = 0;
  for (int attempt = 0; attempt < 20 && waits == 0 && !HasFailure(); ++attempt) {
    PushingJob job(kSize, so);
    const std::string e = JoinAndMove(&job, kSize, /*steps_before=*/2, /*steps_after=*/10);
    ASSERT_FALSE(e.empty());
    EXPECT_EQ(Field(e, "forwarding"), 1) << e;
    EXPECT_EQ(Field(e, "lent_bytes"), Field(e, "copied_bytes")) << e;
    EXPECT_EQ(Field(e, "torn_pieces"), 0) << e;
    waits = Field(e, "write_waits");
    std::printf("lent pieces under pushes (attempt %d): %s\n", attempt, e.c_str());
  }
  EXPECT_GE(waits, 1) << "no push met a piece in flight in 20 moves";
}

// The destination stops during the copy phase: the piece it does not
// answer fails the move (range_move_failed, saying so), the map is
// unchanged, the source never cut (no cut-over), and the workers, which
// pushed throughout, lose nothing.
TEST(RangeCopyTest, ADestinationStoppedDuringTheCopyPhaseFailsTheMoveAndLosesNothing) {
  constexpr uint64_t kSize = 16 << 20;  // 32 MiB move in 4 KiB pieces: seconds of copying.
  ServerOptions so;
  so.state_transfer_chunk_bytes = 4096;
  so.move_piece_timeout_ms = 1500 * test::TimeScale();
  // Under --recovery=none a server that misses its heartbeats ends the job,
  // even a joined one that holds nothing yet: the test ends long before.
  PushingJob job(kSize, so, /*heartbeat_timeout_ms=*/120000);
  job.WaitSteps(20);
  auto joined = std::make_unique<JoinedServer>(job.cluster()->coordinator());
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto has = [&](const std::string& kind) {
    const std::vector<std::string> kinds = EventKinds(job.cluster()->coordinator());
    return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
  };
  while (!has("range_move_started") && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  joined.reset();  // Stopped mid-copy.
  while (!has("range_move_failed") && !has("range_move_done") &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  job.WaitSteps(40);  // Training goes on on server 0.
  job.Stop();
  for (const Status& s : job.failures()) EXPECT_OK(s);
  std::string failed;
  for (const std::string& l : EventLines(job.cluster()->coordinator())) {
    if (l.find("\"kind\":\"range_move_failed\"") != std::string::npos) failed = l;
  }
  ASSERT_FALSE(failed.empty()) << "the move did not fail";
  EXPECT_NE(failed.find("copy phase"), std::string::npos) << failed;
  EXPECT_FALSE(has("range_move_done"));
  EXPECT_EQ(HolderOf(MapOf(job.cluster()->coordinator()), kSize - 1), 0);
  EXPECT_TRUE(job.SourceEvents("range_move_cutover").empty());
  EXPECT_EQ(job.WrongKeys(), 0u);
  std::printf("destination stopped mid-copy: %s\n", failed.c_str());
}

}  // namespace
}  // namespace relaxps
