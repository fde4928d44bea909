#include "server/internal/coordinator_link.h"

#include <unistd.h>

#include <chrono>
#include <thread>
#include <utility>

namespace relaxps {
namespace server_internal {

Status CoordinatorLink::Connect() {
  std::string first = options_.coordinator;
  if (!options_.coordination.empty()) {
    LeaderWatchOptions wo;
    wo.coordination = options_.coordination;
    wo.session_timeout_ms = options_.zk_session_timeout_ms;
    // Called on the watch's thread; CoordinatorPeers is thread-safe.
    wo.on_leader = [this](const std::string& endpoint) { coordinators_.Follow(endpoint); };
    ASSIGN_OR_RETURN(leader_watch_, LeaderWatch::Start(std::move(wo)));
    if (first.empty()) {
      ASSIGN_OR_RETURN(first, leader_watch_->WaitForLeader(options_.register_timeout_ms));
    }
  }
  RETURN_IF_ERROR(coordinators_.Connect(transport_.get(), first));
  // The watch may have seen a newer leader since `first`.
  if (leader_watch_ != nullptr && !leader_watch_->leader().empty()) {
    coordinators_.Follow(leader_watch_->leader());
  }
  return Status::OK();
}

StatusOr<wire::RegisterReply> CoordinatorLink::Register(int requested_id,
                                                        wire::ServerTokens* server_tokens) {
  Message req;
  req.header.set_type(wire::REGISTER);
  wire::RegisterRequest* r = req.header.mutable_register_request();
  r->set_role("server");
  r->set_requested_id(requested_id);
  // Only the first registration joins: a rejoin after a fence takes the id
  // this server was given.
  r->set_join(options_.join && requested_id < 0);
  r->set_endpoint(options_.endpoint);
  r->set_pid(getpid());
  r->set_protocol_version(kProtocolVersion);
  if (options_.restored_from.has_value()) *r->mutable_restored_from() = *options_.restored_from;
  const int64_t give_up = clock_->NowMs() + options_.register_timeout_ms;
  StatusOr<Message> reply = UnavailableError("not sent");
  while (true) {
    Message attempt;
    attempt.header = req.header;
    reply = coordinators_.CallSync(std::move(attempt), 1000);
    if (reply.ok() || clock_->NowMs() > give_up) break;
    if (reply.status().code() != StatusCode::kDeadlineExceeded &&
        reply.status().code() != StatusCode::kUnavailable) {
      break;
    }
    // A standby with no leader to name yet (a takeover under way) answers
    // at once: do not spin.
    if (reply.status().code() == StatusCode::kUnavailable) {
      std::this_thread::sleep_for(std::chrono::milliseconds(clock_->RealWaitMs(50)));
    }
  }
  if (!reply.ok()) {
    return reply.status().WithPrefix("registering with coordinator " +
                                     coordinators_.current_endpoint());
  }
  {
    MutexLock l(&token_mu_);
    member_token_ = reply->header.register_reply().member_token();
    wire_token_ = ToWireToken(member_token_);
  }
  if (server_tokens != nullptr) *server_tokens = reply->header.server_tokens();
  return reply->header.register_reply();
}

void CoordinatorLink::Registered(const wire::RegisterReply& reply) {
  id_ = reply.id();
  coordinator_identity_ = reply.coordinator_identity();
  coordinator_term_ = reply.coordinator_term();
}

void CoordinatorLink::StartHeartbeat() {
  last_heartbeat_ok_ms_ = clock_->NowMs();
  heartbeat_ = std::make_unique<PeriodicThread>(options_.heartbeat_ms, [this] { HeartbeatOnce(); },
                                                clock_);
}

void CoordinatorLink::StopHeartbeat() {
  if (heartbeat_ != nullptr) heartbeat_->Stop();
}

void CoordinatorLink::Deregister() {
  coordinators_.CallSync(MemberMessage(wire::DEREGISTER, "server", id_, member_token()), 300)
      .status()
      .IgnoreError();
}

Message CoordinatorLink::HeartbeatMessage(uint64_t map_version, bool awaiting_state) const {
  Message hb = MemberMessage(wire::HEARTBEAT, "server", id_, member_token());
  wire::HeartbeatRequest* h = hb.header.mutable_heartbeat();
  h->set_shard_map_version(map_version);
  h->set_awaiting_state(awaiting_state);
  return hb;
}

void CoordinatorLink::HeartbeatOnce() {
  // The version first: awaiting_state() is updated before a new version is
  // published (InstallMap), so the pair never claims a new map's state early.
  const uint64_t version = seen_map_version_.load();
  Message hb = HeartbeatMessage(version, host_->awaiting_state());
  StatusOr<Message> reply = coordinators_.CallSync(std::move(hb), options_.heartbeat_ms * 5);
  if (!reply.ok()) {
    if (reply.status().code() == StatusCode::kNotFound) {
      // Declared dead (e.g. paused past the heartbeat timeout): its shards
      // may have moved on without it, so its state must not serve again.
      // The server's recovery policy says how it comes back.
      host_->OnDeclaredDead(reply.status().message());
      return;
    }
    const int64_t silent_ms = clock_->NowMs() - last_heartbeat_ok_ms_;
    if (silent_ms > options_.coordinator_timeout_ms) {
      const Status s = UnavailableError(
          "no answer from the coordinator " + coordinators_.current_endpoint() + " for " +
          std::to_string(silent_ms) + " ms (--coordinator_timeout_ms=" +
          std::to_string(options_.coordinator_timeout_ms) + "): " + reply.status().ToString());
      host_->ExitLater(s);
      return;
    }
    if (++heartbeat_failures_ % 10 == 1) {
      LOG(WARNING) << "coordinator heartbeat failed: " << reply.status();
    }
    return;
  }
  heartbeat_failures_ = 0;
  last_heartbeat_ok_ms_ = clock_->NowMs();
  auto body = std::make_shared<wire::HeartbeatReply>(reply->header.heartbeat_reply());
  auto tokens = std::make_shared<wire::ServerTokens>(reply->header.server_tokens());
  if (!body->job_error().empty()) {
    host_->ExitLater(AbortedError("the job failed: " + body->job_error()));
    return;
  }
  host_->PostToLoop([this, body, tokens] {
    if (body->coordinator_term() > 0) {
      AdoptCoordinator(body->coordinator_identity(), body->coordinator_term());
    }
    host_->OnHeartbeatReply(*body, *tokens);
  });
}

void CoordinatorLink::AdoptCoordinator(const std::string& identity, uint64_t term) {
  if (term < coordinator_term_ || identity.empty()) return;  // A deposed coordinator.
  if (identity != coordinator_identity_) {
    LOG(INFO) << "server " << id_ << " follows the coordinator of term " << term
              << " (was term " << coordinator_term_ << ")";
  }
  coordinator_identity_ = identity;
  coordinator_term_ = term;
}

void CoordinatorLink::ReportStateArrived(uint64_t map_version) {
  coordinators_.Call(HeartbeatMessage(map_version, false), options_.heartbeat_ms * 5,
                     [](const Status&, Message&&) {});
}

void CoordinatorLink::Rejoin() {
  auto tokens = std::make_shared<wire::ServerTokens>();
  StatusOr<wire::RegisterReply> rr = Register(id_, tokens.get());
  if (!rr.ok()) {
    LOG(ERROR) << "server " << id_ << " could not rejoin after being fenced: " << rr.status()
               << "; stopping";
    fenced_.store(true);
    host_->StopNow();
    return;
  }
  auto reply = std::make_shared<wire::RegisterReply>(*rr);
  host_->PostToLoop([this, reply, tokens] {
    AdoptCoordinator(reply->coordinator_identity(), reply->coordinator_term());
    host_->OnRejoined(*reply, *tokens);
  });
}

}  // namespace server_internal
}  // namespace relaxps
