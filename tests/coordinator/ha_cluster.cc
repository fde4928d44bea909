#include "tests/coordinator/ha_cluster.h"

#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/rpc_client.h"

namespace relaxps {
namespace test {
namespace {

constexpr Millis kStartTimeout{60000};

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

StatusOr<std::unique_ptr<LocalZooKeeper>> LocalZooKeeper::Start(const std::string& dir,
                                                                 bool* missing) {
  *missing = false;
  std::unique_ptr<LocalZooKeeper> zk(new LocalZooKeeper());
  zk->dir_ = dir + "/zk";
  ASSIGN_OR_RETURN(CommandResult r,
                   RunCommand({"/bin/bash", SourcePath("scripts/zk.sh"), "start", zk->dir_, "200"},
                              dir + "/zk-start.log", Millis(60000)));
  if (r.exit_status == 3) {
    *missing = true;
    return UnavailableError(Trim(r.output));
  }
  if (r.exit_status != 0) return UnavailableError("scripts/zk.sh start failed: " + r.output);
  ASSIGN_OR_RETURN(std::string hp, ReadFile(zk->dir_ + "/zk.hostport"));
  zk->hostport_ = Trim(hp);
  return zk;
}

LocalZooKeeper::~LocalZooKeeper() {
  RunCommand({"/bin/bash", SourcePath("scripts/zk.sh"), "stop", dir_}, dir_ + "/../zk-stop.log",
             Millis(30000))
      .status()
      .IgnoreError();
}

Status HaCluster::StartCoordinator(int i) {
  const std::string name = dir_ + "/coordinator-" + std::to_string(i);
  const std::string ep_file = name + ".endpoint";
  ::unlink(ep_file.c_str());
  auto known = coordinator_endpoints_.find(i);
  std::vector<std::string> argv = {
      BinPath("relaxps-coordinator"),
      "--bind=" + (known != coordinator_endpoints_.end() ? known->second : "tcp://127.0.0.1:*"),
      "--endpoint_file=" + ep_file, "--num_servers=" + std::to_string(num_servers_),
      "--exit_when_done=false"};
  for (const std::string& f : flags_) argv.push_back(f);
  const std::string log = name + "." + std::to_string(coordinator_starts_[i]++) + ".log";
  ASSIGN_OR_RETURN(coordinators_[i], Subprocess::Start(argv, log));
  RETURN_IF_ERROR(WaitForLine(log, "listening on", kStartTimeout, coordinators_[i].get())
                      .status()
                      .WithPrefix("coordinator " + std::to_string(i)));
  ASSIGN_OR_RETURN(std::string ep, ReadFile(ep_file));
  coordinator_endpoints_[i] = Trim(ep);
  return Status::OK();
}

int HaCluster::Leader(int timeout_ms) const {
  const auto until = std::chrono::steady_clock::now() + Scaled(Millis(timeout_ms));
  while (std::chrono::steady_clock::now() < until) {
    for (const auto& [i, ep] : coordinator_endpoints_) {
      if (MapVersion(ep, 200).ok()) return i;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

void HaCluster::KillCoordinator(int i) {
  coordinators_.at(i)->Kill(SIGKILL);
  coordinators_.at(i)->Wait(Millis(10000)).status().IgnoreError();
}

std::string HaCluster::coordinator_list() const {
  std::string out;
  for (const auto& [i, ep] : coordinator_endpoints_) out += (out.empty() ? "" : ",") + ep;
  return out;
}

Status HaCluster::StartServer(int id, const std::vector<std::string>& flags) {
  const std::string name = dir_ + "/server-" + std::to_string(id);
  const std::string ep_file = name + ".endpoint";
  ::unlink(ep_file.c_str());
  std::vector<std::string> argv = {BinPath("relaxps-server"), "--server_id=" + std::to_string(id),
                                   "--data_dir=" + name + ".data", "--endpoint_file=" + ep_file};
  bool finds_coordinator = false;
  for (const std::string& f : flags) {
    finds_coordinator = finds_coordinator || f.rfind("--coordination=", 0) == 0 ||
                        f.rfind("--coordinator=", 0) == 0;
    argv.push_back(f);
  }
  if (!finds_coordinator) argv.push_back("--coordinator=" + coordinator_list());
  ASSIGN_OR_RETURN(servers_[id], Subprocess::Start(argv, name + ".log"));
  RETURN_IF_ERROR(WaitForLine(name + ".log", "listening on", kStartTimeout, servers_[id].get())
                      .status()
                      .WithPrefix("server " + std::to_string(id)));
  ASSIGN_OR_RETURN(std::string ep, ReadFile(ep_file));
  server_endpoints_[id] = Trim(ep);
  return Status::OK();
}

TableOptions OnesTable(const std::string& name, uint64_t size) {
  TableOptions t;
  t.name = name;
  t.type = TableType::kDense;
  t.size = size;
  t.optimizer.name = "sgd";
  t.optimizer.lr = 1.0f;
  t.init.segments.push_back(InitSegment{0, size, InitKind::kConstant, 0.0f, 0.0f});
  return t;
}

PushTrainer::PushTrainer(std::unique_ptr<Client> client, uint64_t size)
    : client_(std::move(client)) {
  thread_ = std::thread([this, size] {
    FloatBuffer ones(size);
    for (uint64_t i = 0; i < size; ++i) ones[i] = 1.0f;
    while (!stop_.load()) {
      Status s = client_->Push("w", 0, ones).get();
      if (s.ok()) {
        acked_.fetch_add(1);
      } else {
        failed_.fetch_add(1);
        LOG(WARNING) << "push failed: " << s;
      }
      if (!client_->Clock().ok()) failed_.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
}

void PushTrainer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

bool PushTrainer::AckedMore(int64_t n, int timeout_ms) {
  const int64_t target = acked() + n;
  return Eventually([&] { return acked() >= target; },
                    static_cast<int>(Scaled(Millis(timeout_ms)).count()));
}

StatusOr<wire::ShardMap> GetShardMap(const std::string& endpoint, int timeout_ms) {
  RpcClient rpc;
  const int peer = rpc.Connect(endpoint);
  Message m;
  m.header.set_type(wire::GET_SHARD_MAP);
  ASSIGN_OR_RETURN(Message reply, rpc.CallSync(peer, std::move(m), timeout_ms));
  return reply.header.shard_map();
}

StatusOr<uint64_t> MapVersion(const std::string& endpoint, int timeout_ms) {
  ASSIGN_OR_RETURN(wire::ShardMap map, GetShardMap(endpoint, timeout_ms));
  return map.version();
}

}  // namespace test
}  // namespace relaxps
