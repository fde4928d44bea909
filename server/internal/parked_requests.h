// ParkedRequests: the memory a server holds for requests that wait (pulls
// parked at a consistency gate until their clock or their deadline), per
// peer and in total, and the limits on it.
//
// Before the limits, 300,000 PULLs for a clock no worker reached held 182 MB
// (about 650 B each) for up to a day. ServerImpl::ServePull asks Check()
// before a pull may park (a peer at its limit is refused with
// FailedPrecondition, even a pull that would not have waited), and once the
// pull did park takes a Ticket for its bytes; the ticket gives them back
// when the pull is answered or expires.
//
// A parked request is counted as kOverheadBytes (its header, reply closure
// and waiter; measured at about 650 B) plus the payload it keeps (a
// PUSH_PULL's gradient is dropped once applied, so none for dense pulls).
//
// Thread-safety: not synchronized; the server's loop thread only (tickets
// too).
#ifndef RELAXPS_SERVER_INTERNAL_PARKED_REQUESTS_H_
#define RELAXPS_SERVER_INTERNAL_PARKED_REQUESTS_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "common/status.h"

namespace relaxps {
namespace server_internal {

class ParkedRequests {
 public:
  static constexpr int64_t kOverheadBytes = 1024;

  // The bytes of one parked request from `peer` keeping `payload_bytes`.
  static int64_t BytesOf(const std::string& peer, size_t payload_bytes) {
    return kOverheadBytes + static_cast<int64_t>(peer.size() + payload_bytes);
  }

  // Holds `bytes` of one peer's parked request until destroyed or Release()d.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept { *this = std::move(other); }
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Release(); }
    void Release();

   private:
    friend class ParkedRequests;
    ParkedRequests* owner_ = nullptr;
    std::string peer_;
    int64_t bytes_ = 0;
  };

  // Limits in bytes; <= 0: unlimited.
  ParkedRequests(int64_t per_peer_limit, int64_t total_limit)
      : per_peer_limit_(per_peer_limit), total_limit_(total_limit) {}
  ParkedRequests(const ParkedRequests&) = delete;
  ParkedRequests& operator=(const ParkedRequests&) = delete;
  // REQUIRES: every ticket released (they refer to this object).
  ~ParkedRequests() = default;

  // OK if a request of `bytes` from `peer` may park now; FailedPrecondition
  // naming the limit (and its flag) if it would pass one.
  Status Check(const std::string& peer, int64_t bytes) const;
  // Counts `bytes` for `peer` until the ticket goes (no limit checked).
  Ticket Charge(const std::string& peer, int64_t bytes);

  int64_t total_bytes() const { return total_; }
  int64_t peer_bytes(const std::string& peer) const;
  // Peers with something parked.
  size_t peers() const { return per_peer_.size(); }
  // Bytes given back since the last call (the server trims malloc's heap
  // once enough was freed).
  int64_t TakeReleasedBytes() { return std::exchange(released_, 0); }

 private:
  void Give(const std::string& peer, int64_t bytes);

  // Constant after construction.
  const int64_t per_peer_limit_;
  const int64_t total_limit_;

  int64_t total_ = 0;
  int64_t released_ = 0;
  std::unordered_map<std::string, int64_t> per_peer_;  // Only peers with bytes > 0.
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_PARKED_REQUESTS_H_
