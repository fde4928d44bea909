#include "coordinator/zk_session.h"

#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace relaxps {
namespace {

void Watcher(zhandle_t*, int type, int state, const char*, void* ctx) {
  if (type == ZOO_SESSION_EVENT && ctx != nullptr) static_cast<ZkSession*>(ctx)->Deliver(state);
}

}  // namespace

StatusOr<ZkAddress> ParseZkAddress(const std::string& url) {
  const std::string form = "--coordination must be zk://HOST:PORT[,HOST:PORT...]/PATH, got '" +
                           url + "'";
  if (url.rfind("zk://", 0) != 0) return InvalidArgumentError(form);
  const std::string rest = url.substr(5);
  const size_t slash = rest.find('/');
  if (slash == std::string::npos || slash == 0) return InvalidArgumentError(form);
  ZkAddress a;
  a.hosts = rest.substr(0, slash);
  a.path = rest.substr(slash);
  while (a.path.size() > 1 && a.path.back() == '/') a.path.pop_back();
  if (a.path == "/" || a.path.find("//") != std::string::npos) {
    return InvalidArgumentError(form + " (PATH names the job's znode, e.g. /relaxps/job1)");
  }
  size_t start = 0;
  while (start <= a.hosts.size()) {
    const size_t comma = std::min(a.hosts.find(',', start), a.hosts.size());
    const std::string hp = a.hosts.substr(start, comma - start);
    const size_t colon = hp.rfind(':');
    const std::string port = colon == std::string::npos ? "" : hp.substr(colon + 1);
    if (colon == 0 || port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) == 0 ||
        std::stoi(port) > 65535) {
      return InvalidArgumentError(form + " ('" + hp + "' is not HOST:PORT)");
    }
    start = comma + 1;
  }
  return a;
}

Status ZkStatus(int rc, const std::string& what) {
  if (rc == ZOK) return Status::OK();
  const std::string m = what + ": " + zerror(rc);
  switch (rc) {
    case ZBADVERSION:
    case ZNONODE:
      return AbortedError(m);
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
    case ZSESSIONEXPIRED:
    case ZSESSIONMOVED:
    case ZCLOSING:
    case ZINVALIDSTATE:
      return UnavailableError(m);
    default:
      return IOError(m);
  }
}

StatusOr<std::unique_ptr<ZkSession>> ZkSession::Connect(const ZkSessionOptions& options) {
  if (options.session_timeout_ms < 100 || options.connect_timeout_ms < 1) {
    return InvalidArgumentError("--zk_session_timeout_ms must be >= 100");
  }
  static const bool quiet = [] {
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    return true;
  }();
  (void)quiet;
  std::unique_ptr<ZkSession> s(new ZkSession());
  s->zh_ = zookeeper_init(options.hosts.c_str(), Watcher, options.session_timeout_ms, nullptr,
                          s.get(), 0);
  if (s->zh_ == nullptr) {
    return UnavailableError("zookeeper_init(" + options.hosts + ") failed: " +
                            std::strerror(errno));
  }
  std::unique_lock<Mutex> l(s->mu_);
  const bool up = s->cv_.wait_for(l, std::chrono::milliseconds(options.connect_timeout_ms),
                                  [&] { return s->connected_ || s->expired_.load(); });
  if (!up || !s->connected_) {
    return UnavailableError("no ZooKeeper session with " + options.hosts + " within " +
                            std::to_string(options.connect_timeout_ms) + " ms");
  }
  return s;
}

ZkSession::~ZkSession() {
  if (zh_ != nullptr) zookeeper_close(zh_);  // Joins ZooKeeper's threads.
}

int ZkSession::session_timeout_ms() const { return zoo_recv_timeout(zh_); }

void ZkSession::OnEvent(std::function<void(ZkEvent)> fn) {
  MutexLock l(&mu_);
  listeners_.push_back(std::move(fn));
}

void ZkSession::Deliver(int state) {
  ZkEvent event;
  std::vector<std::function<void(ZkEvent)>> listeners;
  {
    MutexLock l(&mu_);
    if (state == ZOO_CONNECTED_STATE) {
      connected_ = true;
      const bool again = ever_connected_;
      ever_connected_ = true;
      cv_.notify_all();
      if (!again) return;
      event = ZkEvent::kReconnected;
    } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
      connected_ = false;
      expired_.store(true);
      cv_.notify_all();
      event = ZkEvent::kExpired;
    } else if (state == ZOO_CONNECTING_STATE) {
      if (!connected_) return;
      connected_ = false;
      event = ZkEvent::kDisconnected;
    } else {
      return;
    }
    listeners = listeners_;
  }
  for (const auto& fn : listeners) fn(event);
}

void* ZkSession::WatchContext(std::function<void()> wake) {
  MutexLock l(&mu_);
  watch_contexts_.push_back(std::make_unique<std::function<void()>>(std::move(wake)));
  return watch_contexts_.back().get();
}

void ZkSession::WakeWatch(zhandle_t*, int, int, const char*, void* ctx) {
  if (ctx != nullptr) (*static_cast<std::function<void()>*>(ctx))();
}

Status ZkSession::EnsurePath(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string prefix = path.substr(0, at);
    const int rc = zoo_create(zh_, prefix.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
    if (rc != ZOK && rc != ZNODEEXISTS) return ZkStatus(rc, "creating znode " + prefix);
  }
  return Status::OK();
}

StatusOr<std::vector<ZkCandidate>> ListCandidates(ZkSession* session, const std::string& dir,
                                                  void* watch_ctx) {
  String_vector children{0, nullptr};
  int rc = watch_ctx != nullptr
               ? zoo_wget_children(session->handle(), dir.c_str(), &ZkSession::WakeWatch,
                                   watch_ctx, &children)
               : zoo_get_children(session->handle(), dir.c_str(), 0, &children);
  RETURN_IF_ERROR(ZkStatus(rc, "listing " + dir));
  std::vector<ZkCandidate> out;
  for (int i = 0; i < children.count; ++i) out.push_back(ZkCandidate{children.data[i], ""});
  deallocate_String_vector(&children);
  std::sort(out.begin(), out.end(),
            [](const ZkCandidate& a, const ZkCandidate& b) { return a.node < b.node; });
  std::vector<ZkCandidate> live;
  for (ZkCandidate& c : out) {
    char buf[1024];
    int len = sizeof(buf);
    rc = zoo_get(session->handle(), (dir + "/" + c.node).c_str(), 0, buf, &len, nullptr);
    if (rc == ZNONODE) continue;  // Gone since the listing (its session ended).
    RETURN_IF_ERROR(ZkStatus(rc, "reading " + dir + "/" + c.node));
    c.endpoint.assign(buf, std::max(0, len));
    live.push_back(std::move(c));
  }
  return live;
}

}  // namespace relaxps
