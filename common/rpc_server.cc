#include "common/rpc_server.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>

#include "common/socket_poller.h"

namespace relaxps {
namespace {

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StatusOr<std::unique_ptr<RpcServer>> RpcServer::Bind(const RpcServerOptions& options) {
  std::unique_ptr<RpcServer> s(new RpcServer());
  s->clock_ = ClockOrReal(options.clock);
  s->log_limiter_ = LogLimiter(s->clock_);
  s->unread_ = std::make_unique<UnreadReplies>(options.max_unread_bytes_per_peer,
                                               options.max_unread_bytes);
  CurveKeys own;  // The ROUTER's CURVE server key: the process's own key.
  if (options.curve.enabled()) {
    ASSIGN_OR_RETURN(own, LoadCurveKeys(options.curve.keys_dir, options.curve.name));
    ASSIGN_OR_RETURN(auto admitted, LoadAdmittedKeys(options.curve.keys_dir));
    ASSIGN_OR_RETURN(s->zap_, ZapHandler::Start(&s->context_, std::move(admitted)));
  }
  try {
    s->socket_ = zmq::socket_t(s->context_, zmq::socket_type::router);
    if (options.curve.enabled()) {
      s->socket_.set(zmq::sockopt::curve_server, 1);
      s->socket_.set(zmq::sockopt::curve_secretkey, own.secret_key);
      s->socket_.set(zmq::sockopt::zap_domain, "relaxps");
    }
    s->socket_.set(zmq::sockopt::router_mandatory, 1);
    s->socket_.set(zmq::sockopt::linger, 0);
    s->socket_.set(zmq::sockopt::sndhwm, options.max_queued_messages);
    s->socket_.set(zmq::sockopt::rcvhwm, options.max_queued_messages);
    s->socket_.set(zmq::sockopt::maxmsgsize, options.max_message_bytes);
    s->socket_.bind(options.bind);
    s->endpoint_ = s->socket_.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return UnavailableError("cannot bind " + options.bind + ": " + e.what());
  }
  s->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s->wake_fd_ < 0) return IOError("eventfd failed");
  return s;
}

RpcServer::~RpcServer() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

void RpcServer::Stop() {
  stop_.store(true);
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void RpcServer::Post(std::function<void()> task) {
  {
    MutexLock l(&mu_);
    posted_.push_back(std::move(task));
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void RpcServer::AddTimer(int period_ms, std::function<void()> fn) {
  timers_.push_back(Timer{period_ms, clock_->NowMs() + period_ms, std::move(fn)});
}

void RpcServer::AddSocket(zmq::socket_t* socket, std::function<void()> on_readable) {
  extra_sockets_.emplace_back(socket, std::move(on_readable));
}

void RpcServer::RunPosted() {
  uint64_t v;
  (void)!read(wake_fd_, &v, sizeof(v));
  std::deque<std::function<void()>> tasks;
  {
    MutexLock l(&mu_);
    tasks.swap(posted_);
  }
  for (auto& t : tasks) t();
}

int RpcServer::NextTimerDelayMs() const {
  if (timers_.empty()) return clock_->RealWaitMs(1000);
  const int64_t now = clock_->NowMs();
  int64_t best = INT64_MAX;
  for (const Timer& t : timers_) best = std::min(best, t.next_ms - now);
  return clock_->RealWaitMs(std::clamp<int64_t>(best, 0, 1000));
}

void RpcServer::RunDueTimers() {
  const int64_t now = clock_->NowMs();
  for (size_t i = 0; i < timers_.size(); ++i) {
    if (timers_[i].next_ms <= now) {
      timers_[i].next_ms = now + timers_[i].period_ms;
      timers_[i].fn();  // May add timers; index-based loop stays valid.
    }
  }
}

void RpcServer::Run(Handler handler, std::function<void()> after_batch) {
  // Items: the ROUTER socket, the wake-up eventfd, then extra_sockets_.
  SocketPoller poller;
  poller.AddSocket(&socket_);
  poller.AddFd(wake_fd_);
  std::vector<zmq::message_t> parts;
  // Every request is parsed into this one: the handler may move from it
  // (one that keeps the request), and it is overwritten by the next.
  Request request;
  while (!stop_.load()) {
    // Handlers may add sockets (AddSocket): polled from the next round.
    while (poller.size() < 2 + extra_sockets_.size()) {
      poller.AddSocket(extra_sockets_[poller.size() - 2].first);
    }
    // The loop sends on the ROUTER (replies) and, through callbacks, on the
    // extra sockets: all of them may hold input their descriptors will not
    // announce (see SocketPoller).
    if (sent_) poller.Touch(0);
    sent_ = false;
    for (size_t i = 2; i < poller.size(); ++i) poller.Touch(i);
    try {
      poller.Wait(NextTimerDelayMs());
    } catch (const zmq::error_t& e) {
      LOG(ERROR) << "poll failed: " << e.what();
      continue;
    }
    if (poller.readable(1)) RunPosted();
    for (size_t i = 2; i < poller.size(); ++i) {
      // By index: a callback may add sockets (polled from the next round).
      if (poller.readable(i)) extra_sockets_[i - 2].second();
    }
    if (poller.readable(0)) {
      // Drain a bounded batch so timers and posted tasks are not starved.
      // Read until empty (EAGAIN), or touched to be read on next round.
      bool empty = false;
      for (int n = 0; n < 256 && !stop_.load() && !empty; ++n) {
        parts.clear();
        zmq::recv_result_t r;
        try {
          r = zmq::recv_multipart(socket_, std::back_inserter(parts), zmq::recv_flags::dontwait);
        } catch (const zmq::error_t& e) {
          LOG(WARNING) << "recv failed: " << e.what();
          break;
        }
        empty = !r;
        if (empty) {
          // That receive processed every command the replies sent meanwhile
          // may have left: the ROUTER needs no touch for them.
          sent_ = false;
          break;
        }
        if (parts.size() < 2) {
          ++malformed_;
          uint64_t more = 0;
          if (log_limiter_.Allow("no header", &more)) {
            LOG(WARNING) << "dropping message with " << parts.size() << " frame(s): no header ("
                         << more << " more since the last such line)";
          }
          continue;
        }
        request.identity.assign(static_cast<const char*>(parts[0].data()), parts[0].size());
        request.user_id.clear();
        if (zap_ != nullptr) {
          const char* u = zmq_msg_gets(parts[1].handle(), "User-Id");
          if (u != nullptr) request.user_id = u;
        }
        if (Status parsed = ParseMessage(parts, 1, &request.msg); !parsed.ok()) {
          ++malformed_;
          uint64_t more = 0;
          if (log_limiter_.Allow("malformed", &more)) {
            LOG(WARNING) << "malformed request: " << parsed << " (" << more
                         << " more since the last such line)";
          }
          Message reply;
          reply.header.set_is_reply(true);
          // Set when the header parsed but was refused (an unknown kind).
          reply.header.set_request_id(request.msg.header.request_id());
          StatusToProto(parsed, reply.header.mutable_status());
          Send(request.identity, std::move(reply)).IgnoreError();
          continue;
        }
        request.received_ns = SteadyNowNs();
        handler(std::move(request));
        // A payload the handler did not keep is released now, not when the
        // next request is parsed (a large one could wait a while); so is a
        // reservation no reply took.
        request.msg.frames.clear();
        request.reply_reservation.reset();
      }
      if (!empty) poller.Touch(0);
    }
    RunDueTimers();
    if (after_batch) after_batch();
  }
}

Status RpcServer::ReserveReply(Request* request, int64_t reply_bytes) {
  if (reply_bytes <= static_cast<int64_t>(Frame::kCopyFramesUpToBytes)) return Status::OK();
  auto admitted = unread_->Admit(request->identity, reply_bytes);
  if (!admitted.ok()) {
    ++unread_refused_;
    return admitted.status();  // Nothing of the request was applied.
  }
  request->reply_reservation = std::move(admitted).value();
  return Status::OK();
}

Status RpcServer::Send(const std::string& identity, Message&& msg,
                       std::shared_ptr<void> reservation) {
  sent_ = true;
  if (reservation == nullptr) {
    if (const size_t bytes = ZeroCopyBytes(msg); bytes > 0) {
      auto admitted = unread_->Admit(identity, static_cast<int64_t>(bytes));
      if (!admitted.ok()) {
        ++unread_dropped_;
        msg.frames.clear();
        LOG_LIMITED(WARNING, &log_limiter_, "reply dropped (unread replies)")
            << "dropped a message of " << bytes << " bytes sent without a reservation: "
            << admitted.status();
        return admitted.status();
      }
      reservation = std::move(admitted).value();
    }
  }
  return SendMessage(socket_, identity, std::move(msg), std::move(reservation));
}

void RpcServer::FillReplyHeader(const Request& request, Message* reply) {
  wire::Header& h = reply->header;
  h.set_type(request.msg.header.type());
  h.set_is_reply(true);
  h.set_request_id(request.msg.header.request_id());
  // No status set means OK (see MakeReply).
}

Status RpcServer::Reply(const Request& request, Message&& reply) {
  FillReplyHeader(request, &reply);
  return Send(request.identity, std::move(reply), std::move(request.reply_reservation));
}

Status RpcServer::ReplyStatus(const Request& request, const Status& status) {
  request.reply_reservation.reset();  // No payload.
  return Send(request.identity, MakeReply(request.msg.header, status));
}

}  // namespace relaxps
