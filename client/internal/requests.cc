// What ClientImpl does for its data path (DataPath, data_path.h): the
// requests it makes (stamped with this registration), the finite check of
// a push, the acknowledged pushes reported to the role, a role's replayed
// push, and Clock().
#include "client/internal/client_impl.h"
#include "common/payload_codec.h"

namespace relaxps {
namespace client_internal {

Status ClientImpl::CheckPushFinite(const float* values, size_t n) {
  if (AllFinite(values, n)) return Status::OK();
  errors_.fetch_add(1);
  return InvalidArgumentError("gradient contains non-finite values (NaN or Inf)");
}

Message ClientImpl::NewRequest(wire::MsgType type, const std::string& table, int64_t clock,
                               uint64_t map_version) const {
  Message m;
  m.header.set_type(type);
  m.header.set_table(table);
  m.header.set_sender(job_.worker_id);
  m.header.set_clock(clock);
  m.header.set_shard_map_version(map_version);
  m.header.set_encoding(encoding_);
  // Every request names this registration: servers count the push parts
  // they apply per (worker, incarnation) (ServerStats.applied_parts), for
  // every policy. With ClientFeatures::exactly_once_keys pushes also carry
  // a push_id (chain resends, a stateless worker's resend of a push it gave
  // up on, replays).
  m.header.set_incarnation(incarnation_);
  StampToken(&m.header);
  if (features_.chain_routing) m.header.set_epoch(router_->map()->epoch());
  return m;
}

void ClientImpl::Replay(int server, const recovery::AckedPush& push,
                        std::function<void(const Status&, const wire::Header&)> done) {
  const uint64_t version = router_->map()->version();
  auto make = [this, push, version] {
    const bool rows = push.type == wire::PUSH_ROWS;
    Message req = NewRequest(rows ? wire::PUSH_ROWS : wire::PUSH, push.table, push.clock, version);
    req.header.set_incarnation(push.incarnation);
    req.header.set_push_id(push.push_id);
    req.header.set_replayed(true);
    req.header.set_push_continues(push.push_continues);
    req.header.set_key_begin(push.key_begin);
    req.header.set_key_count(rows ? push.ids.size() : push.grads.size());
    if (rows) req.frames.push_back(Frame::Share(push.ids));
    req.frames.push_back(EncodeFloats(push.grads, encoding_));
    return req;
  };
  parts_->Send(
      server, std::move(make),
      [done = std::move(done)](const Status& st, Message&& reply) { done(st, reply.header); }, 0,
      /*past_gate=*/true);
}

void ClientImpl::PushAcked(recovery::AckedPush push) {
  push.incarnation = incarnation_;
  role_->OnPushAcked(push);
}

Status ClientImpl::Clock() {
  RETURN_IF_ERROR(JobError());
  const int64_t c = clock_.load();
  // Every server learns that the clock completed: one that got no push, one
  // whose ranges this worker pushed only in part (per-layer pushes), and the
  // sparse tables' rounds.
  const uint64_t version = router_->map()->version();
  for (int server : router_->ServersWithEndpoint()) {
    if (ServedHere(server)) continue;
    parts_->Send(
        server, [this, c, version] { return NewRequest(wire::CLOCK, "", c, version); },
        [](const Status& s, Message&&) {
          if (!s.ok()) VLOG(1) << "clock message failed: " << s;
        });
  }
  clock_.fetch_add(1);
  return Status::OK();
}

}  // namespace client_internal
}  // namespace relaxps
