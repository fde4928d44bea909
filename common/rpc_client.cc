#include "common/rpc_client.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace relaxps {
namespace {

// Real monotonic time, for how long a thread may sleep in a poll or hold the
// driver role: those are waits of this process's threads, not timeouts of
// the protocol (which use options_.clock).
int64_t RealMs() { return RealClock()->NowMs(); }

// Fails every request waiting on `peer` in `*pending` with `status`, in the
// order they were sent (request ids ascend), as deadlines expire: a caller
// that resends them (a chain failover, a restarted server) sends them again
// in that order, so the parts of a split push reach the new server first
// part first (the one that counts the optimizer step; push_continues).
template <typename PendingMap, typename Deadlines, typename Completions>
void FailPeerInOrder(int peer, const Status& status, PendingMap* pending, Deadlines* deadlines,
                     Completions* completions) {
  std::vector<uint64_t> ids;
  for (const auto& [id, p] : *pending) {
    if (p.peer == peer) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    auto it = pending->find(id);
    completions->push_back({std::move(it->second.done), status, Message()});
    deadlines->erase(it->second.deadline);
    pending->erase(it);
  }
}

}  // namespace

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

std::string ConnectAddress(const RpcClientOptions& options, const std::string& endpoint) {
  static constexpr char kTcp[] = "tcp://";
  if (options.source_address.empty() || endpoint.rfind(kTcp, 0) != 0) return endpoint;
  const bool v6 = options.source_address.find(':') != std::string::npos;
  const std::string source = v6 ? "[" + options.source_address + "]" : options.source_address;
  return kTcp + source + ":0;" + endpoint.substr(sizeof(kTcp) - 1);
}

RpcClient::RpcClient(const RpcClientOptions& options)
    : options_(options), clock_(ClockOrReal(options.clock)) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  CHECK_GE(wake_fd_, 0) << "eventfd failed";
  driver_wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  CHECK_GE(driver_wake_fd_, 0) << "eventfd failed";
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
  close(driver_wake_fd_);
}

void RpcClient::Wake() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void RpcClient::WakeDriver() {
  uint64_t one = 1;
  (void)!write(driver_wake_fd_, &one, sizeof(one));
}

void RpcClient::WakeDriverIfAny() {
  // Pairs with the fence in Drive(): either the driver sees what ran before
  // this (its done() after setting driving_), or this sees driving_.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (driving_.load()) WakeDriver();
}

void RpcClient::TellDriver(int peer) {
  driver_touch_.push_back(peer);
  WakeDriver();  // Kept by the eventfd for the next driver if none drives now.
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
  // sleeping reader would not hear of: then it is told, and asks the socket.
  // The reader is the I/O thread (SendNow listed the socket in sent_to_) or,
  // while the sockets are left to drivers, the current or next driver; both
  // are told when that may change before they look.
  bool input;
  try {
    input = (sockets_[peer].get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
  } catch (const zmq::error_t&) {
    input = true;
  }
  if (input) {
    TellDriver(peer);
    // A driver holds the sockets, and the I/O thread takes them back with a
    // touch of each (SocketPoller::Enable) when it does.
    wake = wake || !(driving_.load() || RealMs() < drivers_hold_until_ms_);
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
  s.replies_read_by_caller = replies_read_by_caller_.load();
  return s;
}

bool RpcClient::Drive(const std::function<bool()>& done, int timeout_ms) {
  if (done()) return true;
  // A callback on the I/O thread must not drive: that thread's deadlines and
  // sends would wait for it.
  if (std::this_thread::get_id() == io_thread_.get_id()) return false;
  const int64_t give_up = RealMs() + std::max(timeout_ms, 0);
  {
    MutexLock io(&io_mu_);
    {
      MutexLock l(&mu_);
      if (stopping_) return false;
    }
    if (driving_.load() || sockets_.empty()) return false;
    driving_.store(true);
    SyncDriverPoller(/*force=*/io_used_sockets_);
    io_used_sockets_ = false;
  }
  // Callbacks the I/O thread ran before it could see driving_ (see
  // WakeDriverIfAny) are seen by this done().
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool reached = done();
  std::vector<Completion>& completions = driver_completions_;
  while (!reached) {
    bool ready;
    {
      MutexLock io(&io_mu_);
      SyncDriverPoller(/*force=*/false);
      TouchToldSockets();
      ready = driver_poller_.CheckTouched();
    }
    const int64_t left = give_up - RealMs();
    if (!ready && left <= 0) break;
    // The descriptors only: other threads may send on the sockets meanwhile
    // (they tell this one when that takes in input, see SendFromCaller).
    driver_poller_.Sleep(ready ? 0 : static_cast<int>(std::min<int64_t>(left, kDriverMaxSleepMs)));
    bool woken;
    {
      MutexLock io(&io_mu_);
      // Sockets were added: their items moved, and are all asked again.
      if (SyncDriverPoller(/*force=*/false)) continue;
      TouchToldSockets();
      driver_poller_.CheckFired();
      woken = driver_poller_.readable(0);
      if (woken) {
        uint64_t v;
        (void)!read(driver_wake_fd_, &v, sizeof(v));
      }
      ReadReplies(&driver_poller_, /*by_caller=*/true, &completions);
    }
    RunCompletions(&completions);
    reached = done();
    if (woken && !reached) {
      MutexLock l(&mu_);
      if (stopping_) break;
    }
  }
  MutexLock io(&io_mu_);
  driving_.store(false);
  drivers_hold_until_ms_ = RealMs() + kDriverGraceMs;
  return reached;
}

void RpcClient::TouchToldSockets() {
  for (int peer : driver_touch_) driver_poller_.Touch(1 + peer);
  driver_touch_.clear();
}

bool RpcClient::SyncDriverPoller(bool force) {
  if (!force && driver_poller_.size() == 1 + sockets_.size()) return false;
  driver_poller_.Clear();
  driver_poller_.AddFd(driver_wake_fd_);
  for (auto& socket : sockets_) driver_poller_.AddSocket(&socket);  // Touched.
  driver_touch_.clear();
  return true;
}

void RpcClient::ReadReplies(SocketPoller* poller, bool by_caller,
                            std::vector<Completion>* completions) {
  std::vector<zmq::message_t>& parts = recv_parts_;
  for (size_t i = 1; i < 1 + sockets_.size(); ++i) {
    if (!poller->readable(i)) continue;
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
      if (empty) break;
      const size_t before = completions->size();
      OnReply(parts, completions);
      if (by_caller && completions->size() > before) replies_read_by_caller_.fetch_add(1);
    }
    if (!empty) poller->Touch(i);
  }
}

void RpcClient::SendNow(Outgoing&& out, std::vector<Completion>* completions) {
  if (out.peer < static_cast<int>(links_.size()) && !links_[out.peer].refused.ok()) {
    // The last handshake failed (a rejected key): said at once, not at the
    // deadline. ZeroMQ keeps reconnecting; a handshake that succeeds clears it.
    completions->push_back(Completion{std::move(out.done), links_[out.peer].refused, Message()});
    return;
  }
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
  // Parsed in place, into the completion that will carry it.
  Completion& c = completions->emplace_back();
  const Status parsed = ParseMessage(parts, 0, &c.reply);
  if (parsed.ok()) recent_frames_.Hold(&c.reply);
  auto it = parsed.ok() ? pending_.find(c.reply.header.request_id()) : pending_.end();
  if (it == pending_.end()) {
    // Malformed, or late (after its deadline) or duplicate.
    completions->pop_back();
    uint64_t more = 0;
    if (!parsed.ok() && log_limiter_.Allow("malformed reply", &more)) {
      LOG(WARNING) << "ignoring malformed reply: " << parsed << " (" << more
                   << " more since the last such line)";
    }
    return;
  }
  c.done = std::move(it->second.done);
  deadlines_.erase(it->second.deadline);
  pending_.erase(it);
  c.status = StatusFromProto(c.reply.header.status());
  // The burst of replies ends with the last request outstanding (the frames
  // kept to warm the heap go back; see RecentFrames).
  if (pending_.empty()) recent_frames_.EndBurst();
}

void RpcClient::ExpireDeadlines(std::vector<Completion>* completions) {
  const int64_t now = clock_->NowMs();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = pending_.find(id);
    CHECK(it != pending_.end()) << "deadline of request " << id << " outlived it";
    const int it_peer = it->second.peer;
    ReplyCallback done = std::move(it->second.done);
    pending_.erase(it);
    timeouts_.fetch_add(1);
    completions->push_back(Completion{
        std::move(done),
        DeadlineExceededError("no reply before the deadline" + NoReplyReason(it_peer)),
        Message()});
  }
  if (pending_.empty()) recent_frames_.EndBurst();
}

bool RpcClient::OnMonitorEvent(int peer, uint16_t event, uint32_t value,
                               std::vector<Completion>* completions) {
  if (peer < 0 || peer >= static_cast<int>(links_.size())) return false;
  Link& link = links_[peer];
  switch (event) {
    case ZMQ_EVENT_CONNECTED:
      link.connected = true;
      link.retries = 0;
      return false;
    case ZMQ_EVENT_CONNECT_RETRIED:
      ++link.retries;
      return false;
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
      link.refused = Status::OK();
      link.handshake_failures = 0;
      return false;
    case ZMQ_EVENT_DISCONNECTED:
      link.connected = false;
      return true;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      // The peer's ZAP handler refused this client's key (value: its ZAP
      // status code, 400).
      link.refused = PermissionDeniedError(
          "authentication failed (server rejected this client's key): " + link.endpoint +
          " (ZAP status " + std::to_string(value) + ")");
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      // The peer broke the protocol during the handshake: most often one
      // side runs CURVE and the other not, or a server that does not hold
      // the public key this client expects of it.
      link.refused = PermissionDeniedError(
          "authentication failed (handshake with " + link.endpoint +
          " failed: the server did not prove the expected key, or security settings differ)");
      break;
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
      // The connection ended during the handshake: a server that could not
      // decrypt this client's hello (it holds another key than the one this
      // client expects), one that runs another security mechanism and reset
      // the connection before this client read its greeting (then the
      // mismatch arrives as this event instead of the protocol error above:
      // a race, lost more often under load), but just as well one that died
      // or restarted during one handshake. Once is not a refusal (named only
      // if a request's deadline passes); a peer that accepts the connection
      // and ends the handshake several times in a row, with none succeeding
      // in between, is refusing this client.
      if (++link.handshake_failures < kHandshakeEndsRefused) return false;
      link.refused = PermissionDeniedError(
          "authentication failed (handshake with " + link.endpoint + " ended " +
          std::to_string(link.handshake_failures) +
          " times in a row: the server does not hold the key this client expects of it, or "
          "security settings differ)");
      break;
    default:
      return false;
  }
  // Everything waiting on this peer fails now instead of at its deadline.
  FailPeerInOrder(peer, link.refused, &pending_, &deadlines_, completions);
  if (pending_.empty()) recent_frames_.EndBurst();
  return false;
}

std::string RpcClient::NoReplyReason(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(links_.size())) return "";
  const Link& link = links_[peer];
  if (!link.refused.ok()) return "; " + link.refused.message();
  if (link.handshake_failures > 0) {
    return "; the connection to " + link.endpoint + " ended during the handshake " +
           std::to_string(link.handshake_failures) +
           " time(s) (a server that died, or, under CURVE, one that does not hold the key this "
           "client expects of it)";
  }
  if (link.connected) return " from " + link.endpoint;
  if (link.retries > 0) {
    return "; " + link.endpoint + " is unreachable (connection refused or timed out, " +
           std::to_string(link.retries) + " attempt(s))";
  }
  return "; no connection to " + link.endpoint + " yet";
}

void RpcClient::FailPending(const Status& status, std::vector<Completion>* completions) {
  for (auto& [id, p] : pending_) {
    completions->push_back(Completion{std::move(p.done), status, Message()});
  }
  pending_.clear();
  deadlines_.clear();
  recent_frames_.EndBurst();
}

bool RpcClient::RunCompletions(std::vector<Completion>* completions) {
  if (completions->empty()) return false;
  for (Completion& c : *completions) c.done(c.status, std::move(c.reply));
  completions->clear();
  return true;
}

void RpcClient::IoLoop() {
  // Items: the wake-up eventfd, then sockets_, then monitors_.
  SocketPoller poller;
  std::vector<zmq::message_t> parts;
  std::vector<Completion> completions;  // Run once io_mu_ is released.
  std::vector<int> disconnected;        // Likewise on_disconnect.
  bool sockets_left = false;            // Disabled in `poller`: a driver's.
  const auto leave_sockets = [&](bool leave) {
    if (leave == sockets_left) return;
    for (size_t p = 0; p < sockets_.size(); ++p) {
      if (leave) {
        poller.Disable(1 + p);
      } else {
        poller.Enable(1 + p);
      }
    }
    sockets_left = leave;
  };
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
          {
            // Every socket's monitor: disconnections (on_disconnect), and
            // the handshake failures and refused connections that make a
            // request's error say why there was no reply.
            const std::string addr = "inproc://relaxps-monitor-" +
                                     std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" +
                                     std::to_string(sockets_.size());
            zmq::socket_t mon(context_, zmq::socket_type::pair);
            mon.set(zmq::sockopt::linger, 0);
            constexpr int kEvents = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECTED |
                                    ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                                    ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                    ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                    ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
            if (zmq_socket_monitor(s.handle(), addr.c_str(), kEvents) == 0) mon.connect(addr);
            monitors_.push_back(std::move(mon));
            links_.push_back(Link{peer.endpoint, Status::OK(), 0, 0, false});
          }
          try {
            s.connect(ConnectAddress(options_, peer.endpoint));
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
          const int peer = out.peer;
          SendNow(std::move(out), &completions);
          // The send may have taken in input that a driver waits for.
          io_used_sockets_ = true;
          if (driving_.load()) TellDriver(peer);
        }
        outbox.clear();
        for (const auto& [peer, status] : cancel_peers) {
          FailPeerInOrder(peer, status, &pending_, &deadlines_, &completions);
          if (pending_.empty()) recent_frames_.EndBurst();
        }
        const int64_t now = clock_->NowMs();
        if (poller.size() != 1 + sockets_.size() + monitors_.size()) {
          // Sockets were added: poll them all (a new socket starts touched).
          poller.Clear();
          poller.AddFd(wake_fd_);
          for (auto& s : sockets_) poller.AddSocket(&s);
          for (auto& m : monitors_) poller.AddSocket(&m);
          sockets_left = false;
        }
        // While a driver reads the sockets, and for a grace period after,
        // they are left out of this thread's waits and checks: it would
        // otherwise wake for every reply the driver reads.
        const bool leave = driving_.load() || RealMs() < drivers_hold_until_ms_;
        leave_sockets(leave);
        if (!leave) io_used_sockets_ = true;
        for (int peer : sent_to_) poller.Touch(1 + peer);
        sent_to_.clear();
        timeout = 100;
        if (!deadlines_.empty()) timeout = std::min(timeout, deadlines_.begin()->first - now);
        timeout = std::max<int64_t>(timeout, 0);
        sleep_until_ms_ = now + timeout;
        timeout = std::max<int64_t>(clock_->RealWaitMs(timeout), 0);
        // Looks again soon: the driver may leave.
        if (leave) {
          timeout = std::min<int64_t>(
              timeout, driving_.load() ? kDriverCheckMs
                                       : std::max<int64_t>(drivers_hold_until_ms_ - RealMs(), 1));
        }
        try {
          ready = poller.CheckTouched();
        } catch (const zmq::error_t& e) {
          LOG(ERROR) << "poll failed: " << e.what();
        }
      }
      exit = stopping;
    }
    if (RunCompletions(&completions)) WakeDriverIfAny();
    // Callers see stopping_ and no longer use the sockets.
    if (exit) {
      WakeDriver();
      return;
    }
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
      // A driver started during the sleep: the sockets are its now.
      if (driving_.load()) leave_sockets(true);
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
          uint32_t value = 0;
          if (!parts.empty() && parts[0].size() >= sizeof(event) + sizeof(value)) {
            std::memcpy(&event, parts[0].data(), sizeof(event));
            std::memcpy(&value, static_cast<const char*>(parts[0].data()) + sizeof(event),
                        sizeof(value));
          }
          if (OnMonitorEvent(static_cast<int>(m), event, value, &completions) &&
              options_.on_disconnect) {
            disconnected.push_back(static_cast<int>(m));
          }
        }
      }
      ReadReplies(&poller, /*by_caller=*/false, &completions);
      ExpireDeadlines(&completions);
    }
    for (int peer : disconnected) options_.on_disconnect(peer);
    disconnected.clear();
    if (RunCompletions(&completions)) WakeDriverIfAny();
  }
}

}  // namespace relaxps
