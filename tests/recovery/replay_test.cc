// --recovery=replay through real processes: a server SIGKILLed after a
// checkpoint and restarted from it gets every acknowledged update back from
// the workers' logs, exactly once (its state equals the state before the
// kill, and the counters show 0 acknowledged updates lost, where checkpoint
// loses them); a log too small to hold them reports what it dropped as lost;
// under BSP the job ends bit-identical to the same job without the kill.
#include <signal.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/shard_map.h"
#include "tests/recovery/recovery_util.h"
#include "tests/test_util.h"

namespace relaxps {
namespace test {
namespace {

constexpr uint64_t kDenseSize = 20000;
constexpr int kRowWidth = 8;
constexpr int kRows = 64;
const std::vector<std::string> kServerFlags = {"--store=rocksdb"};

TableOptions DenseAdam() { return DenseAdamTable("w", kDenseSize); }

TableOptions SparseSgd() {
  TableOptions t;
  t.name = "emb";
  t.type = TableType::kSparse;
  t.row_width = kRowWidth;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 0.05f;
  t.init.seed = 4;
  t.init.segments.push_back(InitSegment{0, kRowWidth, InitKind::kUniform, -0.5f, 0.5f});
  return t;
}

FloatBuffer DenseGrad(int worker, int round) {
  FloatBuffer g(kDenseSize);
  for (uint64_t i = 0; i < kDenseSize; ++i) {
    g[i] = 0.001f * static_cast<float>((i * 7 + round * 3 + worker) % 23) - 0.01f;
  }
  return g;
}

// One round of one worker: a dense push (or PushPull) and a row push, then
// Clock. Returns the parts the servers acknowledged.
void PushRound(Client* c, int worker, int round, bool push_pull) {
  FloatBuffer g = DenseGrad(worker, round);
  if (push_pull) {
    FloatBuffer out(kDenseSize);
    ASSERT_OK(c->PushPull("w", 0, g, out).get());
  } else {
    ASSERT_OK(c->Push("w", 0, g).get());
  }
  KeyBuffer ids(kRows);
  FloatBuffer rg(kRows * kRowWidth);
  for (int r = 0; r < kRows; ++r) {
    ids[r] = static_cast<uint64_t>(r) * 1000003u + static_cast<uint64_t>(worker);
    for (int k = 0; k < kRowWidth; ++k) rg[r * kRowWidth + k] = 0.01f * ((r + k + round) % 5) - 0.02f;
  }
  ASSERT_OK(c->PushRows("emb", ids, rg).get());
  ASSERT_OK(c->Clock());
}

// The dense parameters and Adam slots, and the rows of both tables, read
// from server 0.
struct State {
  std::vector<std::vector<float>> dense;  // Per slot.
  std::vector<float> rows;
};

State ReadState(RecoveryCluster* cluster, int workers) {
  State s;
  for (int slot = 0; slot < 3; ++slot) {
    auto v = ReadDenseSlot(cluster->server_endpoint(0), "w", 0, kDenseSize, slot);
    EXPECT_TRUE(v.ok()) << v.status();
    s.dense.push_back(v.ok() ? *v : std::vector<float>());
  }
  std::vector<uint64_t> ids;
  for (int w = 0; w < workers; ++w) {
    for (int r = 0; r < kRows; ++r) ids.push_back(static_cast<uint64_t>(r) * 1000003u + w);
  }
  auto rows = ReadRowsSlot(cluster->server_endpoint(0), "emb", ids, 0);
  EXPECT_TRUE(rows.ok()) << rows.status();
  if (rows.ok()) s.rows = *rows;
  return s;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectSameState(const State& a, const State& b, const std::string& what) {
  ASSERT_EQ(a.dense.size(), b.dense.size());
  for (size_t slot = 0; slot < a.dense.size(); ++slot) {
    EXPECT_TRUE(SameBits(a.dense[slot], b.dense[slot])) << what << ": dense slot " << slot;
  }
  EXPECT_TRUE(SameBits(a.rows, b.rows)) << what << ": rows";
}

StatusOr<std::unique_ptr<RecoveryCluster>> StartJob(const std::string& dir,
                                                    const std::string& policy,
                                                    std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = {"--recovery=" + policy, "--heartbeat_timeout_ms=1000"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  ASSIGN_OR_RETURN(auto cluster, RecoveryCluster::Start(dir, 1, flags));
  RETURN_IF_ERROR(cluster->StartServer(0, kServerFlags));
  return cluster;
}

Status Checkpoint(RecoveryCluster* cluster) {
  ASSIGN_OR_RETURN(CommandResult ck, cluster->Ctl({"checkpoint"}));
  if (ck.exit_status != 0) return InternalError("relaxps-ctl checkpoint: " + ck.output);
  return Status::OK();
}

Status KillAndRestart(RecoveryCluster* cluster) {
  cluster->server(0)->Kill(SIGKILL);
  RETURN_IF_ERROR(cluster->server(0)->Wait(Millis(10000)).status());
  std::vector<std::string> flags = kServerFlags;
  flags.push_back("--restore_from=latest");
  return cluster->StartServer(0, flags);
}

// Kills and restarts the server, waits until `client` gets through to it
// (the next request waits for the restart and, under replay, for the
// replay: it goes through the gate after it), and returns the push parts of
// `incarnation` that its state reflects.
StatusOr<uint64_t> RestartAndCountApplied(RecoveryCluster* cluster, Client* client,
                                          uint64_t incarnation) {
  RETURN_IF_ERROR(KillAndRestart(cluster));
  FloatBuffer probe(kDenseSize);
  RETURN_IF_ERROR(client->Pull("w", 0, probe).get());
  return cluster->AppliedParts(0, incarnation);
}

// The acknowledged updates a policy keeps after a kill: replay all of them
// (exactly once: the state equals the state before the kill), checkpoint
// none of those after its checkpoint, by the counters of both sides.
class LostUpdatesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LostUpdatesTest, CountersTellWhatTheRestartLost) {
  const std::string policy = GetParam();
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, StartJob(dir, policy));
  EventLogOptions events;
  events.path = dir + "/worker-events.jsonl";
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<EventLog> log, EventLog::Open(events));
  ASSERT_OK_AND_ASSIGN(auto client, cluster->Connect("worker", [log](ClientOptions* o) {
    o->events = log;
  }));
  ASSERT_OK(client->CreateTable(DenseAdam()));
  ASSERT_OK(client->CreateTable(SparseSgd()));
  for (int round = 0; round < 4; ++round) PushRound(client.get(), 0, round, false);
  ASSERT_OK(Checkpoint(cluster.get()));
  const uint64_t at_checkpoint = client->stats().acked_updates;
  for (int round = 4; round < 7; ++round) PushRound(client.get(), 0, round, false);
  const State before = ReadState(cluster.get(), 1);
  const ClientStats acked = client->stats();
  ASSERT_EQ(acked.acked_updates, 14u);  // 7 rounds of one dense and one row part.
  ASSERT_OK_AND_ASSIGN(uint64_t applied_before, cluster->AppliedParts(0, acked.incarnation));
  EXPECT_EQ(applied_before, acked.acked_updates);

  ASSERT_OK_AND_ASSIGN(uint64_t applied,
                       RestartAndCountApplied(cluster.get(), client.get(), acked.incarnation));
  const State after = ReadState(cluster.get(), 1);
  if (policy == "replay") {
    EXPECT_EQ(applied, acked.acked_updates) << "acknowledged updates lost";
    ExpectSameState(after, before, "after the replay");
    EXPECT_EQ(client->stats().recovery_counters.at("replay_dropped"), 0u);
    EXPECT_GE(client->stats().recovery_counters.at("replayed"), 6u);
    // Replayed at clock 7: rounds 6 (1 behind), 5 and 4 (2 and 3), and any
    // before the checkpoint the log still held (4-7 behind), two parts each,
    // none on time.
    ASSERT_OK_AND_ASSIGN(std::string text, ReadFile(events.path));
    const std::regex replayed("\"kind\":\"updates_replayed\",\"worker\":\\d+,\"server\":0,"
                              "\"count\":(\\d+),\"staleness_hist\":\\[0,2,4(,([0-9]+))?\\]");
    std::smatch r;
    ASSERT_TRUE(std::regex_search(text, r, replayed)) << text;
    const int older = r[3].matched ? std::stoi(r[3].str()) : 0;
    EXPECT_EQ(std::stoi(r[1].str()), 6 + older) << text;
    EXPECT_EQ(older % 2, 0) << text;
  } else {
    // Checkpoint: what was acknowledged after the checkpoint is gone.
    EXPECT_EQ(applied, at_checkpoint);
    EXPECT_EQ(acked.acked_updates - applied, 6u);
  }
  // relaxps-ctl stats says the same per worker once a heartbeat carried the
  // worker's count (every 200 ms).
  const std::string absent = policy == "replay" ? "0" : "6";
  const std::regex line("\\{\"id\":0,\"incarnation\":\"" + std::to_string(acked.incarnation) +
                        "\",\"alive\":true,\"acked_updates\":14,\"applied_parts\":\\d+,"
                        "\"acked_but_absent\":(\\d+)\\}");
  std::smatch m;
  std::string out;
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK_AND_ASSIGN(CommandResult r, cluster->Ctl({"--json", "stats"}));
    out = r.output;
    if (std::regex_search(out, m, line)) break;
  }
  ASSERT_TRUE(std::regex_search(out, m, line)) << out;
  EXPECT_EQ(m[1].str(), absent) << out;
  // Training goes on: the new round is applied once.
  PushRound(client.get(), 0, 7, false);
  ASSERT_OK_AND_ASSIGN(uint64_t applied_end, cluster->AppliedParts(0, acked.incarnation));
  EXPECT_EQ(applied_end, applied + 2);
}

INSTANTIATE_TEST_SUITE_P(Policies, LostUpdatesTest, ::testing::Values("replay", "checkpoint"));

// A client that splits a dense push of more than 16 KiB into parts of 16 KiB
// (20000 keys: 5 requests).
void SplitDense(ClientOptions* o) {
  o->dense_split_bytes = 4096 * sizeof(float);
  o->dense_part_bytes = 4096 * sizeof(float);
}

// Issue 41: under replay a large push is split like under any policy; the
// update log keeps each part (its key, and push_continues for the later
// ones), and a server restarted from a checkpoint is replayed each missing
// part once: its state (Adam, one step per push) equals the state before the
// kill, and it counts one update per push, as the worker does.
TEST(ReplayTest, SplitPushesAreLoggedAndReplayedPerPartExactlyOnce) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, StartJob(dir, "replay"));
  ASSERT_OK_AND_ASSIGN(auto client, cluster->Connect("worker", SplitDense));
  ASSERT_OK(client->CreateTable(DenseAdam()));
  ASSERT_OK(client->CreateTable(SparseSgd()));
  ASSERT_OK_AND_ASSIGN(const uint64_t before_push, ClientRequests(cluster.get(), {0}));
  ASSERT_OK(client->Push("w", 0, DenseGrad(0, 99)).get());
  ASSERT_OK_AND_ASSIGN(const uint64_t after_push, ClientRequests(cluster.get(), {0}));
  // 5 parts, and the SERVER_STATS request that read `before_push`.
  EXPECT_EQ(after_push - before_push, 5u + 1) << "the push was not sent as 5 parts";
  ASSERT_OK(client->Clock());
  for (int round = 0; round < 3; ++round) PushRound(client.get(), 0, round, false);
  ASSERT_OK(Checkpoint(cluster.get()));
  for (int round = 3; round < 6; ++round) PushRound(client.get(), 0, round, round == 4);
  const State before = ReadState(cluster.get(), 1);
  const ClientStats acked = client->stats();
  ASSERT_EQ(acked.acked_updates, 13u);  // 1 + 6 rounds of one dense and one row update.
  ASSERT_OK_AND_ASSIGN(uint64_t applied_before, cluster->AppliedParts(0, acked.incarnation));
  EXPECT_EQ(applied_before, acked.acked_updates);

  ASSERT_OK_AND_ASSIGN(uint64_t applied,
                       RestartAndCountApplied(cluster.get(), client.get(), acked.incarnation));
  EXPECT_EQ(applied, acked.acked_updates) << "acknowledged updates lost or counted per part";
  ExpectSameState(ReadState(cluster.get(), 1), before, "after the replay of split pushes");
  // Rounds 3-5: 5 dense parts and a row push each.
  EXPECT_GE(client->stats().recovery_counters.at("replayed"), 18u);
  EXPECT_EQ(client->stats().recovery_counters.at("replay_dropped"), 0u);
}

// A log too small for what was acknowledged since the checkpoint drops the
// oldest entries and reports them: exactly those are missing afterwards.
TEST(ReplayTest, ALogOverflowIsCountedAsLost) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, StartJob(dir, "replay"));
  // Room for two dense parts (and some rows) only.
  ASSERT_OK_AND_ASSIGN(auto client, cluster->Connect("worker", [](ClientOptions* o) {
    o->update_log_bytes = 2 * kDenseSize * sizeof(float) + kRows * (kRowWidth * 4 + 8);
  }));
  ASSERT_OK(client->CreateTable(DenseAdam()));
  ASSERT_OK(client->CreateTable(SparseSgd()));
  PushRound(client.get(), 0, 0, false);
  ASSERT_OK(Checkpoint(cluster.get()));
  for (int round = 1; round < 6; ++round) PushRound(client.get(), 0, round, false);
  const ClientStats acked = client->stats();
  EXPECT_GT(acked.recovery_counters.at("replay_dropped"), 0u);
  EXPECT_GT(acked.recovery_counters.at("replay_dropped_bytes"), 0u);
  EXPECT_GT(acked.recovery_counters.at("replay_uncovered"), 0u);
  EXPECT_EQ(acked.recovery_counters.at("replay_lost"), 0u);  // Nothing restarted yet.

  ASSERT_OK(KillAndRestart(cluster.get()));
  FloatBuffer probe(kDenseSize);
  ASSERT_OK(client->Pull("w", 0, probe).get());
  ASSERT_OK_AND_ASSIGN(uint64_t applied, cluster->AppliedParts(0, acked.incarnation));
  const uint64_t lost = client->stats().recovery_counters.at("replay_lost");
  EXPECT_GT(lost, 0u);
  EXPECT_EQ(acked.acked_updates - applied, lost)
      << "what the worker reports lost is what the server lacks";
}

// Under BSP with 2 workers, a replay job whose server is killed and
// restarted ends with parameters bit-identical to the same job without the
// kill.
// `split`: the workers split their dense pushes into parts (SplitDense): a
// round is every part of every worker.
State RunBspJob(const std::string& dir, bool kill, bool split = false) {
  State end;
  auto cluster = StartJob(dir, "replay", {"--consistency=bsp", "--num_workers=2"});
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return end;
  const std::function<void(ClientOptions*)> tweak =
      split ? std::function<void(ClientOptions*)>(SplitDense) : nullptr;
  std::unique_ptr<Client> clients[2];
  std::thread connect1([&] {
    auto c = (*cluster)->Connect("worker", tweak);
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) clients[1] = std::move(*c);
  });
  auto c0 = (*cluster)->Connect("worker", tweak);
  connect1.join();
  EXPECT_TRUE(c0.ok()) << c0.status();
  if (!c0.ok() || clients[1] == nullptr) return end;
  clients[0] = std::move(*c0);
  EXPECT_OK(clients[0]->CreateTable(DenseAdam()));
  EXPECT_OK(clients[0]->CreateTable(SparseSgd()));
  for (auto& c : clients) {  // Each worker learns the tables (and their map).
    EXPECT_OK(c->GetTable("w").status());
    EXPECT_OK(c->GetTable("emb").status());
  }
  auto rounds = [&](int from, int to) {
    std::thread other([&] {
      for (int r = from; r < to; ++r) PushRound(clients[1].get(), clients[1]->worker_id(), r, true);
    });
    for (int r = from; r < to; ++r) PushRound(clients[0].get(), clients[0]->worker_id(), r, true);
    other.join();
  };
  rounds(0, 3);
  EXPECT_OK(Checkpoint(cluster->get()));
  rounds(3, 6);
  if (kill) {
    EXPECT_OK(KillAndRestart(cluster->get()));
  }
  rounds(6, 9);
  return ReadState(cluster->get(), 2);
}

TEST(ReplayTest, BspJobWithAKillEndsBitIdenticalToOneWithout) {
  const State reference = RunBspJob(MakeTempDir(), false);
  const State killed = RunBspJob(MakeTempDir(), true);
  ASSERT_FALSE(reference.dense.empty());
  ExpectSameState(killed, reference, "killed vs uninterrupted");
}

// The same with split pushes: a BSP round closes on all parts of every
// worker, and the kill and replay leave the job bit-identical to the
// unsplit, uninterrupted one.
TEST(ReplayTest, BspJobOfSplitPushesWithAKillEndsBitIdenticalToOneWithout) {
  const State reference = RunBspJob(MakeTempDir(), false);
  const State killed = RunBspJob(MakeTempDir(), true, /*split=*/true);
  ASSERT_FALSE(reference.dense.empty());
  ExpectSameState(killed, reference, "split and killed vs unsplit and uninterrupted");
}

}  // namespace
}  // namespace test
}  // namespace relaxps
