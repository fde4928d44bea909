// ZkSession: one ZooKeeper session (the libzookeeper-mt C client) shared by
// the coordinator's ZooKeeper state store and its leader election.
//
// ZooKeeper's own threads deliver session events; listeners added with
// OnEvent() run on that thread and must not block or call ZooKeeper
// synchronously (post the work elsewhere). The blocking helpers below may be
// called from any other thread.
//
// Thread-safety: all methods are safe to call from multiple threads.
#ifndef RELAXPS_COORDINATOR_ZK_SESSION_H_
#define RELAXPS_COORDINATOR_ZK_SESSION_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"

typedef struct _zhandle zhandle_t;

namespace relaxps {

// zk://HOST:PORT[,HOST:PORT...]/PATH, split.
struct ZkAddress {
  std::string hosts;  // "h1:p1,h2:p2"
  std::string path;   // "/relaxps/job" (no trailing '/', never "/")
};
// InvalidArgument naming the expected form for anything else.
StatusOr<ZkAddress> ParseZkAddress(const std::string& url);

enum class ZkEvent {
  kDisconnected,  // Lost the connection; the session may still be alive.
  kReconnected,   // Connected again within the session.
  kExpired,       // The session is gone, and with it every ephemeral node.
};

struct ZkSessionOptions {
  std::string hosts;
  // ZooKeeper expires the session (and a leader's election node) after this
  // long without contact; it bounds the takeover time from above (about 1x
  // for a crash; clients' --coordinator_timeout_ms must exceed 2x). The
  // server clamps it to [2, 20] ticks.
  int session_timeout_ms = 4000;
  // How long Connect() waits for the first connection.
  int connect_timeout_ms = 10000;
};

class ZkSession {
 public:
  static StatusOr<std::unique_ptr<ZkSession>> Connect(const ZkSessionOptions& options);
  ~ZkSession();
  ZkSession(const ZkSession&) = delete;
  ZkSession& operator=(const ZkSession&) = delete;

  zhandle_t* handle() const { return zh_; }
  // The timeout the server granted.
  int session_timeout_ms() const;
  bool expired() const { return expired_.load(); }
  // `fn` runs on ZooKeeper's event thread for every later session event.
  void OnEvent(std::function<void(ZkEvent)> fn);

  // Creates `path` and its missing parents as persistent nodes.
  Status EnsurePath(const std::string& path);

  // A watch context owned by this session (freed after zookeeper_close, so
  // after the last callback): a watch set with WakeWatch and it calls
  // `wake` on each event, session events included (the C client hands
  // those to every registered watch without removing it, so a context must
  // never be freed by its callback). One context set again on the same path
  // is one watch (the C client keeps each (function, context) pair once),
  // so a loop that re-arms its watch at every poll adds nothing.
  void* WatchContext(std::function<void()> wake);
  static void WakeWatch(zhandle_t* zh, int type, int state, const char* path, void* ctx);

  // Called by the C client's watcher.
  void Deliver(int state);

 private:
  ZkSession() = default;

  zhandle_t* zh_ = nullptr;
  std::atomic<bool> expired_{false};
  Mutex mu_;
  std::condition_variable_any cv_;
  bool connected_ GUARDED_BY(mu_) = false;
  bool ever_connected_ GUARDED_BY(mu_) = false;
  std::vector<std::function<void(ZkEvent)>> listeners_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<std::function<void()>>> watch_contexts_ GUARDED_BY(mu_);
};

// A candidate of a job's leader election (coordinator/leader_election.h):
// its znode under PATH/election and the coordinator endpoint it holds.
struct ZkCandidate {
  std::string node;      // "n_0000000007"
  std::string endpoint;  // "tcp://10.0.0.5:7000"
};
// The candidates under `dir` in election order (the leader first: sequence
// numbers are zero-padded, so names sort in creation order). With `watch`,
// also sets a child watch on `dir` with ZkSession::WakeWatch and `ctx` (a
// ZkSession::WatchContext). Aborted (ZNONODE) while `dir` does not exist (no
// coordinator joined yet).
StatusOr<std::vector<ZkCandidate>> ListCandidates(ZkSession* session, const std::string& dir,
                                                  void* watch_ctx = nullptr);

// A ZooKeeper return code as a Status: ZBADVERSION/ZNONODE -> Aborted
// (fenced), connection and session errors -> Unavailable, others IOError.
Status ZkStatus(int rc, const std::string& what);

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_ZK_SESSION_H_
