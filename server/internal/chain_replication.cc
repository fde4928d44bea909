// Chain replication of dense ranges (the write rule kForwardAlongChain,
// recovery/server_recovery.h): the server side.
//
// The head of a range's chain takes pushes (and CLOCKs) from workers, applies
// each, gives it the next sequence number and forwards it, with the worker's
// exactly-once key, to its successor; every replica applies the updates in
// sequence order and forwards them on; the tail acknowledges, and each
// replica acknowledges upstream once its successor did. The worker's push is
// answered when the head's acknowledgement arrives, so every live replica has
// it. Pulls are answered by the head, after the consistency gate, once every
// update they reflect is acknowledged (see docs/chain_replication.md).
#include <algorithm>

#include "common/payload_codec.h"
#include "server/internal/request_codec.h"
#include "server/internal/chain_replication.h"

namespace relaxps {
namespace server_internal {

namespace {
// An unacknowledged update is resent to the successor after this long (a
// successor that refused it for an epoch it had not installed yet, or lost it).
constexpr int64_t kResendAfterMs = 300;
constexpr int kForwardTimeoutMs = 5000;
}  // namespace

ChainReplication::ChainReplication(ChainHost* host, RpcServer* rpc,
                                   const RpcClientOptions& peer_options, const Clock* clock,
                                   const Options& options)
    : host_(host), clock_(clock), options_(options), peers_(rpc, peer_options) {}

void ChainReplication::MakeReplica(RangeState* range, bool has_state) {
  range->chain = std::make_unique<ChainReplica>();
  range->chain->set_has_state(has_state);
  if (range->shard != nullptr) range->shard->SetFollower(true);
}

void ChainReplication::SetBucketRates(const TableOptions& t) {
  for (auto it = buckets_.lower_bound({t.name, 0}); it != buckets_.end() && it->first.first == t.name;
       ++it) {
    it->second.bucket->shard()->set_rates(t);
  }
}

void ChainReplication::FenceIfPending() {
  if (fence_pending_.exchange(false)) Fence();
}

RangeState* ChainReplication::FindBucket(const std::string& table, uint64_t bucket) {
  auto b = buckets_.find({table, bucket});
  return b == buckets_.end() ? nullptr : &b->second;
}

void ChainReplication::ForEachBucket(const std::function<void(RangeState*)>& fn) {
  for (auto& [key, range] : buckets_) fn(&range);
}

void ChainReplication::ForEachReplica(const std::function<void(RangeState*)>& fn) {
  host_->ForEachDenseRange([&fn](RangeState* range) {
    if (range->chain != nullptr) fn(range);
  });
  ForEachBucket(fn);
}

int ChainReplication::PeerOf(int server) {
  if (server < 0 || server >= host_->map().servers_size()) return -1;
  const wire::ServerInfo& info = host_->map().servers(server);
  if (info.endpoint().empty()) return -1;
  auto it = peer_of_.find(server);
  if (it == peer_of_.end() || it->second.first != info.endpoint()) {
    peer_of_[server] = {info.endpoint(), peers_.Connect(info.endpoint(), info.curve_public_key())};
  }
  return peer_of_[server].second;
}

void ChainReplication::Fence() {
  LOG(ERROR) << "server " << id() << " fenced at epoch " << epoch()
             << ": dropping its replicas to rejoin its chains as tail";
  ForEachReplica([](RangeState* range) {
    // Replies waiting for acknowledgements are dropped: the workers refuse
    // replies from a server their map marks dead and resend elsewhere.
    range->chain = std::make_unique<ChainReplica>();
    range->chain->set_has_state(false);
    range->members.clear();
    range->outgoing.reset();
    range->incoming.reset();
    if (range->shard != nullptr) range->shard->SetFollower(true);
  });
  awaiting_state_.store(true);
}

void ChainReplication::UpdateAwaitingState() {
  bool awaiting = false;
  ForEachReplica([&](RangeState* range) {
    const bool member =
        std::find(range->members.begin(), range->members.end(), id()) != range->members.end();
    if (member && !range->chain->has_state()) awaiting = true;
  });
  const bool was_awaiting = awaiting_state_.exchange(awaiting);
  // Until the coordinator knows, it does not count this server as a copy of
  // the chains it joined.
  if (was_awaiting && !awaiting && host_->registered()) host_->ReportStateArrived();
}

void ChainReplication::ApplyRoles(const wire::ShardMap& map) {
  for (const wire::TableShards& ts : map.tables()) {
    for (const wire::DenseRange& r : ts.ranges()) {
      RangeState* range = host_->DenseRange(ts.table().name(), r.begin());
      if (range == nullptr || range->chain == nullptr) continue;
      ApplyRole(range, std::vector<int>(r.chain().begin(), r.chain().end()), map.epoch());
    }
    for (int b = 0; b < ts.buckets_size(); ++b) {
      auto it = buckets_.find({ts.table().name(), static_cast<uint64_t>(b)});
      if (it == buckets_.end()) continue;
      const wire::SparseBucket& sb = ts.buckets(b);
      ApplyRole(&it->second, std::vector<int>(sb.chain().begin(), sb.chain().end()),
                map.epoch());
    }
  }
  UpdateAwaitingState();
}

void ChainReplication::ApplyRole(RangeState* range, const std::vector<int>& members,
                                 uint64_t epoch) {
  auto me = std::find(members.begin(), members.end(), id());
  if (me == members.end()) return;  // Dropped from this chain: fenced by heartbeat.
  const bool head = me == members.begin();
  const int successor = me + 1 == members.end() ? -1 : *(me + 1);
  const std::vector<int> old_members = range->members;
  const int old_successor = range->chain->successor();
  const bool was_head = range->chain->head();
  range->members = members;
  range->chain->SetRole(head, successor, epoch);
  if (head && !was_head) {
    LOG(INFO) << "head of table '" << range->table << "' "
              << (range->bucket ? "bucket " : "keys from ") << range->key << " at epoch "
              << epoch << " (seq " << range->chain->applied_seq() << ")";
    if (range->shard != nullptr) range->shard->SetFollower(false);
    MaybeForwardCompletion(range);
  }
  // A transfer to a successor that is no longer ours is dropped.
  if (range->outgoing != nullptr && range->outgoing->successor() != successor) {
    range->outgoing.reset();
  }
  if (successor < 0 || !range->chain->has_state()) return;
  const bool joining =
      std::find(old_members.begin(), old_members.end(), successor) == old_members.end();
  if (joining && !old_members.empty()) {
    if (range->outgoing == nullptr) SendSnapshot(range);
  } else if (successor != old_successor || !range->chain->unacked().empty()) {
    // A new successor (the old one died): it has a prefix of what was
    // forwarded; resend the rest in order (it skips what it has).
    for (const auto& [seq, op] : range->chain->unacked()) SendLogged(range, op);
  }
}

RangeState* ChainReplication::FindReplica(const std::string& table, uint64_t key) {
  auto b = buckets_.find({table, key});
  if (b != buckets_.end()) return &b->second;
  RangeState* d = host_->DenseRange(table, key);  // A per-layer push may begin inside it.
  return d == nullptr || d->chain == nullptr ? nullptr : d;
}

uint64_t ChainReplication::ForwardNew(RangeState* range, Message* msg) {
  const uint64_t seq = range->chain->NextSeq();
  Commit(range, seq, msg);
  return seq;
}

void ChainReplication::Commit(RangeState* range, uint64_t seq, Message* msg) {
  if (range->chain->tail()) {
    range->chain->SetApplied(seq);
  } else {
    Forward(range, seq, msg);
  }
}

void ChainReplication::Forward(RangeState* range, uint64_t seq, Message* msg) {
  LoggedOp op = LoggedOp::From(msg);
  op.header.set_forwarded(true);
  op.header.set_chain_seq(seq);
  op.header.set_epoch(epoch());
  op.header.clear_request_id();
  op.header.clear_deadline_unix_ms();
  SendLogged(range, op);
  range->chain->Logged(seq, std::move(op), clock_->NowMs());
  stats()->set_forwarded(stats()->forwarded() + 1);
}

void ChainReplication::SendLogged(RangeState* range, const LoggedOp& op) {
  // Held back behind a state transfer in progress (sent when it completes).
  if (range->outgoing != nullptr) return;
  const int peer = PeerOf(range->chain->successor());
  if (peer < 0) return;
  Message msg = op.ToMessage();
  msg.header.set_epoch(epoch());  // A resend after a reconfiguration carries the new epoch.
  const std::string table = range->table;
  const uint64_t begin = range->key;
  const uint64_t seq = op.header.chain_seq();
  range->chain->set_last_send_ms(clock_->NowMs());
  // The acknowledgement is handled inline on this loop (LoopClient).
  CallPeer(peer, std::move(msg), kForwardTimeoutMs,
           [this, table, begin, seq](const Status& st, Message&& reply) {
             OnForwardReply(table, begin, seq, st, reply);
           });
}

void ChainReplication::CallPeer(int peer, Message msg, int timeout_ms,
                                LoopClient::ReplyCallback done) {
  msg.header.set_from_server(id());
  SetMemberToken(host_->wire_token(), &msg.header);
  peers_.Call(peer, std::move(msg), timeout_ms, std::move(done));
}

void ChainReplication::OnForwardReply(const std::string& table, uint64_t begin, uint64_t seq,
                                const Status& status, const Message& reply) {
  RangeState* found = FindReplica(table, begin);
  if (found == nullptr) return;
  RangeState& range = *found;
  if (!status.ok()) {
    if (status.code() == StatusCode::kFailedPrecondition && range.outgoing == nullptr &&
        status.message().find("awaiting state") != std::string::npos) {
      SendSnapshot(&range);
    } else {
      VLOG(1) << "forward of seq " << seq << " failed: " << status;  // Resent by the timer.
    }
    return;
  }
  if (reply.header.epoch() < epoch()) {
    // A late acknowledgement from a replica fenced since: its word no longer counts.
    stats()->set_stale_epoch_refused(stats()->stale_epoch_refused() + 1);
    return;
  }
  range.chain->OnAcked(seq);
}

void ChainReplication::WhenAcknowledgeable(ChainReplica* chain, uint64_t seq,
                                           std::function<void()> fn) {
  const uint64_t lag = options_.replication_lag;
  chain->WhenAcked(seq > lag ? seq - lag : 0, std::move(fn));
}

Message ChainReplication::PushReply(const ChainReplica& chain, const wire::Header& request,
                                    uint64_t seq, bool pending) const {
  Message reply = MakeReply(request, Status::OK());
  reply.header.set_pending(pending);
  if (options_.replication_lag > 0) {
    reply.header.set_chain_seq(seq);
    reply.header.set_chain_head_since(chain.head_since_seq());
    reply.header.set_epoch(chain.head_since_epoch());
  }
  return reply;
}

void ChainReplication::ReplyToPull(ChainReplica* chain, const std::shared_ptr<Request>& req,
                                   Message&& reply) {
  // HandleDense numbered the push of a push-pull in its request.
  const uint64_t push_seq = req->msg.header.chain_seq();
  if (options_.replication_lag > 0 && push_seq > 0) {
    reply.header.set_chain_seq(push_seq);
    reply.header.set_chain_head_since(chain->head_since_seq());
    reply.header.set_epoch(chain->head_since_epoch());
  }
  WhenAcknowledgeable(chain, chain->applied_seq(),
                      [this, req, shared = std::make_shared<Message>(std::move(reply))] {
                        host_->ReplyWith(*req, std::move(*shared));
                      });
}

void ChainReplication::ResendStale() {
  const int64_t now = clock_->NowMs();
  ForEachReplica([this, now](RangeState* range) {
    if (range->chain == nullptr || range->chain->tail()) return;
    if (range->outgoing != nullptr) {
      // A piece of a state transfer that failed, or is unanswered past its
      // deadline (a big piece may take a while): again.
      const OutgoingTransfer& t = *range->outgoing;
      if (now - t.last_send_ms >= (t.in_flight ? kForwardTimeoutMs : kResendAfterMs)) {
        SendPiece(range);
      }
      return;
    }
    if (range->chain->unacked().empty()) return;
    if (now - range->chain->last_send_ms() < kResendAfterMs) return;
    for (const auto& [seq, op] : range->chain->unacked()) SendLogged(range, op);
  });
}

void ChainReplication::HandleClock(RangeState* range, const wire::Header& h) {
  if (!range->chain->head() || !range->chain->has_state()) return;
  range->shard->AdvanceClock(h.sender(), h.clock());
  Message op;
  op.header = h;
  op.header.set_table(range->table);
  op.header.set_key_begin(range->key);
  ForwardNew(range, &op);
  MaybeForwardCompletion(range);
}

void ChainReplication::MaybeForwardCompletion(RangeState* range) {
  if (range->shard == nullptr || range->chain == nullptr || !range->chain->head() || !range->chain->has_state()) return;
  const int64_t applied = range->shard->applied_clock();
  if (applied <= range->forwarded_applied_clock) return;
  Message op;
  op.header.set_type(wire::CHAIN_COMPLETE);
  op.header.set_table(range->table);
  op.header.set_key_begin(range->key);
  op.header.set_clock(applied);
  range->shard->DescribeRoundsApplied(range->forwarded_applied_clock,
                                      op.header.mutable_rounds_applied());
  range->forwarded_applied_clock = applied;
  ForwardNew(range, &op);
}

Status ChainReplication::ApplyPush(DenseShardState* shard, const wire::Header& h, const float* grads) {
  // Hybrid: a worker hands back what it changed on its own copy while the
  // range was stranded as a raw delta, replicated like any push.
  if (h.raw_delta() && h.type() == wire::PUSH) return shard->AddDelta(h.key_begin(), grads, h.key_count());
  // A later part of a split push (push_continues) takes no optimizer step of
  // its own, on the head and on every replica alike.
  return shard->Push(h.sender(), h.clock(), h.key_begin(), grads, h.key_count(),
                     !h.push_continues());
}

void ChainReplication::HandleDense(RangeState* range, Request&& req) {
  const wire::Header& h = req.msg.header;
  ChainReplica* chain = range->chain.get();
  // A request routed with a newer map than ours waits for it (the client
  // retries): judged by our older map, we may not be the head yet.
  if (h.epoch() > epoch()) {
    host_->Reject(req, UnavailableError("server " + std::to_string(id()) + " is at epoch " +
                                 std::to_string(epoch()) + ", the request at " +
                                 std::to_string(h.epoch())));
    return;
  }
  if (!chain->head()) {
    host_->Reject(req, WrongShardError("keys from " + std::to_string(h.key_begin()) + " of table '" +
                              h.table() + "' are not in this shard: server " +
                              std::to_string(id()) + " is not the head of their chain"));
    return;
  }
  if (!chain->has_state()) {
    host_->Reject(req, UnavailableError("server " + std::to_string(id()) + " is awaiting state"));
    return;
  }
  DenseShardState* shard = range->shard.get();
  req.msg.header.clear_chain_seq();  // Set below for a push, never taken from a worker.
  auto shared = std::make_shared<Request>(std::move(req));  // `h` is gone from here on.
  const wire::Header& sh = shared->msg.header;
  if (sh.type() != wire::PULL) {
    const uint64_t done_at =
        sh.push_id() > 0 ? chain->FindApplied(sh.sender(), sh.incarnation(), sh.push_id()) : 0;
    if (done_at > 0) {
      // A resend (after a failover or a lost reply): applied once already
      // (or waiting for its BSP round: acknowledged as pending).
      stats()->set_duplicates_skipped(stats()->duplicates_skipped() + 1);
      shared->msg.header.set_chain_seq(done_at);  // For a push-pull's reply (ReplyToPull).
      if (sh.type() == wire::PUSH) {
        const bool pending = chain->ledger().IsPending(sh.sender(), sh.incarnation(), sh.push_id());
        WhenAcknowledgeable(chain, done_at, [this, chain, shared, done_at, pending] {
          host_->ReplyWith(*shared, PushReply(*chain, shared->msg.header, done_at, pending));
        });
        return;
      }
    } else {
      const float* grads = host_->DecodeGradient(*shared, shared->msg.frames[0], sh.key_count(), true);
      if (grads == nullptr) return;
      // Numbered before it is applied: pulls the push releases wait for it.
      const uint64_t seq = chain->NextSeq();
      Status s = ApplyPush(shard, sh, grads);
      if (!s.ok()) {
        // Keep the sequence gap-free with an update that changes nothing.
        Message filler;
        filler.header.set_type(wire::CHAIN_COMPLETE);
        filler.header.set_table(sh.table());
        filler.header.set_key_begin(shard->spec().begin);
        filler.header.set_clock(shard->applied_clock());
        shard->DescribeRoundsApplied(range->forwarded_applied_clock,
                                     filler.header.mutable_rounds_applied());
        Commit(range, seq, &filler);
        host_->Reject(*shared, s);
        return;
      }
      const bool pending = PushPending(*shard, sh);
      RecordPush(chain->mutable_ledger(), sh, seq, pending);
      Commit(range, seq, &shared->msg);
      shared->msg.header.set_chain_seq(seq);  // For the push-pull's reply (ReplyToPull).
      MaybeForwardCompletion(range);
      if (sh.type() == wire::PUSH) {
        WhenAcknowledgeable(chain, seq, [this, chain, shared, seq, pending] {
          host_->ReplyWith(*shared, PushReply(*chain, shared->msg.header, seq, pending));
        });
        host_->MaybeFlush();
        return;
      }
    }
  }
  host_->ServePull(range, shared, nullptr).IgnoreError();  // Without a push to apply it cannot fail.
}

void ChainReplication::HandleForwarded(Request&& req) {
  const wire::Header& h = req.msg.header;
  if (h.epoch() < epoch()) {
    stats()->set_stale_epoch_refused(stats()->stale_epoch_refused() + 1);
    host_->Reject(req, AbortedError("update from epoch " + std::to_string(h.epoch()) +
                             " refused at epoch " + std::to_string(epoch()) +
                             ": its sender was removed from the chain"));
    return;
  }
  if (h.epoch() > epoch()) {
    host_->Reject(req, UnavailableError("server " + std::to_string(id()) + " is at epoch " +
                                 std::to_string(epoch()) + ", the update at " +
                                 std::to_string(h.epoch())));
    return;
  }
  RangeState* range = FindReplica(h.table(), h.key_begin());
  if (range == nullptr) {
    host_->Reject(req, NotFoundError("no replica of table '" + h.table() + "' keys (or bucket) " +
                              std::to_string(h.key_begin()) + " here"));
    return;
  }
  ChainReplica* chain = range->chain.get();
  if (chain->head()) {
    host_->Reject(req, FailedPreconditionError("server " + std::to_string(id()) +
                                        " heads this chain; it takes no forwarded updates"));
    return;
  }
  const uint64_t seq = h.chain_seq();
  const wire::MsgType type = h.type();
  auto shared = std::make_shared<Request>(std::move(req));  // `h` is gone from here on.
  const wire::Header& sh = shared->msg.header;
  auto ack = [this, shared] { host_->ReplyWith(*shared, MakeReply(shared->msg.header, Status::OK())); };
  auto apply = [this, range](const Request& r) {
    return range->bucket != nullptr ? ApplyForwardedSparse(range, r)
                                    : ApplyForwardedDense(range, r);
  };
  if (type == wire::CHAIN_SNAPSHOT) {
    HandleSnapshotPiece(range, shared);  // chain_replication_transfer.cc
    return;
  }
  if (!chain->has_state()) {
    host_->Reject(*shared, FailedPreconditionError("replica is awaiting state"));
    return;
  }
  if (seq <= chain->applied_seq()) {  // Resent after a reconfiguration.
    chain->WhenAcked(seq, ack);
    return;
  }
  if (seq != chain->applied_seq() + 1) {
    host_->Reject(*shared, InternalError("update " + std::to_string(seq) + " after " +
                                  std::to_string(chain->applied_seq()) + ": a gap"));
    return;
  }
  if (!apply(*shared)) return;
  // A worker's push (not a CLOCK or a round completion): counted, and its
  // key recorded for the replica that heads the chain after a failover.
  // A BSP push waits for its round, completed by the head's CHAIN_COMPLETE.
  if (type == wire::PUSH || type == wire::PUSH_PULL || type == wire::PUSH_ROWS) {
    RecordPush(chain->mutable_ledger(), sh, seq,
               range->shard != nullptr && PushPending(*range->shard, sh));
  }
  chain->SetApplied(seq);
  if (!chain->tail()) Forward(range, seq, &shared->msg);
  chain->WhenAcked(seq, ack);
}

bool ChainReplication::ApplyForwardedDense(RangeState* range, const Request& req) {
  const wire::Header& h = req.msg.header;
  DenseShardState* shard = range->shard.get();
  switch (h.type()) {
    case wire::PUSH:
    case wire::PUSH_PULL: {
      if (req.msg.frames.size() != 1) {
        host_->Reject(req, InvalidArgumentError("forwarded push without its payload"));
        return false;
      }
      const float* grads =
          host_->DecodeGradient(req, req.msg.frames[0], h.key_count(), /*check_finite=*/false);
      if (grads == nullptr) return false;
      Status s = ApplyPush(shard, h, grads);
      if (!s.ok()) {
        LOG(ERROR) << "replica could not apply forwarded update " << h.chain_seq() << ": " << s;
      }
      return true;
    }
    case wire::CLOCK:
      shard->AdvanceClock(h.sender(), h.clock());
      return true;
    case wire::CHAIN_COMPLETE: {
      Status s = shard->CompleteRoundsBelow(h.clock(), h.rounds_applied());
      if (!s.ok()) LOG(ERROR) << "replica could not complete BSP rounds: " << s;
      range->forwarded_applied_clock = std::max(range->forwarded_applied_clock, h.clock());
      return true;
    }
    default:
      host_->Reject(req, InvalidArgumentError("cannot replicate " + wire::MsgType_Name(h.type())));
      return false;
  }
}

}  // namespace server_internal
}  // namespace relaxps
