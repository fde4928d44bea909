// Coordinated checkpoints through real processes: a checkpoint taken with
// relaxps-ctl, more training, a SIGKILLed server restarted with
// --restore_from=latest that comes back with exactly the checkpoint's
// parameters and optimizer state; periodic checkpoints and pruning; and
// corrupt checkpoints or stores refused with an error naming them.
#include <signal.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
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

namespace fs = std::filesystem;

constexpr uint64_t kDenseSize = 20000;
constexpr int kRowWidth = 8;
constexpr int kRows = 200;
constexpr int kAdamSlots = 3;  // params, m, v

TableOptions DenseAdam() { return DenseAdamTable("w", kDenseSize); }

TableOptions SparseAdam() {
  TableOptions t;
  t.name = "emb";
  t.type = TableType::kSparse;
  t.row_width = kRowWidth;
  t.optimizer.name = "adam";
  t.optimizer.lr = 0.05f;
  t.init.seed = 4;
  t.init.segments.push_back(InitSegment{0, kRowWidth, InitKind::kUniform, -0.5f, 0.5f});
  return t;
}

// One round of known gradients on both tables.
void PushRound(Client* c, int round) {
  FloatBuffer g(kDenseSize);
  for (uint64_t i = 0; i < kDenseSize; ++i) g[i] = 0.001f * static_cast<float>((i * 7 + round) % 23) - 0.01f;
  ASSERT_OK(c->Push("w", 0, g).get());
  KeyBuffer ids(kRows);
  FloatBuffer rg(kRows * kRowWidth);
  for (int r = 0; r < kRows; ++r) {
    ids[r] = static_cast<uint64_t>(r) * 1000003u;
    for (int k = 0; k < kRowWidth; ++k) rg[r * kRowWidth + k] = 0.01f * ((r + k + round) % 5) - 0.02f;
  }
  ASSERT_OK(c->PushRows("emb", ids, rg).get());
  ASSERT_OK(c->Clock());
}

// Every slot of server `id`'s part of both tables.
struct ServerState {
  std::vector<std::vector<float>> dense;   // Per slot.
  std::vector<std::vector<float>> sparse;  // Per slot.
};

ServerState ReadState(RecoveryCluster* cluster, int id, int num_servers) {
  ServerState st;
  const wire::DenseRange range = ShardMap::AssignDense(kDenseSize, num_servers).at(id);
  std::vector<uint64_t> ids;
  for (int r = 0; r < kRows; ++r) {
    const uint64_t row = static_cast<uint64_t>(r) * 1000003u;
    if (SparseOwner(row, num_servers) == id) ids.push_back(row);
  }
  EXPECT_FALSE(ids.empty());
  for (int slot = 0; slot < kAdamSlots; ++slot) {
    auto d = ReadDenseSlot(cluster->server_endpoint(id), "w", range.begin(),
                           range.end() - range.begin(), slot);
    EXPECT_OK(d);
    st.dense.push_back(d.ok() ? *d : std::vector<float>());
    auto s = ReadRowsSlot(cluster->server_endpoint(id), "emb", ids, slot);
    EXPECT_OK(s);
    st.sparse.push_back(s.ok() ? *s : std::vector<float>());
  }
  return st;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const std::vector<std::string> kServerFlags = {"--store=rocksdb", "--flush_every_clocks=0",
                                               "--keep_checkpoints=2", "--heartbeat_ms=100"};

// A killed server's restart: the same flags, rolled back to its last checkpoint.
std::vector<std::string> RestartFlags() {
  std::vector<std::string> f = kServerFlags;
  f.push_back("--restore_from=latest");
  return f;
}

// A job under --recovery=checkpoint on 2 servers with both Adam tables.
StatusOr<std::unique_ptr<RecoveryCluster>> StartCheckpointJob(const std::string& dir,
                                                              std::unique_ptr<Client>* client) {
  ASSIGN_OR_RETURN(auto cluster, RecoveryCluster::Start(dir, 2, {"--recovery=checkpoint",
                                                                 "--heartbeat_timeout_ms=1000"}));
  for (int id = 0; id < 2; ++id) RETURN_IF_ERROR(cluster->StartServer(id, kServerFlags));
  ASSIGN_OR_RETURN(*client, cluster->Connect("worker"));
  RETURN_IF_ERROR((*client)->CreateTable(DenseAdam()));
  RETURN_IF_ERROR((*client)->CreateTable(SparseAdam()));
  return cluster;
}

TEST(CheckpointRestoreTest, KilledServerRestoresCheckpointExactly) {
  const std::string dir = MakeTempDir();
  std::unique_ptr<Client> client;
  ASSERT_OK_AND_ASSIGN(auto cluster, StartCheckpointJob(dir, &client));
  for (int round = 0; round < 5; ++round) PushRound(client.get(), round);

  const ServerState at_checkpoint = ReadState(cluster.get(), 1, 2);
  ASSERT_OK_AND_ASSIGN(CommandResult ck, cluster->Ctl({"checkpoint"}));
  ASSERT_EQ(ck.exit_status, 0) << ck.output;
  std::printf("%s", ck.output.c_str());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(ck.output, m, std::regex(R"(checkpoint clock=(\d+) complete on 2 server)")))
      << ck.output;
  const std::string ckpt_name = "ckpt-" + m[1].str();
  for (int id = 0; id < 2; ++id) {
    const std::string ckpt = cluster->checkpoint_root(id) + "/" + ckpt_name;
    EXPECT_TRUE(fs::is_directory(ckpt)) << ckpt;
    EXPECT_NE(ck.output.find(ckpt), std::string::npos) << ck.output;
  }

  for (int round = 5; round < 8; ++round) PushRound(client.get(), round);
  const ServerState later = ReadState(cluster.get(), 1, 2);
  for (int slot = 0; slot < kAdamSlots; ++slot) {
    ASSERT_FALSE(BitEqual(later.dense[slot], at_checkpoint.dense[slot])) << "slot " << slot;
    ASSERT_FALSE(BitEqual(later.sparse[slot], at_checkpoint.sparse[slot])) << "slot " << slot;
  }

  cluster->server(1)->Kill(SIGKILL);
  ASSERT_OK(cluster->server(1)->Wait(Millis(10000)));
  ASSERT_OK(cluster->StartServer(1, RestartFlags()));
  EXPECT_FALSE(GrepLines(cluster->server(1)->Log(), "restored .* from checkpoint .*" + ckpt_name).empty())
      << cluster->server(1)->Log();

  const ServerState restored = ReadState(cluster.get(), 1, 2);
  for (int slot = 0; slot < kAdamSlots; ++slot) {
    EXPECT_TRUE(BitEqual(restored.dense[slot], at_checkpoint.dense[slot]))
        << "dense slot " << slot << " differs from the checkpoint";
    EXPECT_TRUE(BitEqual(restored.sparse[slot], at_checkpoint.sparse[slot]))
        << "sparse slot " << slot << " differs from the checkpoint";
  }
  // Through the client as well: server 1's range of the dense parameters.
  ASSERT_OK_AND_ASSIGN(auto observer, cluster->Connect("observer"));
  const wire::DenseRange r1 = ShardMap::AssignDense(kDenseSize, 2)[1];
  FloatBuffer params(r1.end() - r1.begin());
  ASSERT_OK(observer->Pull("w", r1.begin(), params).get());
  EXPECT_EQ(std::memcmp(params.data(), at_checkpoint.dense[0].data(), params.bytes()), 0);

  ASSERT_OK_AND_ASSIGN(CommandResult status, cluster->Ctl({"status"}));
  EXPECT_NE(status.output.find("latest_checkpoint: clock=" + m[1].str() + " servers=2"),
            std::string::npos)
      << status.output;
  ASSERT_OK_AND_ASSIGN(CommandResult list, cluster->Ctl({"checkpoints"}));
  EXPECT_EQ(list.exit_status, 0) << list.output;
  EXPECT_NE(list.output.find("server 1 holds 1 valid checkpoint(s)"), std::string::npos)
      << list.output;
  std::printf("%s", list.output.c_str());
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

// A server paused past the heartbeat timeout is declared dead; when it wakes
// it restarts in place (same pid, no supervisor): it re-executes itself with
// its id and --restore_from=latest, and comes back with exactly the
// checkpoint's state, and the job goes on.
TEST(CheckpointRestoreTest, PausedServerDeclaredDeadRestoresItsCheckpointInPlace) {
  const std::string dir = MakeTempDir();
  std::unique_ptr<Client> client;
  ASSERT_OK_AND_ASSIGN(auto cluster, StartCheckpointJob(dir, &client));
  for (int round = 0; round < 3; ++round) PushRound(client.get(), round);
  const ServerState at_checkpoint = ReadState(cluster.get(), 1, 2);
  ASSERT_OK_AND_ASSIGN(CommandResult ck, cluster->Ctl({"checkpoint"}));
  ASSERT_EQ(ck.exit_status, 0) << ck.output;
  for (int round = 3; round < 5; ++round) PushRound(client.get(), round);
  ASSERT_FALSE(BitEqual(ReadState(cluster.get(), 1, 2).dense[0], at_checkpoint.dense[0]));

  Subprocess* server = cluster->server(1);
  const pid_t pid = server->pid();
  server->Kill(SIGSTOP);
  // Declared dead after 1 s without heartbeats; the coordinator logs it.
  ASSERT_OK(WaitForLine(dir + "/coordinator.log", "server 1 .*missed heartbeats",
                        Millis(20000)));
  std::filesystem::remove(dir + "/server-1.endpoint");
  server->Kill(SIGCONT);
  ASSERT_OK(cluster->ReloadServerEndpoint(1, Millis(30000))) << server->Log();
  ASSERT_OK(WaitForLine(dir + "/coordinator.log", "server 1 registers again", Millis(20000)));
  EXPECT_TRUE(server->IsRunning());
  EXPECT_EQ(server->pid(), pid);
  const std::string log = server->Log();
  EXPECT_FALSE(GrepLines(log, "was declared dead by the coordinator .*restarting in place").empty())
      << log;
  EXPECT_FALSE(GrepLines(log, "re-executing with --server_id=1 --restore_from=latest").empty())
      << log;
  EXPECT_FALSE(GrepLines(log, "restored .* from checkpoint").empty()) << log;

  const ServerState restored = ReadState(cluster.get(), 1, 2);
  for (int slot = 0; slot < kAdamSlots; ++slot) {
    EXPECT_TRUE(BitEqual(restored.dense[slot], at_checkpoint.dense[slot]))
        << "dense slot " << slot << " differs from the checkpoint";
    EXPECT_TRUE(BitEqual(restored.sparse[slot], at_checkpoint.sparse[slot]))
        << "sparse slot " << slot << " differs from the checkpoint";
  }
  // Training goes on through the restarted server.
  PushRound(client.get(), 5);
  EXPECT_FALSE(BitEqual(ReadState(cluster.get(), 1, 2).dense[0], at_checkpoint.dense[0]));
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

// Under --recovery=checkpoint a worker rides out a server's restart: a push
// issued while server 1 is dead waits, is resent to the restarted server and
// lands exactly once on the restored checkpoint (and once on server 0).
TEST(CheckpointRestoreTest, PushDuringAnOutageIsAppliedOnceToTheRestoredServer) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster,
                       RecoveryCluster::Start(dir, 2, {"--recovery=checkpoint",
                                                       "--heartbeat_timeout_ms=1000"}));
  for (int id = 0; id < 2; ++id) ASSERT_OK(cluster->StartServer(id, kServerFlags));
  ASSERT_OK_AND_ASSIGN(auto client, cluster->Connect("worker"));
  TableOptions t;
  t.name = "s";
  t.type = TableType::kDense;
  t.size = kDenseSize;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;  // w -= g: exact in float, so "applied once" is checked bit for bit.
  t.init.seed = 5;
  t.init.segments.push_back(InitSegment{0, kDenseSize, InitKind::kUniform, -1.0f, 1.0f});
  ASSERT_OK(client->CreateTable(t));
  auto gradient = [](int round) {
    FloatBuffer g(kDenseSize);
    for (uint64_t i = 0; i < kDenseSize; ++i) g[i] = 0.125f * static_cast<float>((i + round) % 8);
    return g;
  };
  ASSERT_OK(client->Push("s", 0, gradient(1)).get());
  ASSERT_OK(client->Clock());
  ASSERT_OK_AND_ASSIGN(CommandResult ck, cluster->Ctl({"checkpoint"}));
  ASSERT_EQ(ck.exit_status, 0) << ck.output;
  const auto ranges = ShardMap::AssignDense(kDenseSize, 2);
  auto read = [&](int id) {
    auto v = ReadDenseSlot(cluster->server_endpoint(id), "s", ranges[id].begin(),
                           ranges[id].end() - ranges[id].begin(), 0);
    EXPECT_OK(v);
    return v.ok() ? *v : std::vector<float>();
  };
  const std::vector<float> checkpointed1 = read(1);
  ASSERT_OK(client->Push("s", 0, gradient(2)).get());  // Lost with server 1: after the checkpoint.
  ASSERT_OK(client->Clock());
  const std::vector<float> before0 = read(0);

  cluster->server(1)->Kill(SIGKILL);
  ASSERT_OK(cluster->server(1)->Wait(Millis(10000)));
  const FloatBuffer g3 = gradient(3);
  std::future<Status> push = client->Push("s", 0, g3);
  EXPECT_EQ(push.wait_for(std::chrono::milliseconds(1500)), std::future_status::timeout)
      << "the push completed while its server was dead: " << push.get();
  ASSERT_OK(cluster->StartServer(1, RestartFlags()));
  ASSERT_EQ(push.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  ASSERT_OK(push.get());

  const std::vector<float> after0 = read(0), after1 = read(1);
  ASSERT_EQ(after1.size(), checkpointed1.size());
  for (size_t i = 0; i < after1.size(); ++i) {
    ASSERT_EQ(after1[i], checkpointed1[i] - g3[ranges[1].begin() + i]) << "server 1 key " << i;
  }
  ASSERT_EQ(after0.size(), before0.size());
  for (size_t i = 0; i < after0.size(); ++i) {
    ASSERT_EQ(after0[i], before0[i] - g3[i]) << "server 0 key " << i;
  }
  // The worker goes on as before.
  ASSERT_OK(client->Clock());
  ASSERT_OK(client->Push("s", 0, gradient(4)).get());
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

TEST(CheckpointRestoreTest, PeriodicCheckpointsEveryClocksArePrunedToKeep) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster,
                       RecoveryCluster::Start(dir, 1, {"--recovery=checkpoint",
                                                       "--checkpoint_every_clocks=2"}));
  ASSERT_OK(cluster->StartServer(0, kServerFlags));
  ASSERT_OK_AND_ASSIGN(auto client, cluster->Connect("worker"));
  ASSERT_OK(client->CreateTable(DenseAdam()));
  ASSERT_OK(client->CreateTable(SparseAdam()));
  // Clocks 1..10 with pauses so the coordinator sees most multiples of 2.
  for (int round = 0; round < 10; ++round) {
    PushRound(client.get(), round);
    std::this_thread::sleep_for(Millis(400));
  }
  std::vector<std::string> names;
  for (int i = 0; i < 50; ++i) {
    ASSERT_OK_AND_ASSIGN(CommandResult status, cluster->Ctl({"status"}));
    if (status.output.find("latest_checkpoint: clock=10 ") != std::string::npos) break;
    std::this_thread::sleep_for(Millis(200));
  }
  ASSERT_OK_AND_ASSIGN(CommandResult list, cluster->Ctl({"checkpoints"}));
  std::printf("%s", list.output.c_str());
  EXPECT_NE(list.output.find("checkpoint clock=10 servers=1"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("server 0 holds 2 valid checkpoint(s)"), std::string::npos)
      << list.output;
  for (const auto& e : fs::directory_iterator(cluster->checkpoint_root(0))) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_EQ(names.size(), 2u) << "--keep_checkpoints=2";
  EXPECT_TRUE(fs::is_directory(cluster->checkpoint_root(0) + "/ckpt-10"));
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

// Writes a checkpoint of one server and stops it; returns the directory.
std::string MakeCheckpoint(RecoveryCluster* cluster) {
  EXPECT_OK(cluster->StartServer(0, kServerFlags));
  auto client = cluster->Connect("worker");
  EXPECT_OK(client);
  if (!client.ok()) return "";
  EXPECT_OK((*client)->CreateTable(DenseAdam()));
  EXPECT_OK((*client)->CreateTable(SparseAdam()));
  PushRound(client->get(), 0);
  auto ck = cluster->Ctl({"checkpoint"});
  EXPECT_OK(ck);
  EXPECT_EQ(ck->exit_status, 0) << ck->output;
  client->reset();
  cluster->server(0)->Kill(SIGKILL);
  EXPECT_OK(cluster->server(0)->Wait(Millis(10000)));
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(cluster->checkpoint_root(0))) {
    dirs.push_back(e.path().string());
  }
  EXPECT_EQ(dirs.size(), 1u);
  return dirs.empty() ? "" : dirs[0];
}

std::string LargestSst(const std::string& dir) {
  std::string best;
  uintmax_t size = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".sst" && e.file_size() > size) {
      size = e.file_size();
      best = e.path().string();
    }
  }
  return best;
}

void CopyTree(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  // Hard links would share the corruption with the original: copy bytes.
  for (const auto& e : fs::directory_iterator(from)) {
    fs::copy_file(e.path(), to + "/" + e.path().filename().string());
  }
}

TEST(CheckpointRestoreTest, CorruptCheckpointIsRefusedNamingIt) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, RecoveryCluster::Start(dir, 1, {"--recovery=checkpoint"}));
  const std::string good = MakeCheckpoint(cluster.get());
  ASSERT_FALSE(good.empty());

  // 1. A truncated SST file.
  const std::string truncated = dir + "/bad/ckpt-truncated";
  CopyTree(good, truncated);
  const std::string sst = LargestSst(truncated);
  ASSERT_FALSE(sst.empty());
  fs::resize_file(sst, fs::file_size(sst) / 2);
  // 2. Flipped bytes inside an SST file (same size: only checksums catch it).
  const std::string flipped = dir + "/bad/ckpt-flipped";
  CopyTree(good, flipped);
  {
    const std::string f = LargestSst(flipped);
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(fs::file_size(f) / 3));
    const char junk[64] = {'\x5a', '\x5a', '\x5a', '\x5a', '\x5a', '\x5a', '\x5a', '\x5a'};
    io.write(junk, sizeof(junk));
  }
  // 3. A garbled manifest.
  const std::string garbled = dir + "/bad/ckpt-garbled";
  CopyTree(good, garbled);
  {
    std::ofstream(garbled + "/RELAXPS_CHECKPOINT", std::ios::app) << "garbage\n";
  }

  for (const std::string& bad : {truncated, flipped, garbled}) {
    ASSERT_OK_AND_ASSIGN(CommandResult r, cluster->RunServerToExit(
                                              0, {"--store=rocksdb", "--restore_from=" + bad}));
    std::printf("--restore_from=%s: exit %d, stderr: %s", bad.c_str(), r.exit_status,
                GrepLines(r.output, "relaxps-server:").empty()
                    ? r.output.c_str()
                    : GrepLines(r.output, "relaxps-server:")[0].c_str());
    std::printf("\n");
    EXPECT_NE(r.exit_status, 0) << r.output;
    EXPECT_LT(r.exit_status, 128) << "crashed instead of exiting: " << r.output;
    EXPECT_NE(r.output.find(bad), std::string::npos) << "stderr does not name " << bad << ":\n"
                                                     << r.output;
  }
  // The refused restores left the data directory usable: the good checkpoint
  // still restores.
  ASSERT_OK(cluster->StartServer(0, {"--store=rocksdb", "--restore_from=" + good}));
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

TEST(CheckpointRestoreTest, TruncatedStoreFileIsRefusedNamingIt) {
  const std::string dir = MakeTempDir();
  ASSERT_OK_AND_ASSIGN(auto cluster, RecoveryCluster::Start(dir, 1, {"--recovery=checkpoint"}));
  ASSERT_FALSE(MakeCheckpoint(cluster.get()).empty());
  // Truncate the store's largest table file.
  const std::string manifest = LargestSst(cluster->data_dir(0));
  ASSERT_FALSE(manifest.empty());
  fs::resize_file(manifest, fs::file_size(manifest) / 2 + 1);
  ASSERT_OK_AND_ASSIGN(CommandResult r, cluster->RunServerToExit(0, {"--store=rocksdb"}));
  const std::string truncated = manifest;
  std::printf("truncated %s: exit %d, stderr: %s\n", manifest.c_str(), r.exit_status,
              r.output.c_str());
  EXPECT_NE(r.exit_status, 0) << r.output;
  EXPECT_LT(r.exit_status, 128) << "crashed instead of exiting: " << r.output;
  EXPECT_NE(r.output.find(truncated), std::string::npos) << r.output;
  if (!::testing::Test::HasFailure()) RemoveTree(dir);
}

}  // namespace
}  // namespace test
}  // namespace relaxps
