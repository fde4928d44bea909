#include "common/loop_client.h"

#include <iterator>
#include <utility>

namespace relaxps {

LoopClient::LoopClient(RpcServer* loop, const RpcClientOptions& options, int sweep_ms)
    : loop_(loop),
      options_(options),
      clock_(ClockOrReal(options.clock)),
      log_limiter_(clock_) {
  loop_->AddTimer(sweep_ms, [this] { ExpireDeadlines(); });
}

int LoopClient::Connect(const std::string& endpoint, const std::string& curve_server_key) {
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i].endpoint == endpoint && peers_[i].curve_server_key == curve_server_key) {
      return static_cast<int>(i);
    }
  }
  const int peer = static_cast<int>(peers_.size());
  auto socket =
      std::make_unique<zmq::socket_t>(NewDealerSocket(loop_->context(), options_, curve_server_key));
  try {
    socket->connect(ConnectAddress(options_, endpoint));
  } catch (const zmq::error_t& e) {
    // Sends to it fail (Unavailable) and complete their callbacks.
    LOG(ERROR) << "cannot connect to " << endpoint << ": " << e.what();
  }
  loop_->AddSocket(socket.get(), [this, peer] { Drain(peer); });
  peers_.push_back(Peer{endpoint, curve_server_key, std::move(socket)});
  return peer;
}

void LoopClient::Call(int peer, Message request, int timeout_ms, ReplyCallback done) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) {
    FailLater(std::move(done), InvalidArgumentError("no such peer " + std::to_string(peer)));
    return;
  }
  if (timeout_ms <= 0) timeout_ms = options_.default_timeout_ms;
  const uint64_t id = next_request_id_++;
  request.header.set_request_id(id);
  request.header.set_is_reply(false);
  request.header.set_deadline_unix_ms(clock_->NowUnixMs() + timeout_ms);
  ++requests_;
  Status s = SendMessage(*peers_[peer].socket, "", std::move(request));
  if (!s.ok()) {
    FailLater(std::move(done), s.WithPrefix("send to " + peers_[peer].endpoint));
    return;
  }
  auto deadline = deadlines_.emplace(clock_->NowMs() + timeout_ms, id);
  pending_.emplace(id, Pending{std::move(done), deadline});
}

void LoopClient::FailLater(ReplyCallback done, Status status) {
  loop_->Post([done = std::move(done), status = std::move(status)] { done(status, Message()); });
}

void LoopClient::Drain(int peer) {
  zmq::socket_t& socket = *peers_[peer].socket;
  // Bounded, so that one busy peer does not starve the loop; the rest is
  // read at the next poll.
  for (int n = 0; n < 1024; ++n) {
    parts_.clear();
    zmq::recv_result_t r;
    try {
      r = zmq::recv_multipart(socket, std::back_inserter(parts_), zmq::recv_flags::dontwait);
    } catch (const zmq::error_t& e) {
      LOG(WARNING) << "recv from " << peers_[peer].endpoint << " failed: " << e.what();
      return;
    }
    if (!r) return;
    Message& msg = reply_;
    if (Status parsed = ParseMessage(parts_, 0, &msg); !parsed.ok()) {
      uint64_t more = 0;
      if (log_limiter_.Allow("malformed reply", &more)) {
        LOG(WARNING) << "ignoring malformed reply from " << peers_[peer].endpoint << ": "
                     << parsed << " (" << more << " more since the last such line)";
      }
      continue;
    }
    auto it = pending_.find(msg.header.request_id());
    if (it == pending_.end()) {  // Late (after its deadline) or duplicate.
      msg.frames.clear();
      continue;
    }
    ReplyCallback done = std::move(it->second.done);
    deadlines_.erase(it->second.deadline);
    pending_.erase(it);
    const Status status = StatusFromProto(msg.header.status());
    done(status, std::move(msg));
    // A payload the callback did not keep is released now, not when the
    // next reply comes (which may be a while).
    msg.frames.clear();
  }
}

void LoopClient::ExpireDeadlines() {
  const int64_t now = clock_->NowMs();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    auto it = pending_.find(deadlines_.begin()->second);
    deadlines_.erase(deadlines_.begin());
    if (it == pending_.end()) continue;
    ReplyCallback done = std::move(it->second.done);
    pending_.erase(it);
    ++timeouts_;
    done(DeadlineExceededError("no reply before the deadline"), Message());
  }
}

}  // namespace relaxps
