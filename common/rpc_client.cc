#include "common/rpc_client.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace relaxps {

Status RpcClientOptions::UseCurve(const CurveOptions& curve) {
  if (!curve.enabled()) return Status::OK();
  ASSIGN_OR_RETURN(curve_keys, LoadCurveKeys(curve.keys_dir, curve.name));
  ASSIGN_OR_RETURN(curve_server_key, LoadPublicKey(curve.keys_dir, "coordinator"));
  return Status::OK();
}

zmq::socket_t NewDealerSocket(zmq::context_t* context, const RpcClientOptions& options,
                              const std::string& curve_server_key) {
  zmq::socket_t s(*context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 100000);
  s.set(zmq::sockopt::rcvhwm, 100000);
  s.set(zmq::sockopt::reconnect_ivl, 100);
  s.set(zmq::sockopt::reconnect_ivl_max, 1000);
  s.set(zmq::sockopt::maxmsgsize, options.max_message_bytes);
  if (!options.routing_id.empty()) s.set(zmq::sockopt::routing_id, options.routing_id);
  if (!options.curve_server_key.empty()) {
    s.set(zmq::sockopt::curve_serverkey,
          curve_server_key.empty() ? options.curve_server_key : curve_server_key);
    s.set(zmq::sockopt::curve_publickey, options.curve_keys.public_key);
    s.set(zmq::sockopt::curve_secretkey, options.curve_keys.secret_key);
  }
  return s;
}

RpcClient::RpcClient(const RpcClientOptions& options)
    : options_(options), clock_(ClockOrReal(options.clock)) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  CHECK_GE(wake_fd_, 0) << "eventfd failed";
  io_thread_ = std::thread([this] { IoLoop(); });
}

RpcClient::~RpcClient() {
  {
    MutexLock l(&mu_);
    stopping_ = true;
  }
  Wake();
  io_thread_.join();
  close(wake_fd_);
}

void RpcClient::Wake() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

int RpcClient::Connect(const std::string& endpoint, const std::string& curve_server_key) {
  MutexLock l(&mu_);
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (endpoints_[i].endpoint == endpoint && endpoints_[i].curve_server_key == curve_server_key) {
      return static_cast<int>(i);
    }
  }
  endpoints_.push_back(Peer{endpoint, curve_server_key});
  return static_cast<int>(endpoints_.size() - 1);
}

void RpcClient::Call(int peer, Message request, int timeout_ms, ReplyCallback done) {
  if (timeout_ms <= 0) timeout_ms = options_.default_timeout_ms;
  const uint64_t id = next_request_id_.fetch_add(1);
  request.header.set_request_id(id);
  request.header.set_is_reply(false);
  request.header.set_deadline_unix_ms(clock_->NowUnixMs() + timeout_ms);
  const int64_t now = clock_->NowMs();
  Outgoing out{peer, std::move(request), now + timeout_ms, std::move(done)};
  // Sent from this thread when the I/O thread is not using the sockets (it
  // sleeps in poll()): no wake-up of the I/O thread and no thread crossing
  // on the way out. A busy I/O thread sends it instead (never waited for).
  if (io_mu_.TryLock()) {
    const bool sent = SendFromCaller(&out);
    io_mu_.Unlock();
    if (sent) return;
  }
  bool wake;
  {
    MutexLock l(&mu_);
    if (stopping_) {
      out.done(AbortedError("rpc client is shutting down"), Message());
      return;
    }
    // A non-empty outbox has a wake-up pending (the call that filled it sent
    // one, and the I/O thread takes the whole outbox after reading it): one
    // eventfd write per burst of calls, not per call.
    wake = outbox_.empty();
    outbox_.push_back(std::move(out));
  }
  if (wake) Wake();
}

bool RpcClient::SendFromCaller(Outgoing* out) {
  {
    MutexLock l(&mu_);
    // Whatever the I/O thread has to do first goes first, as when the
    // request is queued: the sends queued before it, a cancellation (which
    // fails the requests made before it is applied), stopping.
    if (stopping_ || !cancel_.ok() || !cancel_peers_.empty() || !outbox_.empty()) return false;
  }
  if (out->peer < 0 || out->peer >= static_cast<int>(sockets_.size())) {
    return false;  // Not connected yet (or no such peer): the I/O thread handles it.
  }
  const int peer = out->peer;
  const int64_t deadline = out->deadline_ms;
  std::vector<Completion> failed;
  SendNow(std::move(*out), &failed);
  sent_by_caller_.fetch_add(1);
  bool wake = !failed.empty() || deadline < sleep_until_ms_;
  for (Completion& c : failed) failed_sends_.push_back(std::move(c));
  // The send may have taken in a reply (see SocketPoller::Touch) that the
  // sleeping I/O thread would not hear of: then it is woken, and asks the
  // socket (SendNow listed it in sent_to_).
  try {
    wake = wake || (sockets_[peer].get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
  } catch (const zmq::error_t&) {
    wake = true;
  }
  if (wake) Wake();
  return true;
}

void RpcClient::CancelAll(const Status& status) {
  {
    MutexLock l(&mu_);
    cancel_ = status.ok() ? AbortedError("cancelled") : status;
  }
  Wake();
}

void RpcClient::CancelPeer(int peer, const Status& status) {
  {
    MutexLock l(&mu_);
    cancel_peers_.emplace_back(peer, status.ok() ? AbortedError("cancelled") : status);
  }
  Wake();
}

TransportStats RpcClient::stats() const {
  TransportStats s;
  s.requests = requests_.load();
  s.bytes_sent = bytes_sent_.load();
  s.bytes_received = bytes_received_.load();
  s.timeouts = timeouts_.load();
  s.sent_by_caller = sent_by_caller_.load();
  return s;
}

void RpcClient::SendNow(Outgoing out, std::vector<Completion>* completions) {
  const uint64_t id = out.msg.header.request_id();
  const Deadlines::iterator deadline = deadlines_.emplace(out.deadline_ms, id);
  pending_.emplace(id, Pending{std::move(out.done), deadline, out.peer});
  requests_.fetch_add(1);
  zmq::socket_t& socket = sockets_[out.peer];
  sent_to_.push_back(out.peer);
  const size_t bytes = out.msg.PayloadBytes() + out.msg.header.ByteSizeLong();
  Status s = SendMessage(socket, "", std::move(out.msg));
  if (!s.ok()) {
    auto it = pending_.find(id);
    ReplyCallback done = std::move(it->second.done);
    deadlines_.erase(it->second.deadline);
    pending_.erase(it);
    std::string endpoint;
    {
      MutexLock l(&mu_);  // Connect() may be appending meanwhile.
      endpoint = endpoints_[out.peer].endpoint;
    }
    completions->push_back(
        Completion{std::move(done), s.WithPrefix("send to " + endpoint), Message()});
    return;
  }
  bytes_sent_.fetch_add(bytes);
}

void RpcClient::OnReply(std::vector<zmq::message_t>& parts, std::vector<Completion>* completions) {
  size_t bytes = 0;
  for (const auto& p : parts) bytes += p.size();
  bytes_received_.fetch_add(bytes);
  StatusOr<Message> msg = ParseMessage(parts, 0);
  if (!msg.ok()) {
    uint64_t more = 0;
    if (log_limiter_.Allow("malformed reply", &more)) {
      LOG(WARNING) << "ignoring malformed reply: " << msg.status() << " (" << more
                   << " more since the last such line)";
    }
    return;
  }
  auto it = pending_.find(msg->header.request_id());
  if (it == pending_.end()) return;  // Late (after deadline) or duplicate reply.
  ReplyCallback done = std::move(it->second.done);
  deadlines_.erase(it->second.deadline);
  pending_.erase(it);
  Status status = StatusFromProto(msg->header.status());
  completions->push_back(Completion{std::move(done), std::move(status), std::move(msg).value()});
}

void RpcClient::ExpireDeadlines(std::vector<Completion>* completions) {
  const int64_t now = clock_->NowMs();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = pending_.find(id);
    CHECK(it != pending_.end()) << "deadline of request " << id << " outlived it";
    ReplyCallback done = std::move(it->second.done);
    pending_.erase(it);
    timeouts_.fetch_add(1);
    completions->push_back(Completion{
        std::move(done), DeadlineExceededError("no reply before the deadline"), Message()});
  }
}

void RpcClient::FailPending(const Status& status, std::vector<Completion>* completions) {
  for (auto& [id, p] : pending_) {
    completions->push_back(Completion{std::move(p.done), status, Message()});
  }
  pending_.clear();
  deadlines_.clear();
}

void RpcClient::RunCompletions(std::vector<Completion>* completions) {
  for (Completion& c : *completions) c.done(c.status, std::move(c.reply));
  completions->clear();
}

void RpcClient::IoLoop() {
  // Items: the wake-up eventfd, then sockets_, then monitors_.
  SocketPoller poller;
  std::vector<zmq::message_t> parts;
  std::vector<Completion> completions;  // Run once io_mu_ is released.
  std::vector<int> disconnected;        // Likewise on_disconnect.
  while (true) {
    int64_t timeout = 0;
    bool ready = false;
    bool exit = false;
    {
      MutexLock io(&io_mu_);
      std::vector<Outgoing> outbox;
      bool stopping;
      Status cancel;
      std::vector<std::pair<int, Status>> cancel_peers;
      {
        MutexLock l(&mu_);
        stopping = stopping_;
        cancel = cancel_;
        cancel_ = Status::OK();
        cancel_peers.swap(cancel_peers_);
        outbox.swap(outbox_);
        while (sockets_.size() < endpoints_.size()) {
          const Peer& peer = endpoints_[sockets_.size()];
          zmq::socket_t s = NewDealerSocket(&context_, options_, peer.curve_server_key);
          if (options_.on_disconnect) {
            const std::string addr = "inproc://relaxps-monitor-" +
                                     std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" +
                                     std::to_string(sockets_.size());
            zmq::socket_t mon(context_, zmq::socket_type::pair);
            mon.set(zmq::sockopt::linger, 0);
            if (zmq_socket_monitor(s.handle(), addr.c_str(), ZMQ_EVENT_DISCONNECTED) == 0) {
              mon.connect(addr);
            }
            monitors_.push_back(std::move(mon));
          }
          try {
            s.connect(peer.endpoint);
          } catch (const zmq::error_t& e) {
            LOG(ERROR) << "cannot connect to " << peer.endpoint << ": " << e.what();
          }
          sockets_.push_back(std::move(s));
        }
      }
      for (Completion& c : failed_sends_) completions.push_back(std::move(c));
      failed_sends_.clear();
      if (stopping) {
        const Status aborted = AbortedError("rpc client is shutting down");
        for (auto& out : outbox) {
          completions.push_back(Completion{std::move(out.done), aborted, Message()});
        }
        {
          MutexLock l(&mu_);
          for (auto& out : outbox_) {
            completions.push_back(Completion{std::move(out.done), aborted, Message()});
          }
          outbox_.clear();
        }
        FailPending(aborted, &completions);
      } else {
        if (!cancel.ok()) {
          for (auto& out : outbox) {
            completions.push_back(Completion{std::move(out.done), cancel, Message()});
          }
          outbox.clear();
          FailPending(cancel, &completions);
        }
        // Calls queued before a cancellation are sent first, then failed with
        // the others of their peer (the simplest way to keep one code path);
        // sending them after the cancellation let them wait out their
        // deadlines.
        for (auto& out : outbox) {
          if (out.peer < 0 || out.peer >= static_cast<int>(sockets_.size())) {
            completions.push_back(Completion{
                std::move(out.done),
                InvalidArgumentError("no such peer " + std::to_string(out.peer)), Message()});
            continue;
          }
          SendNow(std::move(out), &completions);
        }
        outbox.clear();
        for (const auto& [peer, status] : cancel_peers) {
          for (auto it = pending_.begin(); it != pending_.end();) {
            if (it->second.peer != peer) {
              ++it;
              continue;
            }
            completions.push_back(Completion{std::move(it->second.done), status, Message()});
            deadlines_.erase(it->second.deadline);
            it = pending_.erase(it);
          }
        }
        const int64_t now = clock_->NowMs();
        if (poller.size() != 1 + sockets_.size() + monitors_.size()) {
          // Sockets were added: poll them all (a new socket starts touched).
          poller.Clear();
          poller.AddFd(wake_fd_);
          for (auto& s : sockets_) poller.AddSocket(&s);
          for (auto& m : monitors_) poller.AddSocket(&m);
        }
        for (int peer : sent_to_) poller.Touch(1 + peer);
        sent_to_.clear();
        timeout = 100;
        if (!deadlines_.empty()) timeout = std::min(timeout, deadlines_.begin()->first - now);
        timeout = std::max<int64_t>(timeout, 0);
        sleep_until_ms_ = now + timeout;
        timeout = std::max<int64_t>(clock_->RealWaitMs(timeout), 0);
        try {
          ready = poller.CheckTouched();
        } catch (const zmq::error_t& e) {
          LOG(ERROR) << "poll failed: " << e.what();
        }
      }
      exit = stopping;
    }
    RunCompletions(&completions);
    // Callers see stopping_ and no longer use the sockets.
    if (exit) return;
    try {
      // Callers may send meanwhile (the sockets are theirs while io_mu_ is
      // free); they wake this thread when it has to look at them.
      poller.Sleep(ready ? 0 : static_cast<int>(timeout));
    } catch (const zmq::error_t& e) {
      LOG(ERROR) << "poll failed: " << e.what();
    }
    {
      MutexLock io(&io_mu_);
      for (int peer : sent_to_) poller.Touch(1 + peer);
      sent_to_.clear();
      try {
        poller.CheckFired();
      } catch (const zmq::error_t& e) {
        LOG(ERROR) << "poll failed: " << e.what();
      }
      if (poller.readable(0)) {
        uint64_t v;
        (void)!read(wake_fd_, &v, sizeof(v));
      }
      for (size_t m = 0; m < monitors_.size(); ++m) {
        if (!poller.readable(1 + sockets_.size() + m)) continue;
        while (true) {
          parts.clear();
          zmq::recv_result_t r;
          try {
            r = zmq::recv_multipart(monitors_[m], std::back_inserter(parts),
                                    zmq::recv_flags::dontwait);
          } catch (const zmq::error_t&) {
            poller.Touch(1 + sockets_.size() + m);
            break;
          }
          if (!r) break;
          uint16_t event = 0;
          if (!parts.empty() && parts[0].size() >= sizeof(event)) {
            std::memcpy(&event, parts[0].data(), sizeof(event));
          }
          if (event == ZMQ_EVENT_DISCONNECTED) disconnected.push_back(static_cast<int>(m));
        }
      }
      for (size_t i = 1; i < 1 + sockets_.size(); ++i) {
        if (!poller.readable(i)) continue;
        // Read until empty (EAGAIN), or touched to be read on after a batch.
        bool empty = false;
        for (int n = 0; n < 1024 && !empty; ++n) {
          parts.clear();
          zmq::recv_result_t r;
          try {
            r = zmq::recv_multipart(sockets_[i - 1], std::back_inserter(parts),
                                    zmq::recv_flags::dontwait);
          } catch (const zmq::error_t& e) {
            LOG(WARNING) << "recv failed: " << e.what();
            break;
          }
          empty = !r;
          if (!empty) OnReply(parts, &completions);
        }
        if (!empty) poller.Touch(i);
      }
      ExpireDeadlines(&completions);
    }
    for (int peer : disconnected) options_.on_disconnect(peer);
    disconnected.clear();
    RunCompletions(&completions);
  }
}

}  // namespace relaxps
