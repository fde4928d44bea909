// Router: the client's view of the shard map and its connections to servers.
//
// Holds the newest shard map the client has seen (from registration, the
// coordinator's heartbeat replies, or a server's "moved" reply) and one
// transport peer per server. Splits requests by owner: dense key ranges via
// ShardMap::SplitDense, sparse rows by bucket (ShardMap::SparseBucket). When a server restarts on
// a new endpoint, Install() reports the old peer so the caller can fail what
// is still in flight there.
//
// Thread-safety: all methods are safe from any thread.
#ifndef RELAXPS_CLIENT_INTERNAL_ROUTER_H_
#define RELAXPS_CLIENT_INTERNAL_ROUTER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/shard_map.h"
#include "common/thread_annotations.h"
#include "common/transport.h"

namespace relaxps {
namespace client_internal {

class Router {
 public:
  // `transport` must outlive the router.
  explicit Router(Transport* transport) : transport_(transport) {}
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // A server whose endpoint changed with a newly installed map.
  struct Moved {
    int server;
    int old_peer;          // Peer of its previous endpoint.
    std::string endpoint;  // Its new endpoint.
    // Its endpoint changed (it restarted), rather than the new map marking
    // it dead (cancel_dead).
    bool restarted = true;
  };

  // Installs `proto` if its version is newer than the current map's and
  // returns the servers that moved (empty if not newer). InvalidArgument for
  // a malformed map (the current one stays).
  // With `cancel_dead` (chain routing), a server the new map marks dead
  // is reported too (endpoint unchanged, restarted false): what is in
  // flight there is re-routed to the new heads.
  StatusOr<std::vector<Moved>> Install(const wire::ShardMap& proto, bool cancel_dead = false);

  // Never null after the first successful Install().
  std::shared_ptr<const ShardMap> map() const;

  // The peer of `server` and, in *endpoint, its current endpoint; -1 when
  // the map names none.
  int Peer(int server, std::string* endpoint) const;
  // The same, with the current map in *map instead of a copy of the
  // endpoint (map->server_endpoint(server)): for the request path, which
  // needs the endpoint only if the request fails.
  int Peer(int server, std::shared_ptr<const ShardMap>* map) const;

  // The server of the dense range of `table` that starts at `range_begin`
  // in the current map (under chain replication the head of its chain);
  // `otherwise` if the map has no such range.
  int RangeHolder(const std::string& table, uint64_t range_begin, int otherwise) const;
  // The server of bucket `bucket` of sparse `table` in the current map (the
  // head of its chain); -1 if the map has none.
  int BucketHolder(const std::string& table, uint64_t bucket) const;

  // Servers with an endpoint in the current map.
  std::vector<int> ServersWithEndpoint() const;

  // True if a failed part was refused because the sender's shard map was
  // stale and the reply carries the server's newer map ("moved").
  static bool IsMoved(const Status& status, const Message& reply);

 private:
  Transport* const transport_;

  mutable Mutex mu_;
  std::shared_ptr<const ShardMap> map_ GUARDED_BY(mu_);
  std::vector<int> peers_ GUARDED_BY(mu_);              // Server index -> peer.
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_ROUTER_H_
