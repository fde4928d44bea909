#include "common/coordinator_peers.h"

#include "common/advertise.h"

namespace relaxps {

StatusOr<std::vector<std::string>> CoordinatorPeers::Split(const std::string& endpoints) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = endpoints.find(',', start);
    const std::string item =
        endpoints.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) {
      return InvalidArgumentError("--coordinator '" + endpoints +
                                  "' has an empty endpoint (give ENDPOINT[,ENDPOINT...])");
    }
    out.push_back(item);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

Status CoordinatorPeers::Connect(Transport* transport, const std::string& endpoints) {
  ASSIGN_OR_RETURN(endpoints_, Split(endpoints));
  // An unresolvable host is a clear error now, not a timeout later.
  for (const std::string& e : endpoints_) RETURN_IF_ERROR(CheckHostResolves(e));
  for (const std::string& e : endpoints_) peers_.push_back(transport->Connect(e));
  return Status::OK();
}

void CoordinatorPeers::Rotate(int failed_peer) {
  size_t i = index_.load();
  if (peers_.size() < 2 || peers_[i % peers_.size()] != failed_peer) return;
  index_.compare_exchange_strong(i, i + 1);
}

bool CoordinatorPeers::ShouldRotate(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

}  // namespace relaxps
