#include "client/internal/router.h"

namespace relaxps {
namespace client_internal {

StatusOr<std::vector<Router::Moved>> Router::Install(const wire::ShardMap& proto,
                                                     bool cancel_dead) {
  ASSIGN_OR_RETURN(ShardMap m, ShardMap::FromProto(proto));
  auto next = std::make_shared<const ShardMap>(std::move(m));
  std::vector<Moved> moved;
  MutexLock l(&mu_);
  if (map_ && map_->version() >= next->version()) return moved;
  peers_.resize(next->num_servers(), -1);
  for (int i = 0; i < next->num_servers(); ++i) {
    const std::string& ep = next->server_endpoint(i);
    if (map_ && i < map_->num_servers() && peers_[i] >= 0 && !ep.empty() &&
        map_->server_endpoint(i) != ep) {
      moved.push_back(Moved{i, peers_[i], ep, true});
    } else if (cancel_dead && map_ && i < map_->num_servers() && peers_[i] >= 0 &&
               map_->proto().servers(i).alive() && !next->proto().servers(i).alive()) {
      moved.push_back(Moved{i, peers_[i], ep, false});
    }
    // A server the new map gives no endpoint has no peer (Peer() returns -1).
    peers_[i] = ep.empty() ? -1 : transport_->Connect(ep, next->proto().servers(i).curve_public_key());
  }
  map_ = std::move(next);
  return moved;
}

std::shared_ptr<const ShardMap> Router::map() const {
  MutexLock l(&mu_);
  return map_;
}

int Router::Peer(int server, std::string* endpoint) const {
  std::shared_ptr<const ShardMap> map;
  const int peer = Peer(server, &map);
  if (peer >= 0) *endpoint = map->server_endpoint(server);
  return peer;
}

int Router::Peer(int server, std::shared_ptr<const ShardMap>* map) const {
  MutexLock l(&mu_);
  if (server < 0 || server >= static_cast<int>(peers_.size())) return -1;
  *map = map_;
  return peers_[server];
}

std::vector<int> Router::ServersWithEndpoint() const {
  std::vector<int> servers;
  MutexLock l(&mu_);
  for (size_t s = 0; s < peers_.size(); ++s) {
    if (peers_[s] >= 0) servers.push_back(static_cast<int>(s));
  }
  return servers;
}

bool Router::IsMoved(const Status& status, const Message& reply) {
  return status.code() == StatusCode::kWrongShard && reply.header.has_shard_map();
}

int Router::RangeHolder(const std::string& table, uint64_t range_begin, int otherwise) const {
  StatusOr<std::vector<DenseSlice>> head = map()->SplitDense(table, range_begin, 1);
  return head.ok() && !head->empty() ? head->front().server : otherwise;
}

int Router::BucketHolder(const std::string& table, uint64_t bucket) const {
  std::shared_ptr<const ShardMap> now = map();
  const wire::TableShards* ts = now->FindTable(table);
  return ts == nullptr || ts->buckets_size() == 0
             ? -1
             : now->BucketServer(*ts, static_cast<int>(bucket));
}

}  // namespace client_internal
}  // namespace relaxps
