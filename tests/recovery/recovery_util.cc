#include "tests/recovery/recovery_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/rpc_client.h"
#include "common/wire.h"

namespace relaxps {
namespace test {
namespace {

constexpr Millis kStartTimeout{60000};

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

StatusOr<std::vector<float>> Call(const std::string& endpoint, Message m, size_t expect) {
  RpcClient rpc;
  ASSIGN_OR_RETURN(Message reply, rpc.CallSync(rpc.Connect(endpoint), std::move(m), 10000));
  if (reply.frames.size() != 1 || reply.frames[0].size() != expect * sizeof(float)) {
    return InternalError("unexpected reply payload");
  }
  std::vector<float> out(expect);
  std::memcpy(out.data(), reply.frames[0].data(), expect * sizeof(float));
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<RecoveryCluster>> RecoveryCluster::Start(const std::string& dir,
                                                                  int num_servers,
                                                                  std::vector<std::string> flags) {
  std::unique_ptr<RecoveryCluster> c(new RecoveryCluster());
  c->dir_ = dir;
  const std::string ep_file = dir + "/coordinator.endpoint";
  std::vector<std::string> argv = {BinPath("relaxps-coordinator"), "--bind=tcp://127.0.0.1:*",
                                   "--endpoint_file=" + ep_file,
                                   "--num_servers=" + std::to_string(num_servers)};
  for (std::string& f : flags) argv.push_back(std::move(f));
  ASSIGN_OR_RETURN(c->coordinator_, Subprocess::Start(argv, dir + "/coordinator.log"));
  RETURN_IF_ERROR(WaitForFile(ep_file, kStartTimeout));
  ASSIGN_OR_RETURN(std::string ep, ReadFile(ep_file));
  c->coordinator_endpoint_ = Trim(ep);
  return c;
}

Status RecoveryCluster::StartServer(int id, const std::vector<std::string>& flags) {
  const std::string name = dir_ + "/server-" + std::to_string(id);
  const std::string ep_file = name + ".endpoint";
  ::unlink(ep_file.c_str());
  std::vector<std::string> argv = {BinPath("relaxps-server"),
                                   "--coordinator=" + coordinator_endpoint_,
                                   "--server_id=" + std::to_string(id),
                                   "--data_dir=" + data_dir(id), "--endpoint_file=" + ep_file};
  for (const std::string& f : flags) argv.push_back(f);
  const std::string log = name + "." + std::to_string(starts_[id]++) + ".log";
  ASSIGN_OR_RETURN(servers_[id], Subprocess::Start(argv, log));
  RETURN_IF_ERROR(
      WaitForLine(log, "listening on", kStartTimeout, servers_[id].get()).status().WithPrefix(
          "server " + std::to_string(id) + ": " + servers_[id]->Log()));
  ASSIGN_OR_RETURN(std::string ep, ReadFile(ep_file));
  server_endpoints_[id] = Trim(ep);
  return Status::OK();
}

Status RecoveryCluster::ReloadServerEndpoint(int id, Millis timeout) {
  const std::string ep_file = dir_ + "/server-" + std::to_string(id) + ".endpoint";
  RETURN_IF_ERROR(WaitForFile(ep_file, timeout));
  ASSIGN_OR_RETURN(std::string ep, ReadFile(ep_file));
  server_endpoints_[id] = Trim(ep);
  return Status::OK();
}

StatusOr<CommandResult> RecoveryCluster::RunServerToExit(int id,
                                                         const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {BinPath("relaxps-server"),
                                   "--coordinator=" + coordinator_endpoint_,
                                   "--server_id=" + std::to_string(id),
                                   "--data_dir=" + data_dir(id)};
  for (const std::string& f : flags) argv.push_back(f);
  const std::string name = dir_ + "/server-" + std::to_string(id) + ".refused." +
                           std::to_string(starts_[id]++);
  SubprocessOptions o;
  o.log_path = name + ".log";
  o.stderr_path = name + ".stderr";
  ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> p, Subprocess::Start(argv, o));
  ASSIGN_OR_RETURN(int code, p->Wait(Millis(60000)));
  CommandResult r;
  r.exit_status = code;
  StatusOr<std::string> err = ReadFile(o.stderr_path);
  r.output = err.ok() ? *err : "";
  return r;
}

StatusOr<std::unique_ptr<Client>> RecoveryCluster::Connect(
    const std::string& role, const std::function<void(ClientOptions*)>& tweak) {
  ClientOptions o;
  o.coordinator = coordinator_endpoint_;
  o.role = role;
  o.request_timeout_ms = 10000 * TimeScale();
  // A sanitized server can take longer than the default 200 ms to answer;
  // under stateless recovery the client would then serve the step locally.
  o.local_after_ms *= TimeScale();
  if (tweak) tweak(&o);
  return Client::Connect(o);
}

TableOptions DenseAdamTable(const std::string& name, uint64_t size) {
  TableOptions t;
  t.name = name;
  t.type = TableType::kDense;
  t.size = size;
  t.optimizer.name = "adam";
  t.optimizer.lr = 0.01f;
  t.init.seed = 3;
  t.init.segments.push_back(InitSegment{0, size, InitKind::kUniform, -1.0f, 1.0f});
  return t;
}

StatusOr<std::vector<std::unique_ptr<Client>>> ConnectWorkers(RecoveryCluster* cluster, int n,
                                                              const TableOptions& table) {
  std::vector<std::unique_ptr<Client>> workers;
  for (int k = 0; k < n; ++k) {
    ASSIGN_OR_RETURN(std::unique_ptr<Client> c, cluster->Connect("worker"));
    RETURN_IF_ERROR(c->CreateTable(table));
    workers.push_back(std::move(c));
  }
  std::sort(workers.begin(), workers.end(),
            [](const auto& a, const auto& b) { return a->worker_id() < b->worker_id(); });
  return workers;
}

StatusOr<uint64_t> RecoveryCluster::AppliedParts(int worker, uint64_t incarnation) {
  ASSIGN_OR_RETURN(CommandResult r, Ctl({"--json", "stats"}));
  if (r.exit_status != 0) return InternalError("relaxps-ctl stats failed: " + r.output);
  // {"worker":W,"incarnation":"I","parts":"P"} (64-bit integers are strings).
  const std::regex entry(R"re(\{"worker":(\d+),"incarnation":"?(\d+)"?,"parts":"?(\d+)"?\})re");
  uint64_t parts = 0;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), entry), end; it != end; ++it) {
    if (std::stoi((*it)[1]) == worker && std::stoull((*it)[2]) == incarnation) {
      parts += std::stoull((*it)[3]);
    }
  }
  return parts;
}

StatusOr<CommandResult> RecoveryCluster::Ctl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BinPath("relaxps-ctl"), "--coordinator=" + coordinator_endpoint_};
  for (const std::string& a : args) argv.push_back(a);
  return RunCommand(argv, dir_ + "/ctl.log", Millis(120000));
}

StatusOr<std::vector<float>> ReadDenseSlot(const std::string& endpoint, const std::string& table,
                                           uint64_t begin, uint64_t n, int slot) {
  Message m;
  m.header.set_type(wire::PULL);
  m.header.set_sender(-1);
  m.header.set_table(table);
  m.header.set_key_begin(begin);
  m.header.set_key_count(n);
  m.header.set_slot(slot);
  return Call(endpoint, std::move(m), n);
}

StatusOr<wire::ServerStats> TryServerStats(const std::string& endpoint) {
  Message m;
  m.header.set_type(wire::SERVER_STATS);
  RpcClient rpc;
  ASSIGN_OR_RETURN(Message reply, rpc.CallSync(rpc.Connect(endpoint), std::move(m), 5000));
  return reply.header.server_stats();
}

StatusOr<uint64_t> ClientRequests(RecoveryCluster* cluster, const std::vector<int>& ids) {
  uint64_t total = 0;
  for (int id : ids) {
    ASSIGN_OR_RETURN(wire::ServerStats s, TryServerStats(cluster->server_endpoint(id)));
    total += s.requests() - s.forwarded();
  }
  return total;
}

StatusOr<std::vector<float>> ReadRowsSlot(const std::string& endpoint, const std::string& table,
                                          const std::vector<uint64_t>& ids, int slot,
                                          uint64_t bucket) {
  Message m;
  m.header.set_type(wire::PULL_ROWS);
  m.header.set_sender(-1);
  m.header.set_table(table);
  m.header.set_key_begin(bucket);
  m.header.set_key_count(ids.size());
  m.header.set_slot(slot);
  m.frames.push_back(Frame::Copy(ids.data(), ids.size() * sizeof(uint64_t)));
  // Row width is unknown here: size the reply from its frame.
  RpcClient rpc;
  ASSIGN_OR_RETURN(Message reply, rpc.CallSync(rpc.Connect(endpoint), std::move(m), 10000));
  if (reply.frames.size() != 1) return InternalError("PULL_ROWS reply without a frame");
  std::vector<float> out(reply.frames[0].size() / sizeof(float));
  std::memcpy(out.data(), reply.frames[0].data(), out.size() * sizeof(float));
  return out;
}

int64_t PeakRssKb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream in(line.substr(6));
      int64_t kb = -1;
      in >> kb;
      return kb;
    }
  }
  return -1;
}

}  // namespace test
}  // namespace relaxps
