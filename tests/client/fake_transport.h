// A fake Transport for unit tests (router_test, local_fallback_test,
// coordinator_peers_test, coordinator_link_test): no sockets, no threads, no
// time.
#ifndef RELAXPS_TESTS_CLIENT_FAKE_TRANSPORT_H_
#define RELAXPS_TESTS_CLIENT_FAKE_TRANSPORT_H_

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"
#include "common/transport.h"

namespace relaxps {
namespace client_internal {

// A Transport that connects nowhere: Connect() hands out one handle per
// (endpoint, key), as RpcClient does. A call is answered at once, inline:
// OK with an empty reply, DeadlineExceeded for a peer marked down, the
// answer set for the peer (SetAnswer), or the responder's (SetResponder),
// which comes first; a replier (SetReplier) comes before all of them.
// Records every call and cancellation.
class FakeTransport final : public Transport {
 public:
  using Transport::Connect;
  int Connect(const std::string& endpoint, const std::string& curve_server_key) override {
    MutexLock l(&mu_);
    connects_.emplace_back(endpoint, curve_server_key);
    auto [it, added] =
        handles_.emplace(std::make_pair(endpoint, curve_server_key), static_cast<int>(endpoints_.size()));
    if (added) endpoints_.push_back(endpoint);
    return it->second;
  }
  void Call(int peer, Message request, int /*timeout_ms*/, ReplyCallback done) override {
    bool down = false;
    std::optional<std::pair<Status, wire::Header>> answer;
    Responder responder;
    Replier replier;
    {
      MutexLock l(&mu_);
      calls_.emplace_back(peer, request.header.type());
      down = down_.count(peer) != 0;
      if (auto it = answers_.find(peer); it != answers_.end()) answer = it->second;
      responder = responder_;
      replier = replier_;
    }
    if (replier) {
      if (auto r = replier(peer, request); r.has_value()) {
        done(r->first, std::move(r->second));
        return;
      }
    }
    if (responder) {
      if (auto r = responder(peer, request); r.has_value()) answer = std::move(r);
    }
    if (answer.has_value()) {
      Message reply;
      reply.header = answer->second;
      done(answer->first, std::move(reply));
    } else if (down) {
      done(DeadlineExceededError("peer " + std::to_string(peer) + " is down"), Message());
    } else {
      done(Status::OK(), Message());
    }
  }
  void CancelAll(const Status& /*status*/) override {}
  void CancelPeer(int peer, const Status& status) override {
    MutexLock l(&mu_);
    cancelled_.push_back(peer);
    cancel_codes_.push_back(status.code());
  }

  // Calls to `peer` fail (DeadlineExceeded) while it is down.
  void SetDown(int peer, bool down) {
    MutexLock l(&mu_);
    if (down) {
      down_.insert(peer);
    } else {
      down_.erase(peer);
    }
  }
  // Calls to `peer` are answered with `status` and a reply of `header`
  // (e.g. a standby's redirect) from now on.
  void SetAnswer(int peer, const Status& status, const wire::Header& header) {
    MutexLock l(&mu_);
    answers_[peer] = {status, header};
  }
  // Every call is answered by `fn` (called without the fake's lock held,
  // on the caller's thread) from now on; nullopt: as without it.
  using Responder = std::function<std::optional<std::pair<Status, wire::Header>>(
      int peer, const Message& request)>;
  void SetResponder(Responder fn) {
    MutexLock l(&mu_);
    responder_ = std::move(fn);
  }
  // Every call is answered by `fn` with a whole reply (payload frames
  // included; called without the fake's lock held, on the caller's thread),
  // before the responder; nullopt: as without it.
  using Replier =
      std::function<std::optional<std::pair<Status, Message>>(int peer, const Message& request)>;
  void SetReplier(Replier fn) {
    MutexLock l(&mu_);
    replier_ = std::move(fn);
  }
  std::vector<std::pair<int, wire::MsgType>> calls() {
    MutexLock l(&mu_);
    return calls_;
  }
  std::vector<int> cancelled() {
    MutexLock l(&mu_);
    return cancelled_;
  }
  // The code each CancelPeer failed its calls with, in order.
  std::vector<StatusCode> cancel_codes() {
    MutexLock l(&mu_);
    return cancel_codes_;
  }
  TransportStats stats() const override { return TransportStats(); }

  // The handle Connect() gave (or would give) `endpoint` with no key; -1 if never connected.
  int HandleOf(const std::string& endpoint, const std::string& key = std::string()) {
    MutexLock l(&mu_);
    auto it = handles_.find(std::make_pair(endpoint, key));
    return it == handles_.end() ? -1 : it->second;
  }
  std::string EndpointOf(int handle) {
    MutexLock l(&mu_);
    return handle >= 0 && handle < static_cast<int>(endpoints_.size()) ? endpoints_[handle] : "";
  }
  bool EverConnected(const std::string& endpoint) {
    MutexLock l(&mu_);
    for (const auto& c : connects_) {
      if (c.first == endpoint) return true;
    }
    return false;
  }

 private:
  Mutex mu_;
  std::map<std::pair<std::string, std::string>, int> handles_ GUARDED_BY(mu_);
  std::vector<std::string> endpoints_ GUARDED_BY(mu_);  // Handle -> endpoint.
  std::vector<std::pair<std::string, std::string>> connects_ GUARDED_BY(mu_);
  std::set<int> down_ GUARDED_BY(mu_);
  std::map<int, std::pair<Status, wire::Header>> answers_ GUARDED_BY(mu_);
  std::vector<std::pair<int, wire::MsgType>> calls_ GUARDED_BY(mu_);
  std::vector<int> cancelled_ GUARDED_BY(mu_);
  std::vector<StatusCode> cancel_codes_ GUARDED_BY(mu_);
  Responder responder_ GUARDED_BY(mu_);
  Replier replier_ GUARDED_BY(mu_);
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_TESTS_CLIENT_FAKE_TRANSPORT_H_
