#include "tests/elastic/joined_server.h"

#include <cctype>

namespace relaxps {
namespace test {

Status JoinServer(RecoveryCluster* cluster, int id, const std::vector<std::string>& flags,
                  const std::string& events, uint64_t begin, std::unique_ptr<Subprocess>* joined,
                  std::string* endpoint) {
  const std::string ep_file = cluster->dir() + "/server-joined.endpoint";
  const std::string log = cluster->dir() + "/server-joined.log";
  std::vector<std::string> argv = {BinPath("relaxps-server"),
                                   "--coordinator=" + cluster->coordinator_endpoint(), "--join",
                                   "--data_dir=" + cluster->data_dir(id),
                                   "--endpoint_file=" + ep_file};
  argv.insert(argv.end(), flags.begin(), flags.end());
  ASSIGN_OR_RETURN(*joined, Subprocess::Start(argv, log));
  RETURN_IF_ERROR(WaitForLine(log, "listening on", Millis(30000), joined->get()).status());
  ASSIGN_OR_RETURN(std::string ep, ReadFile(ep_file));
  while (!ep.empty() && std::isspace(static_cast<unsigned char>(ep.back()))) ep.pop_back();
  *endpoint = ep;
  ASSIGN_OR_RETURN(std::string done,
                   WaitForLine(events, "\"kind\":\"range_move_done\"", Millis(30000)));
  if (done.find("\"destination\":" + std::to_string(id)) == std::string::npos ||
      done.find("\"begin\":" + std::to_string(begin)) == std::string::npos) {
    return InternalError("not the expected move: " + done);
  }
  return Status::OK();
}

}  // namespace test
}  // namespace relaxps
