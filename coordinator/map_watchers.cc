#include "coordinator/map_watchers.h"

#include <algorithm>

#include "common/wire.h"

namespace relaxps {

void MapWatchers::Add(Request req, const wire::ShardMap& map, int64_t now_ms) {
  const wire::Header& h = req.msg.header;
  if (h.shard_map_version() < map.version()) {
    Answer(req, map);
    return;
  }
  const int64_t hold = std::clamp(h.watch_ms(), 0, kMaxWatchMs);
  held_.push_back(Held{std::move(req), now_ms + hold});
}

void MapWatchers::Notify(const wire::ShardMap& map) {
  auto stale = std::partition(held_.begin(), held_.end(), [&](const Held& w) {
    return w.req.msg.header.shard_map_version() >= map.version();
  });
  for (auto it = stale; it != held_.end(); ++it) Answer(it->req, map);
  held_.erase(stale, held_.end());
}

void MapWatchers::Expire(const wire::ShardMap& map, int64_t now_ms) {
  auto due = std::partition(held_.begin(), held_.end(),
                            [&](const Held& w) { return w.deadline_ms > now_ms; });
  for (auto it = due; it != held_.end(); ++it) Answer(it->req, map);
  held_.erase(due, held_.end());
}

void MapWatchers::Answer(const Request& req, const wire::ShardMap& map) {
  Message reply = MakeReply(req.msg.header, Status::OK());
  *reply.header.mutable_shard_map() = map;
  rpc_->Reply(req, std::move(reply)).IgnoreError();
}

}  // namespace relaxps
