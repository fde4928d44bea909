#include "client/internal/part_sender.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace relaxps {
namespace client_internal {
namespace {

// An update of this client's that acked_updates counts: a push part (a
// split range's first part standing for all), not a raw delta or a replay.
bool CountsAsUpdate(const wire::Header& h) {
  return (h.type() == wire::PUSH || h.type() == wire::PUSH_PULL || h.type() == wire::PUSH_ROWS) &&
         !h.raw_delta() && !h.replayed() && !h.push_continues();
}

}  // namespace

int PartSender::RouteOf(const Message& request, int server) const {
  const wire::MsgType t = request.header.type();
  if (!features_.chain_routing) return server;
  std::shared_ptr<const ShardMap> m = router_->map();
  if (t == wire::PUSH_ROWS || t == wire::PULL_ROWS) {
    // The head of the request's bucket.
    const wire::TableShards* ts = m->FindTable(request.header.table());
    const uint64_t bucket = request.header.key_begin();
    if (ts == nullptr || bucket >= static_cast<uint64_t>(ts->buckets_size())) return server;
    return ts->buckets(static_cast<int>(bucket)).server();
  }
  if (t != wire::PUSH && t != wire::PULL && t != wire::PUSH_PULL) return server;
  StatusOr<std::vector<DenseSlice>> head =
      m->SplitDense(request.header.table(), request.header.key_begin(), 1);
  return head.ok() && !head->empty() ? head->front().server : server;
}

bool PartSender::MovedAway(const Message& request, int server) const {
  const wire::MsgType t = request.header.type();
  if (features_.chain_routing || (t != wire::PUSH && t != wire::PULL && t != wire::PUSH_PULL)) {
    return false;
  }
  StatusOr<std::vector<DenseSlice>> slices = router_->map()->SplitDense(
      request.header.table(), request.header.key_begin(), request.header.key_count());
  if (!slices.ok()) return false;
  for (const DenseSlice& s : *slices) {
    if (s.server != server) return true;
  }
  return false;
}

void PartSender::FailMoved(int server, const Transport::ReplyCallback& done) const {
  Message reply;
  *reply.header.mutable_shard_map() = router_->map()->proto();
  done(WrongShardError("server " + std::to_string(server) +
                       " is unreachable and the shard map moved the part's keys away from it"),
       std::move(reply));
}

void PartSender::LogFailover(int server) {
  const uint64_t epoch = router_->map()->epoch();
  if (!host_->FirstFailoverAckIn(epoch)) return;
  LOG(INFO) << "chain failover: a resent request was acknowledged by server " << server
            << " at unix_ms=" << clock_source_->NowUnixMs() << " (epoch " << epoch << ")";
  EmitEvent(options_.events, "client_failover_acked",
            {{"worker", options_.worker_id}, {"server", server}, {"epoch", epoch}});
}

int PartSender::TimeoutMs(wire::MsgType type) const {
  // Without lost_after_ms a slow or lost server is the role's business
  // (waited for, or the part resent to a new chain head): every request gets
  // the full deadline.
  if (features_.lost_after_ms <= 0) return options_.request_timeout_ms;
  // A pull may wait at the BSP/SSP gate for slower workers: only the
  // coordinator's word or a closed connection takes its server away.
  const bool gated = (type == wire::PULL || type == wire::PUSH_PULL) &&
                     consistency_->model() != ConsistencyModel::kAsync;
  return gated ? options_.request_timeout_ms
               : std::min(options_.request_timeout_ms, features_.lost_after_ms);
}

recovery::FailedPart PartSender::NewFailedPart(int server, const std::string& endpoint,
                                               int holder, const Status& error, bool rows,
                                               int reroutes) const {
  recovery::FailedPart part;
  part.server = server;
  part.endpoint = endpoint;
  part.holder = holder;
  part.error = error;
  part.rows = rows;
  part.can_reroute = reroutes < kMaxReroutes;
  part.map = router_->map();
  return part;
}

void PartSender::Send(int server, std::function<Message()> make,
                            Transport::ReplyCallback done, int64_t give_up_ms, bool past_gate) {
  SendPart(server, std::move(make), std::move(done), give_up_ms, past_gate, Refusals());
}

void PartSender::ResendRefused(int server, std::function<Message()> make,
                               Transport::ReplyCallback done, int64_t give_up_ms, bool past_gate,
                               Refusals refusals, const Status& refusal) {
  refusals.backoff_ms = refusals.backoff_ms == 0
                            ? kFirstRetryMs
                            : std::min(2 * refusals.backoff_ms, kMaxRetryMs);
  const int64_t now = resender_->NowMs();
  if (!host_->JobError().ok() || now + refusals.backoff_ms >= refusals.deadline_ms) {
    done(refusal.WithPrefix("refused until the request's deadline"), Message());
    return;
  }
  refused_resends_.fetch_add(1);
  // Exactly one of the two runs: the resend, or the failure at shutdown.
  struct Held {
    std::function<Message()> make;
    Transport::ReplyCallback done;
  };
  auto held = std::make_shared<Held>(Held{std::move(make), std::move(done)});
  resends_.RunAfter(
      refusals.backoff_ms,
      [this, server, give_up_ms, past_gate, refusals, held] {
        SendPart(server, std::move(held->make), std::move(held->done), give_up_ms, past_gate,
                 refusals);
      },
      [held] { held->done(AbortedError("client is shutting down"), Message()); });
}

void PartSender::PullLater(int server, std::function<Message()> make,
                           Transport::ReplyCallback done, int64_t give_up_ms, bool past_gate,
                           Refusals refusals, const wire::Header& push_ack, bool keyed) {
  // The PUSH_PULL's pull part alone: a PULL of the clock after the push's
  // (what the server pulls a PUSH_PULL at), without the gradient.
  std::function<Message()> pull = [make = std::move(make)] {
    Message m = make();
    wire::Header& h = m.header;
    h.set_type(wire::PULL);
    h.set_clock(h.clock() + 1);
    h.clear_push_id();
    h.clear_push_continues();
    h.clear_raw_delta();
    m.frames.clear();
    return m;
  };
  // Its reply answers the PUSH_PULL: the parameters, with what the push's
  // acknowledgement said about the push (the role's checkpoint and chain
  // positions).
  auto ack = std::make_shared<const wire::Header>(push_ack);
  Transport::ReplyCallback pulled = [done = std::move(done), ack, keyed](const Status& st,
                                                                        Message&& reply) {
    if (st.ok()) {
      wire::Header& h = reply.header;
      h.set_snapshot_seq(ack->snapshot_seq());
      h.set_pending(ack->pending());
      h.set_chain_seq(ack->chain_seq());
      h.set_chain_head_since(ack->chain_head_since());
      h.set_epoch(ack->epoch());
    } else if (!keyed) {
      // A "moved" reply would make the caller send the whole PUSH_PULL
      // again, and a push without an exactly-once key would be applied
      // twice: the part fails instead.
      reply.header.clear_shard_map();
    }
    done(st.ok() ? st : st.WithPrefix("pull after its push was applied"), std::move(reply));
  };
  ResendRefused(server, std::move(pull), std::move(pulled), give_up_ms, past_gate, refusals,
                ResourceExhaustedError("the server applied the push and refused its pull part "
                                       "(unread replies)"));
}

void PartSender::SendPart(int server, std::function<Message()> make,
                          Transport::ReplyCallback done, int64_t give_up_ms, bool past_gate,
                          Refusals refusals) {
  Message request = make();
  server = RouteOf(request, server);
  std::shared_ptr<const ShardMap> peer_map;  // Names the endpoint the request goes to.
  const int peer = router_->Peer(server, &peer_map);
  if (peer < 0) {
    done(UnavailableError("server " + std::to_string(server) + " has no endpoint in the shard map"),
         Message());
    return;
  }
  // The map Peer() read (one lock and one reference per request, not three).
  const uint64_t epoch = peer_map->epoch();
  if (features_.chain_routing) request.header.set_epoch(epoch);
  if (role_->BeforeSend(server, *peer_map) == recovery::PartAction::kServeLocally) {
    // No live server holds the range; the caller serves it locally.
    done(UnavailableError("server " + std::to_string(server) +
                          " held the last replica of the range and is lost"),
         Message());
    return;
  }
  if (!past_gate && gate_->enabled()) {
    // A restarted server gets nothing before the role released it.
    client_internal::ServerGate::Held held{server, std::move(make), std::move(done), give_up_ms};
    if (!gate_->Admit(server, peer_map->server_endpoint(server), &held)) return;
    make = std::move(held.make);
    done = std::move(held.done);
  }
  const bool update = CountsAsUpdate(request.header);
  const bool push_pull = request.header.type() == wire::PUSH_PULL;
  const bool keyed = request.header.push_id() > 0;
  int timeout_ms = TimeoutMs(request.header.type());
  if (refusals.deadline_ms == 0) {
    refusals.deadline_ms = resender_->NowMs() + timeout_ms;
  } else {
    // A resend after a refusal: what is left of the part's deadline.
    timeout_ms = static_cast<int>(
        std::clamp<int64_t>(refusals.deadline_ms - resender_->NowMs(), 1, timeout_ms));
  }
  rpc_->Call(peer, std::move(request), timeout_ms,
             [this, server, peer_map, epoch, give_up_ms, past_gate, update, push_pull, keyed,
              refusals, make = std::move(make),
              done = std::move(done)](const Status& reply_status, Message&& reply) mutable {
               if (reply_status.ok() && push_pull && reply.header.type() == wire::PUSH) {
                 // The server applied the push and refused the pull part
                 // (its limit on unread replies): the pull goes later.
                 if (update) acked_updates_.fetch_add(1);
                 PullLater(server, std::move(make), std::move(done), give_up_ms, past_gate,
                           refusals, reply.header, keyed);
                 return;
               }
               if (reply_status.code() == StatusCode::kResourceExhausted) {
                 // Refused before anything was applied (the server's limit
                 // on unread replies): the same part again, later.
                 ResendRefused(server, std::move(make), std::move(done), give_up_ms, past_gate,
                               refusals, reply_status);
                 return;
               }
               Status st = reply_status;
               const bool chained = features_.chain_routing;
               if (chained && st.code() == StatusCode::kWrongShard &&
                   reply.header.has_shard_map()) {
                 // Not (or no longer) the head: install the map the server
                 // sent if it is newer, then re-route to the head it names,
                 // or wait for a newer map (the part is resent, with its
                 // exactly-once key, never failed for this).
                 Status installed = host_->SetMap(reply.header.shard_map());
                 if (!installed.ok()) LOG(ERROR) << "bad shard map in a reply: " << installed;
                 st = UnavailableError(st.message() + "; re-routing");
               }
               if (chained) {
                 if (st.ok() && !router_->map()->proto().servers(server).alive()) {
                   // A late reply of a server declared dead since: refused.
                   st = UnavailableError("reply from server " + std::to_string(server) +
                                         ", removed from its chains");
                 } else if (st.ok() && give_up_ms != 0 && update) {
                   // A resent push: the failover took effect for this
                   // worker. (Not a resent CLOCK: one parked for a tail that
                   // died while pushes went on to the heads says nothing.)
                   LogFailover(server);
                 }
               } else if (st.ok() && give_up_ms != 0 && resender_->FirstAckAfterPark(server)) {
                 // A part parked while its server was away, resent and
                 // acknowledged: the outage is over for this worker.
                 EmitEvent(options_.events, "client_failover_acked",
                           {{"worker", options_.worker_id},
                            {"server", server},
                            {"epoch", router_->map()->epoch()}});
               }
               if (st.ok() && update) acked_updates_.fetch_add(1);
               if (st.ok() || !Resender::IsServerLoss(st) || !host_->JobError().ok()) {
                 done(st, std::move(reply));
                 return;
               }
               if (MovedAway(make(), server)) {
                 // A drained source that exited before this worker routed
                 // by the map that moved its keys: route the part again.
                 FailMoved(server, done);
                 return;
               }
               const recovery::PartAction action = role_->OnServerFailed(
                   NewFailedPart(server, peer_map->server_endpoint(server), server, st, false, 0));
               const bool until_restart = action == recovery::PartAction::kPark;
               if (!until_restart && action != recovery::PartAction::kReroute) {
                 done(st, std::move(reply));
                 return;
               }
               if (!until_restart && (router_->map()->epoch() > epoch ||
                                      RouteOf(make(), server) != server)) {
                 // The map changed meanwhile: re-route to the new head now.
                 Send(server, std::move(make), std::move(done),
                            resender_->GiveUpTime(give_up_ms), past_gate);
                 return;
               }
               give_up_ms = resender_->GiveUpTime(give_up_ms);
               if (resender_->NowMs() >= give_up_ms) {
                 done(st, Message());
                 return;
               }
               Resender::Parked parked{server, peer_map->server_endpoint(server), std::move(make),
                                       std::move(done), give_up_ms, st};
               parked.until_restart = until_restart;
               parked.past_gate = past_gate;
               if (resender_->Park(std::move(parked))) {
                 EmitEvent(options_.events, "client_request_parked",
                           {{"worker", options_.worker_id},
                            {"server", server},
                            {"endpoint", peer_map->server_endpoint(server)},
                            {"until", until_restart ? "restart" : "new_map"},
                            {"wait_ms", give_up_ms - resender_->NowMs()},
                            {"reason", st.message()},
                            {"acked_updates", acked_updates_.load()}});
               }
               // The map may have named the restarted server before the part
               // was parked: resend what it already names. (Parts waiting for
               // a new head are retried by the role's heartbeat and on every
               // new map instead.)
               if (!until_restart) return;
               for (client_internal::Resender::Parked& p :
                    resender_->TakeRestarted(*router_->map())) {
                 Send(p.server, std::move(p.make), std::move(p.done), p.give_up_ms,
                            p.past_gate);
               }
             });
}

bool PartSender::Rerouted(const Status& st, const Message& reply, uint64_t version,
                          int reroutes) {
  if (!client_internal::Router::IsMoved(st, reply) || reroutes >= kMaxReroutes) return false;
  Status s = host_->SetMap(reply.header.shard_map());
  if (!s.ok()) {
    LOG(ERROR) << "bad shard map in a moved reply: " << s;
    return false;
  }
  return router_->map()->version() > version;
}

}  // namespace client_internal
}  // namespace relaxps
