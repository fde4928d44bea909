// --recovery=replay, client side: checkpoint's parking (a part whose server
// died waits for its restart) plus upstream backup. Every acknowledged push
// part goes into the worker's UpdateLog; a newer complete checkpoint trims
// it; when the map names a restarted server, the worker replays that
// server's entries in order through the gate (ClientMechanisms::Replay) and
// only then releases it, so its parked parts and new requests follow the
// replay. A restart during a replay starts a new one (the server's ledger
// skips what it has already applied). Every new map re-routes the log
// (UpdateLog::Reroute): after a range move an entry belongs to the server
// that now holds its keys, whose state (and exactly-once record) reflects
// it, and is replayed there if that server restarts.
#include <atomic>
#include <map>
#include <memory>
#include <vector>

#include <glog/logging.h>

#include "common/staleness_histogram.h"
#include "recovery/checkpoint/checkpoint_client.h"
#include "recovery/replay/replay.h"
#include "recovery/replay/update_log.h"

namespace relaxps {
namespace recovery {
namespace {

class ReplayClient final : public CheckpointClientRecovery {
 public:
  explicit ReplayClient(const ClientRecoveryOptions& options)
      : CheckpointClientRecovery(options), log_(options.update_log_bytes) {
    features_.exactly_once_keys = true;
    features_.hold_restarted_servers = true;
    features_.report_acked_pushes = options.worker;
  }

  void OnPushAcked(const AckedPush& push) override {
    const uint64_t dropped = log_.dropped_entries();
    log_.Append(push);
    const uint64_t now_dropped = log_.dropped_entries();
    if (now_dropped > dropped && (dropped == 0 || now_dropped / 1000 > dropped / 1000)) {
      LOG(WARNING) << "replay log over its " << options_.update_log_bytes
                   << " bytes (--replay_log_mb): " << now_dropped
                   << " acknowledged update(s) dropped so far; each is lost if its server "
                      "restarts before the next complete checkpoint";
    }
  }

  void OnHeartbeatReply(const wire::HeartbeatReply& reply) override {
    if (!reply.has_latest_checkpoint()) return;
    const uint64_t seq = reply.latest_checkpoint().seq();
    log_.Trim(seq);
    uint64_t known = latest_seq_.load();
    while (seq > known && !latest_seq_.compare_exchange_weak(known, seq)) {
    }
  }

  void OnMapInstalled(const ShardMap& map, const std::vector<int>& restarted) override {
    const uint64_t moved = log_.Reroute(mechanisms()->map());
    if (moved > 0) {
      VLOG(1) << moved << " logged update(s) follow their keys to another server (map "
              << map.version() << ")";
    }
    for (int server : restarted) {
      // What the restarted server's checkpoint holds (as it told the
      // coordinator; a server back from its own data dir: the newest
      // complete checkpoint known here).
      const wire::ServerInfo& info = map.proto().servers(server);
      const uint64_t restored =
          info.has_restored_from() ? info.restored_from().seq() : latest_seq_.load();
      const uint64_t lost = log_.TakeLost(server, restored);
      if (lost > 0) {
        LOG(WARNING) << "server " << server << " restarted from checkpoint " << restored << ": "
                     << lost << " acknowledged update(s) of this worker dropped from its "
                     << "full replay log (--replay_log_mb) are lost";
        EmitEvent(mechanisms()->events(), "updates_dropped",
                  {{"worker", mechanisms()->worker_id()},
                   {"server", server},
                   {"count", lost},
                   {"reason", "the replay log was full (--replay_log_mb) and checkpoint " +
                                  std::to_string(restored) + " does not hold them: lost"}});
      }
      StartReplay(server);
    }
  }

  void AddCounters(std::map<std::string, uint64_t>* counters) const override {
    (*counters)["replay_log_bytes"] = static_cast<uint64_t>(log_.bytes());
    (*counters)["replay_log_entries"] = log_.entries();
    (*counters)["replay_trimmed"] = log_.trimmed_entries();
    (*counters)["replay_dropped"] = log_.dropped_entries();
    (*counters)["replay_dropped_bytes"] = log_.dropped_bytes();
    (*counters)["replay_uncovered"] = log_.uncovered_entries();
    (*counters)["replay_lost"] = log_.lost_entries();
    (*counters)["replay_rerouted"] = log_.rerouted_entries();
    (*counters)["replayed"] = replayed_.load();
    (*counters)["replay_failed"] = replay_failed_.load();
  }

 private:
  // Replays server's entries, then releases its gate unless a newer restart
  // started another replay meanwhile.
  void StartReplay(int server) {
    const std::vector<std::shared_ptr<const UpdateLog::Entry>> entries = log_.EntriesFor(server);
    const uint64_t generation = NextGeneration(server);
    if (entries.empty()) {
      mechanisms()->ReleaseServer(server);
      return;
    }
    LOG(INFO) << "server " << server << " restarted: replaying " << entries.size()
              << " logged update(s) before anything new goes to it";
    // Each entry's answer writes its own slot of `applied`; the last answer
    // (left reaching 0) reads them all.
    auto applied = std::make_shared<std::vector<char>>(entries.size(), 0);
    auto left = std::make_shared<std::atomic<size_t>>(entries.size());
    // How far behind this worker's clock each update is when it is applied.
    auto behind = std::make_shared<std::vector<int64_t>>();
    for (const auto& e : entries) behind->push_back(mechanisms()->clock() - e->push.clock);
    for (size_t i = 0; i < entries.size(); ++i) {
      const uint64_t id = entries[i]->push.push_id;
      mechanisms()->Replay(
          server, entries[i]->push,
          [this, server, generation, id, i, left, applied, behind](const Status& st,
                                                                  const wire::Header& reply) {
            if (st.ok()) {
              log_.Replayed(server, id, reply.snapshot_seq(), reply.pending());
              replayed_.fetch_add(1);
              (*applied)[i] = 1;
            } else {
              replay_failed_.fetch_add(1);
              LOG(WARNING) << "replaying update " << id << " to server " << server
                           << " failed: " << st;
            }
            if (left->fetch_sub(1) == 1 && IsCurrent(server, generation)) {
              StalenessHistogram staleness;
              for (size_t k = 0; k < applied->size(); ++k) {
                if ((*applied)[k]) staleness.Add((*behind)[k]);
              }
              EmitEvent(mechanisms()->events(), "updates_replayed",
                        {{"worker", mechanisms()->worker_id()},
                         {"server", server},
                         {"count", staleness.total()},
                         {"staleness_hist", staleness.EventCounts()}});
              mechanisms()->ReleaseServer(server);
            }
          });
    }
  }

  uint64_t NextGeneration(int server) {
    MutexLock l(&mu_);
    return ++generation_[server];
  }
  bool IsCurrent(int server, uint64_t generation) {
    MutexLock l(&mu_);
    return generation_[server] == generation;
  }

  UpdateLog log_;
  std::atomic<uint64_t> latest_seq_{0};  // Newest complete checkpoint announced.
  std::atomic<uint64_t> replayed_{0};
  std::atomic<uint64_t> replay_failed_{0};
  Mutex mu_;
  std::map<int, uint64_t> generation_ GUARDED_BY(mu_);  // Replays started per server.
};

}  // namespace

std::unique_ptr<ClientRecovery> NewReplayClientRecovery(const ClientRecoveryOptions& options) {
  return std::make_unique<ReplayClient>(options);
}

}  // namespace recovery
}  // namespace relaxps
