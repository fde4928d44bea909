#include "common/coordinator_peers.h"

#include <future>
#include <memory>

#include "common/advertise.h"

namespace relaxps {
namespace {

// What a coordinator may hand us as another coordinator's endpoint.
bool PlausibleEndpoint(const std::string& e) {
  return e.size() < 256 && (e.rfind("tcp://", 0) == 0 || e.rfind("ipc://", 0) == 0) &&
         e.find(',') == std::string::npos;
}

}  // namespace

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
  ASSIGN_OR_RETURN(std::vector<std::string> given, Split(endpoints));
  // An unresolvable host is a clear error now, not a timeout later.
  for (const std::string& e : given) RETURN_IF_ERROR(CheckHostResolves(e));
  MutexLock l(&mu_);
  transport_ = transport;
  for (const std::string& e : given) AddLocked(e);
  return Status::OK();
}

size_t CoordinatorPeers::AddLocked(const std::string& endpoint) {
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (endpoints_[i] == endpoint) return i;
  }
  endpoints_.push_back(endpoint);
  peers_.push_back(transport_->Connect(endpoint));
  return endpoints_.size() - 1;
}

int CoordinatorPeers::current() const {
  MutexLock l(&mu_);
  return peers_[index_ % peers_.size()];
}

std::string CoordinatorPeers::current_endpoint() const {
  MutexLock l(&mu_);
  return endpoints_[index_ % endpoints_.size()];
}

size_t CoordinatorPeers::size() const {
  MutexLock l(&mu_);
  return peers_.size();
}

void CoordinatorPeers::Rotate(int failed_peer) {
  MutexLock l(&mu_);
  if (peers_.size() < 2 || peers_[index_ % peers_.size()] != failed_peer) return;
  index_ = (index_ + 1) % peers_.size();
}

bool CoordinatorPeers::ShouldRotate(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
}

void CoordinatorPeers::Follow(const std::string& endpoint) {
  MutexLock l(&mu_);
  if (transport_ == nullptr) return;  // Before Connect(), which finds the leader itself.
  if (endpoints_.size() >= kMaxCoordinators && endpoints_[index_ % endpoints_.size()] != endpoint) {
    bool known = false;
    for (const std::string& e : endpoints_) known = known || e == endpoint;
    if (!known) return;
  }
  const size_t i = AddLocked(endpoint);
  if (i != index_ % peers_.size()) {
    LOG(INFO) << "coordinator: following the leader at " << endpoint << " (was "
              << endpoints_[index_ % endpoints_.size()] << ")";
  }
  index_ = i;
}

bool CoordinatorPeers::Observe(int peer, const Status& status, const Message& reply) {
  const wire::Header& h = reply.header;
  {
    MutexLock l(&mu_);
    for (const std::string& e : h.coordinator_endpoints()) {
      if (endpoints_.size() >= kMaxCoordinators) break;
      if (PlausibleEndpoint(e)) AddLocked(e);
    }
  }
  const std::string& leader = h.leader_endpoint();
  if (!status.ok() && !leader.empty() && PlausibleEndpoint(leader)) {
    {
      MutexLock l(&mu_);
      // Another caller may have moved already; follow only from `peer`.
      if (peers_[index_ % peers_.size()] != peer) return true;
      if (endpoints_[index_ % endpoints_.size()] == leader) return false;
    }
    Follow(leader);
    return true;
  }
  if (!ShouldRotate(status)) return false;
  const int before = current();
  Rotate(peer);
  return current() != before;
}

void CoordinatorPeers::Call(Message msg, int timeout_ms, Transport::ReplyCallback done) {
  const int peer = current();
  transport()->Call(peer, std::move(msg), timeout_ms,
                   [this, peer, done = std::move(done)](const Status& s, Message&& reply) {
                     Observe(peer, s, reply);
                     done(s, std::move(reply));
                   });
}

StatusOr<Message> CoordinatorPeers::CallSync(Message msg, int timeout_ms, bool* moved) {
  const int peer = current();
  auto promise = std::make_shared<std::promise<std::pair<Status, Message>>>();
  auto future = promise->get_future();
  transport()->Call(peer, std::move(msg), timeout_ms, [promise](const Status& s, Message&& r) {
    promise->set_value({s, std::move(r)});
  });
  std::pair<Status, Message> got = future.get();
  const bool m = Observe(peer, got.first, got.second);
  if (moved != nullptr) *moved = m;
  if (!got.first.ok()) return got.first;
  return std::move(got.second);
}

StatusOr<Message> CoordinatorPeers::CallFollowing(const wire::Header& header, int timeout_ms) {
  for (size_t attempt = 0;; ++attempt) {
    Message msg;
    msg.header = header;
    bool moved = false;
    StatusOr<Message> reply = CallSync(std::move(msg), timeout_ms, &moved);
    if (!moved || attempt >= kMaxCoordinators) return reply;
  }
}

}  // namespace relaxps
