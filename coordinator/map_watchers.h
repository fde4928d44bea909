// MapWatchers: workers' held GET_SHARD_MAP requests (a map watch), answered
// as soon as the coordinator's shard map is newer than the one the worker
// holds, or when the watch expires.
//
// A worker keeps one watch outstanding (client/internal: WatchMap), so a new
// map (a failover, a rejoin) reaches it within a message delay of the
// coordinator's decision instead of its next heartbeat. The coordinator calls
// Notify after anything that may have changed the map and Expire from its
// timer.
//
// Thread-safety: not synchronized; used only on the coordinator's loop thread.
#ifndef RELAXPS_COORDINATOR_MAP_WATCHERS_H_
#define RELAXPS_COORDINATOR_MAP_WATCHERS_H_

#include <cstdint>
#include <vector>

#include "common/rpc_server.h"
#include "proto/relaxps.pb.h"

namespace relaxps {

class MapWatchers {
 public:
  // Longest hold a watch may ask for (watch_ms is clamped to it).
  static constexpr int kMaxWatchMs = 60000;

  // `rpc` outlives this.
  explicit MapWatchers(RpcServer* rpc) : rpc_(rpc) {}
  MapWatchers(const MapWatchers&) = delete;
  MapWatchers& operator=(const MapWatchers&) = delete;

  // A GET_SHARD_MAP with watch_ms > 0: answered at once with `map` if it is
  // newer than the request's shard_map_version, else held until Notify sees
  // a newer map or `now_ms` + watch_ms passes.
  void Add(Request req, const wire::ShardMap& map, int64_t now_ms);
  // Answers every watch older than `map`.
  void Notify(const wire::ShardMap& map);
  // Answers watches held past their deadline with `map` (unchanged).
  void Expire(const wire::ShardMap& map, int64_t now_ms);
  size_t size() const { return held_.size(); }

 private:
  struct Held {
    Request req;
    int64_t deadline_ms;
  };
  void Answer(const Request& req, const wire::ShardMap& map);

  RpcServer* const rpc_;
  std::vector<Held> held_;
};

}  // namespace relaxps

#endif  // RELAXPS_COORDINATOR_MAP_WATCHERS_H_
