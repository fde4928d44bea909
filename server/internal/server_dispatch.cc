// ServerImpl: request dispatch (server_impl.h).
//
// Handle() checks every request (role, sender connection, clock window) and
// routes it to its handler; rejections, replies (held back for the WAL group
// commit), gradient decoding, CLOCK messages and the loop timer live here too.
// Loop thread.

#include <algorithm>

#include "common/payload_codec.h"
#include "server/internal/request_codec.h"
#include "server/internal/server_checkpoints.h"
#include "server/internal/server_impl.h"

namespace relaxps {
namespace server_internal {

Status ServerImpl::CheckClockAhead(const DenseShardState& shard, int64_t clock,
                                   int worker) const {
  if (!policy_->AggregatesPushes() && policy_->staleness_bound() < 0) return Status::OK();
  const int64_t window = std::max(0, policy_->staleness_bound()) + options_.max_clocks_ahead;
  // What the shard has seen of its workers: a legitimate worker is never
  // further ahead than the staleness bound (plus pushes without pulls).
  int64_t base = std::max(shard.visible_clock(), shard.min_worker_clock());
  if (worker >= 0 && held_workers_.count(worker) > 0) {
    for (int i = 0; i < live_workers_.ids_size() && i < live_workers_.clocks_size(); ++i) {
      if (live_workers_.ids(i) == worker) base = std::max(base, live_workers_.clocks(i));
    }
  }
  if (clock <= base + window) return Status::OK();
  return FailedPreconditionError("clock " + std::to_string(clock) + " is more than " +
                                 std::to_string(window) + " clocks ahead of shard '" +
                                 shard.spec().table + "' (at clock " + std::to_string(base) +
                                 "; staleness + --max_clocks_ahead)");
}

Status ServerImpl::CheckRole(const Request& req) const {
  const wire::Header& h = req.msg.header;
  const bool chain = h.forwarded() || h.type() == wire::CHAIN_SNAPSHOT ||
                     h.type() == wire::CHAIN_COMPLETE;
  const bool from_worker = !chain && h.sender() >= 0 &&
                           (h.type() == wire::PUSH || h.type() == wire::PUSH_PULL ||
                            h.type() == wire::PUSH_ROWS || h.type() == wire::CLOCK ||
                            h.type() == wire::PULL || h.type() == wire::PULL_ROWS);
  const std::string& u = req.user_id;
  if (!u.empty()) {  // --security=curve: the key's role, then the id it claims.
    const Principal p = PrincipalOf(u);
    if (!p.known || !RoleMaySend(p.role, h.type(), h.forwarded())) {
      return PermissionDeniedError("key '" + (p.known ? p.name : u) + "' (role " +
                                   (p.known ? RoleName(p.role) : "unknown") + ") may not send " +
                                   wire::MsgType_Name(h.type()) +
                                   (h.forwarded() ? " (forwarded)" : ""));
    }
    // A server's key speaks only for that server (without from_server the
    // token check below refuses it).
    bool ok = !chain || !h.has_from_server() || RoleAllows(u, "server", h.from_server());
    if (!chain) {
      switch (h.type()) {
        case wire::PULL:
        case wire::PULL_ROWS:
          ok = h.sender() < 0 ? RoleAllows(u, "observer") : RoleAllows(u, "worker", h.sender());
          break;
        case wire::PUSH:
        case wire::PUSH_PULL:
        case wire::PUSH_ROWS:
        case wire::CLOCK:
          ok = RoleAllows(u, "worker", h.sender());
          break;
        default:
          break;  // Control messages: CheckFromCoordinator; stats and probes: the role.
      }
    }
    if (!ok) {
      return PermissionDeniedError(
          "key '" + p.name + "' may not send " + wire::MsgType_Name(h.type()) +
          (chain ? " as server " + std::to_string(h.has_from_server() ? h.from_server() : -1)
                 : " as worker " + std::to_string(h.sender())));
    }
  }
  // Server-to-server messages, under plain TCP too: only from a live
  // server's current process (its member token; server_tokens.h).
  if (chain) return server_tokens_.Check(h);
  if (h.type() == wire::PUSH || h.type() == wire::PUSH_PULL || h.type() == wire::PUSH_ROWS ||
      h.type() == wire::CLOCK) {
    if (h.sender() < 0) {
      return PermissionDeniedError(wire::MsgType_Name(h.type()) + " refused: no worker id");
    }
  }
  if (from_worker) {
    // Member tokens, under plain TCP too: a worker's request only with the
    // token of its newest registration (common/member_token.h).
    auto it = worker_tokens_.find(h.sender());
    if (it == worker_tokens_.end() || !HeaderCarriesToken(h, it->second.token)) {
      return PermissionDeniedError(wire::MsgType_Name(h.type()) + " refused: it does not carry "
                                   "worker " + std::to_string(h.sender()) +
                                   "'s member token (only the process that registered as that "
                                   "worker may send it)");
    }
    it->second.used = true;
  }
  return Status::OK();
}

Status ServerImpl::CheckFromCoordinator(const Request& req) const {
  if (!req.user_id.empty() && !RoleAllows(req.user_id, "coordinator")) {
    return PermissionDeniedError(wire::MsgType_Name(req.msg.header.type()) +
                                 " is accepted only from the coordinator's key, not '" +
                                 req.user_id + "'");
  }
  const std::string& coordinator = link_->coordinator_identity();
  if (!coordinator.empty() && req.identity == coordinator) return Status::OK();
  return PermissionDeniedError(wire::MsgType_Name(req.msg.header.type()) +
                               " is accepted only from the coordinator's connection");
}

void ServerImpl::AdoptServerTokens(const wire::Header& h) {
  if (!h.has_server_tokens()) return;
  if (Status s = server_tokens_.Update(h.server_tokens()); !s.ok()) {
    LOG(ERROR) << "server tokens from the coordinator: " << s;
  }
}

void ServerImpl::OnTimer() {
  const int64_t now = clock_->NowMs();
  for (auto& [key, range] : dense_) range.shard->ExpireWaiters(now);
  for (auto& [name, table] : sparse_) table->ExpireWaiters(now);
  // Waiting pulls answered or expired in bulk (a peer that parked many and
  // went away), reply buffers a burst left in the pool: give their memory
  // back, which malloc and the pool keep otherwise (TuneMallocForLargeMessages).
  untrimmed_bytes_ += parked_.TakeReleasedBytes();
  if (options_.reply_pool_trim_ms > 0 && now >= next_pool_trim_ms_) {
    untrimmed_bytes_ += static_cast<int64_t>(buffer_pool_.TrimIdle());
    next_pool_trim_ms_ = now + options_.reply_pool_trim_ms;
  }
  if (untrimmed_bytes_ >= kTrimAfterReleasedBytes) {
    TrimFreeMemory();
    untrimmed_bytes_ = 0;
  }
  if (chain_ != nullptr) chain_->ResendStale();
  mover_->Poll();
  MaybeFlush();
  if (drained_) LeaveWhenQuiet(now);
}

void ServerImpl::MaybeFlush() {
  if (options_.FlushEveryClocks() > 0) {
    int64_t clock = 0;
    for (auto& [key, range] : dense_) clock = std::max(clock, range.shard->visible_clock());
    if (clock >= last_flush_clock_ + options_.FlushEveryClocks()) {
      SaveApplied();  // What the flushed state reflects goes with it.
      Status s = store_->Flush(clock);
      // A background flush's error comes with the next Flush; its success
      // is a commit counted by the store (an OK Flush may only have started
      // one). Logged (throttled) by the monitor: a full disk fails each one.
      if (!s.ok()) {
        OnDurableWrite(DurableWrite::kFlush, s.WithPrefix("flush at clock " + std::to_string(clock)));
      } else if (const uint64_t n = store_->CommittedFlushes(); n != committed_flushes_seen_) {
        committed_flushes_seen_ = n;
        OnDurableWrite(DurableWrite::kFlush, Status::OK());
      }
      if (s.ok()) last_flush_clock_ = clock;
    }
  }
}

void ServerImpl::OnDurableWrite(DurableWrite what, const Status& s) {
  if (s.ok()) {
    durability_.OnSuccess(what);
    return;
  }
  // Not disk faults: a store without durable state, no checkpoint directory,
  // a checkpoint of this clock being written already.
  if (s.code() != StatusCode::kIOError && s.code() != StatusCode::kCorruption) {
    LOG(ERROR) << s;
    return;
  }
  Status stop = durability_.OnFailure(what, s);
  if (!stop.ok()) Exit(stop);
}

void ServerImpl::Reject(const Request& req, const Status& status) {
  stats_.set_rejected(stats_.rejected() + 1);
  metrics_.OnReject(req, status);
  if (status.code() == StatusCode::kPermissionDenied ||
      status.code() == StatusCode::kFailedPrecondition ||
      status.code() == StatusCode::kResourceExhausted) {
    stats_.set_quota_rejected(stats_.quota_rejected() + 1);
  }
  uint64_t more = 0;
  const std::string type = wire::MsgType_Name(req.msg.header.type());
  if (rpc_->log_limiter()->Allow(type + "/" + StatusCodeName(status.code()), &more)) {
    const wire::Header& h = req.msg.header;
    LOG(WARNING) << "rejected " << (type.empty() ? "a message" : type) << " from "
                 << (h.has_from_server() ? "server " + std::to_string(h.from_server())
                                         : "worker " + std::to_string(h.sender()))
                 << ": " << status << " (" << more << " more like it since the last such line)";
  }
  Message reply = MakeReply(req.msg.header, status);
  const uint64_t sender_version = req.msg.header.shard_map_version();
  const bool routing_error =
      status.code() == StatusCode::kWrongShard || status.code() == StatusCode::kNotFound;
  if (routing_error && sender_version != 0 && (sender_version < map_version_ || ChainReplicates())) {
    // The sender routes with an old map (a key range or table this server
    // does not hold, or under chain replication a range it does not head):
    // send ours along ("moved"); the client installs it.
    *reply.header.mutable_shard_map() = map_;
  }
  req.reply_reservation.reset();  // An error carries no payload.
  rpc_->Send(req.identity, std::move(reply)).IgnoreError();
}

Status ServerImpl::ReserveReply(Request* req) {
  const wire::Header& h = req->msg.header;
  if (h.forwarded()) return Status::OK();  // Chain traffic: acknowledged without payload.
  uint64_t values = 0;
  switch (h.type()) {
    case wire::PULL:
    case wire::PUSH_PULL:
      values = h.key_count();
      break;
    case wire::PULL_ROWS: {
      // Rows of a table this server does not know are refused later.
      auto it = sparse_.find(h.table());
      if (it != sparse_.end()) values = h.key_count() * it->second->width();
      break;
    }
    default:
      return Status::OK();
  }
  // An upper bound of the reply's payload (EncodeFloats); a count past any
  // message's size is refused by the handlers.
  const uint64_t per_value = h.encoding() == wire::ENC_FP16 ? 2 : sizeof(float);
  const uint64_t max_values = static_cast<uint64_t>(options_.max_message_bytes) / per_value;
  return rpc_->ReserveReply(req, static_cast<int64_t>(std::min(values, max_values) * per_value));
}

bool ServerImpl::RefusePullPart(Request* req, const Status& refusal) {
  wire::Header& h = req->msg.header;
  if (h.type() != wire::PUSH_PULL || h.forwarded() || h.sender() < 0) return false;
  // Counted as the refusal it is (the request's pull part).
  stats_.set_quota_rejected(stats_.quota_rejected() + 1);
  metrics_.OnReject(*req, refusal);
  LOG_LIMITED(WARNING, rpc_->log_limiter(), "PUSH_PULL/pull part refused")
      << "PUSH_PULL from worker " << h.sender() << " answered as a PUSH (its pull is refused, "
      << "the client pulls later): " << refusal;
  // Applied (or held, or parked for its round) and acknowledged as a PUSH:
  // the reply's type says so (FillReplyHeader, MakeReply).
  h.set_type(wire::PUSH);
  return true;
}

bool ServerImpl::CheckFrameCount(const Request& req, size_t expected) {
  if (req.msg.frames.size() == expected) return true;
  Reject(req, InvalidArgumentError(wire::MsgType_Name(req.msg.header.type()) + " expects " +
                                   std::to_string(expected) + " payload frame(s), got " +
                                   std::to_string(req.msg.frames.size())));
  return false;
}

const float* ServerImpl::DecodeGradient(const Request& req, const Frame& frame, size_t n,
                                        bool check_finite) {
  StatusOr<const float*> values = DecodeFloats(frame, n, req.msg.header.encoding(),
                                               &decode_scratch_);
  if (!values.ok()) {
    Reject(req, values.status());
    return nullptr;
  }
  if (check_finite && !device_->AllFinite(*values, n)) {
    stats_.set_nonfinite_rejected(stats_.nonfinite_rejected() + 1);
    Reject(req, InvalidArgumentError("gradient contains non-finite values (NaN or Inf)"));
    return nullptr;
  }
  return *values;
}

void ServerImpl::ReplyWith(const Request& req, Message&& reply) {
  stats_.set_bytes_out(stats_.bytes_out() + reply.PayloadBytes());
  metrics_.OnReply(req);
  reply.header.set_shard_map_version(map_version_);
  // This server's epoch, unless the reply names one of its own (an
  // asynchronous chain head's acknowledgement: the epoch it took over at).
  if (reply.header.epoch() == 0) reply.header.set_epoch(epoch_);
  const wire::MsgType type = req.msg.header.type();
  if (type == wire::PUSH || type == wire::PUSH_PULL || type == wire::PUSH_ROWS) {
    // Whatever this reply acknowledges is in every checkpoint after this one.
    reply.header.set_snapshot_seq(applied_.snapshot_seq());
  }
  if (!unsynced_replies_.empty() || store_->HasUnsyncedUpdates()) {
    if (!RepliesBeforeSync()) {
      RpcServer::FillReplyHeader(req, &reply);
      unsynced_replies_.push_back(
          UnsyncedReply{req.identity, std::move(reply), std::move(req.reply_reservation)});
      return;
    }
    // --wal_reply=applied: what the reply answers is in the log file; the
    // background sync makes it durable (SyncAndRelease).
    stats_.set_replies_before_sync(stats_.replies_before_sync() + 1);
  }
  Status s = rpc_->Reply(req, std::move(reply));
  if (!s.ok()) {
    // The peer does not read its replies (or is gone): bounded by
    // max_queued_replies instead of memory.
    stats_.set_replies_dropped(stats_.replies_dropped() + 1);
    VLOG(1) << "reply dropped: " << s;
  }
}

bool ServerImpl::RepliesBeforeSync() const {
  return options_.wal_reply == WalReply::kApplied && unsynced_replies_.empty() &&
         store_->UnsyncedUpdatesWritten();
}

void ServerImpl::SyncAndRelease(bool wait) {
  if (unsynced_replies_.empty() && !store_->HasUnsyncedUpdates()) return;
  if (!wait && RepliesBeforeSync()) {
    // Nothing waits for this sync: it runs in the background, and its end
    // (the store's listener) brings the loop back here for the next one.
    bool durable = false;
    const Status polled = store_->PollWalSync(&durable);
    if (!polled.ok() || durable) OnDurableWrite(DurableWrite::kWal, polled.WithPrefix("WAL sync"));
    return;
  }
  const Status synced = store_->SyncWal();
  // A failed sync fails the replies it covered (nothing unsynced is
  // acknowledged); the monitor reports it and logs it throttled.
  OnDurableWrite(DurableWrite::kWal, synced.WithPrefix("WAL sync"));
  std::vector<UnsyncedReply> replies;
  replies.swap(unsynced_replies_);
  for (UnsyncedReply& r : replies) {
    if (!synced.ok()) {
      r.reply.frames.clear();
      StatusToProto(synced.WithPrefix("not durable"), r.reply.header.mutable_status());
    }
    Status s = rpc_->Send(r.identity, std::move(r.reply), std::move(r.reservation));
    if (!s.ok()) VLOG(1) << "reply dropped: " << s;
  }
}

void ServerImpl::Handle(Request&& req) {
  const wire::Header& h = req.msg.header;
  stats_.set_requests(stats_.requests() + 1);
  stats_.set_bytes_in(stats_.bytes_in() + req.msg.PayloadBytes());
  metrics_.OnRequest(req);
  if (h.is_reply()) {
    Reject(req, InvalidArgumentError("unexpected reply message"));
    return;
  }
  if (Status s = CheckRole(req); !s.ok()) {
    Reject(req, s);
    return;
  }
  // The bytes of a data reply are reserved before anything is applied: a
  // request whose reply would pass the limits on unread replies is refused
  // (ResourceExhausted; the client retries it), never answered by a reply
  // dropped later.
  // A PUSH_PULL's push goes on (RefusePullPart): a BSP/SSP round waits for
  // it, and its refused pull would otherwise wait for the round.
  if (Status s = ReserveReply(&req); !s.ok() && !RefusePullPart(&req, s)) {
    Reject(req, s);
    return;
  }
  if (h.forwarded() || h.type() == wire::CHAIN_SNAPSHOT || h.type() == wire::CHAIN_COMPLETE) {
    if (!ChainReplicates()) {
      Reject(req, FailedPreconditionError("chain message to a server without replication"));
      return;
    }
    chain_->HandleForwarded(std::move(req));
    return;
  }
  switch (h.type()) {
    case wire::PUSH:
    case wire::PULL:
    case wire::PUSH_PULL:
    case wire::PUSH_ROWS:
    case wire::PULL_ROWS:
    case wire::CLOCK:
      if (awaiting_seed_) {
        Reject(req, UnavailableError("server " + std::to_string(id_) +
                                     " is waiting to be seeded from the workers"));
        return;
      }
      if (Status s = recovery_->AdmitRequest(h); !s.ok()) {
        Reject(req, s);
        return;
      }
      if (h.type() != wire::CLOCK) ++table_requests_;
      HandleData(std::move(req));
      return;
    case wire::SEED:
    case wire::INSTALL_MAP:
    case wire::WORKER_SET:
    case wire::CHECKPOINT:
    case wire::MOVE_RANGE:
      if (Status s = CheckFromCoordinator(req); !s.ok()) {
        Reject(req, s);
        return;
      }
      AdoptServerTokens(h);
      break;
    default:
      break;
  }
  switch (h.type()) {
    case wire::SEED:
      HandleSeed(req);
      return;
    case wire::INSTALL_MAP:
    case wire::WORKER_SET: {
      Status s = h.type() == wire::WORKER_SET
                     ? SetLiveWorkers(h.live_workers())
                 : h.has_shard_map() ? InstallMap(h.shard_map())
                                     : InvalidArgumentError("INSTALL_MAP without a shard map");
      if (!s.ok()) {
        Reject(req, s);
      } else {
        ReplyWith(req, MakeReply(h, Status::OK()));
      }
      return;
    }
    case wire::PING:
      ReplyWith(req, MakeReply(h, Status::OK()));
      return;
    case wire::MOVE_RANGE:
      mover_->HandleMoveRange(std::move(req));
      return;
    case wire::MOVE_STATE:
      mover_->HandleMoveState(std::move(req));
      return;
    case wire::SERVER_STATS:
      HandleStats(req);
      return;
    case wire::CHECKPOINT:
      HandleCheckpoint(std::move(req));
      return;
    case wire::LIST_CHECKPOINTS: {
      Message reply = MakeReply(h, Status::OK());
      *reply.header.mutable_checkpoint_list() =
          server_internal::ListShardCheckpoints(checkpoint_root_, id_,
                                                options_.store.file_system.get());
      ReplyWith(req, std::move(reply));
      return;
    }
    default:
      Reject(req, InvalidArgumentError("unknown message type " + std::to_string(h.type())));
  }
}

void ServerImpl::HandleData(Request&& req) {
  const wire::Header& h = req.msg.header;
  // Synchronous checkpointing: a write waits (neither applied nor
  // acknowledged) until the snapshot being written is durable, and so does
  // whatever its sender sends after it (its pulls see its writes).
  if (checkpoint_hold_.Holds(h)) {
    checkpoint_hold_.Add(std::move(req), clock_->NowMs());
    return;
  }
  // A held worker's first request that is not a replay: its replay to
  // this server is done (RebuildsRoundsFromReplay).
  if (!held_workers_.empty() && !h.replayed() && h.sender() >= 0) {
    ReleaseWorkerClock(h.sender());
  }
  if (h.type() == wire::PUSH_ROWS || h.type() == wire::PULL_ROWS) {
    // Rows of a bucket cut out here for a move not yet published wait for
    // the map that publishes it (range_mover.h).
    if (!mover_->HoldIfMoving(&req)) HandleSparse(std::move(req));
    mover_->Poll();
  } else if (h.type() != wire::CLOCK) {
    // Keys cut out of a range here for a move not yet published wait for
    // the map that publishes it (range_mover.h).
    if (!mover_->HoldIfMoving(&req)) HandleDense(std::move(req));
    mover_->Poll();
  } else {
    Status s = server_internal::CheckClock(h.clock());
    for (auto it = dense_.begin(); s.ok() && it != dense_.end(); ++it) {
      s = CheckClockAhead(*it->second.shard, h.clock());
    }
    if (!s.ok()) {
      Reject(req, s);
      return;
    }
    HandleClock(req);
    mover_->Poll();  // A CLOCK may complete the round a move waits for.
  }
}

void ServerImpl::HandleClock(const Request& req) {
  const wire::Header& h = req.msg.header;
  for (auto& [key, range] : dense_) {
    if (range.chain == nullptr) {
      range.shard->AdvanceClock(h.sender(), h.clock());
      continue;
    }
    chain_->HandleClock(&range, h);
  }
  for (auto& [name, table] : sparse_) table->AdvanceClock(h.sender(), h.clock());
  ReplyWith(req, MakeReply(h, Status::OK()));
  MaybeFlush();
}

}  // namespace server_internal
}  // namespace relaxps
