#include "server/internal/parked_requests.h"

#include <utility>

namespace relaxps {
namespace server_internal {
namespace {

std::string Kib(int64_t bytes) { return std::to_string((bytes + 1023) >> 10) + " KiB"; }

}  // namespace

ParkedRequests::Ticket& ParkedRequests::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Release();
    owner_ = std::exchange(other.owner_, nullptr);
    peer_ = std::move(other.peer_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void ParkedRequests::Ticket::Release() {
  if (owner_ == nullptr) return;
  owner_->Give(peer_, bytes_);
  owner_ = nullptr;
  bytes_ = 0;
}

Status ParkedRequests::Check(const std::string& peer, int64_t bytes) const {
  if (total_limit_ > 0 && total_ + bytes > total_limit_) {
    return FailedPreconditionError("the server holds " + Kib(total_) +
                                   " of waiting requests, the most it parks (--max_parked_mb=" +
                                   std::to_string(total_limit_ >> 20) +
                                   "); retry once earlier requests are answered");
  }
  const int64_t mine = peer_bytes(peer);
  if (per_peer_limit_ > 0 && mine + bytes > per_peer_limit_) {
    return FailedPreconditionError("this connection has " + Kib(mine) +
                                   " of waiting requests at the server, the most one peer may "
                                   "park (--max_parked_mb_per_peer=" +
                                   std::to_string(per_peer_limit_ >> 20) + ")");
  }
  return Status::OK();
}

ParkedRequests::Ticket ParkedRequests::Charge(const std::string& peer, int64_t bytes) {
  Ticket t;
  if (bytes <= 0) return t;
  per_peer_[peer] += bytes;
  total_ += bytes;
  t.owner_ = this;
  t.peer_ = peer;
  t.bytes_ = bytes;
  return t;
}

int64_t ParkedRequests::peer_bytes(const std::string& peer) const {
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

void ParkedRequests::Give(const std::string& peer, int64_t bytes) {
  total_ -= bytes;
  released_ += bytes;
  auto it = per_peer_.find(peer);
  if (it == per_peer_.end()) return;
  it->second -= bytes;
  if (it->second <= 0) per_peer_.erase(it);
}

}  // namespace server_internal
}  // namespace relaxps
