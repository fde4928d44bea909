// The local-copy mechanisms of a worker that trains through a server's loss
// (recovery::ClientFeatures::local_copies; the role decides when): going
// local when a server is lost, serving its ranges from
// client_internal::LocalReplica and LocalRows, answering the coordinator's
// re-seed requests, and switching back to a seeded (or merely slow) server;
// and the other mechanisms a recovery role drives (recovery::ClientMechanisms).
#include <algorithm>
#include <cstring>
#include <map>

#include "client/internal/client_impl.h"
#include "common/optimizer_rules.h"
#include "common/payload_codec.h"
#include "common/table.h"

namespace relaxps {
namespace client_internal {

int ClientImpl::ServerTimeoutMs(wire::MsgType type) const {
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

void ClientImpl::GoLocal(int server, const std::string& endpoint, bool stalled,
                         const std::string& why) {
  if (!features_.local_copies || !replica_->GoLocal(server, endpoint, stalled, clock_.load())) {
    return;
  }
  LOG(WARNING) << "server " << server << " (" << endpoint << ") lost: " << why
               << "; training on this worker's copy of its ranges until it is replaced";
  std::string current;
  const int peer = router_->Peer(server, &current);
  // Whatever else waits on it is served locally now, not at its deadline.
  if (peer >= 0 && current == endpoint) {
    rpc_->CancelPeer(peer, UnavailableError("server " + std::to_string(server) + " lost"));
  }
}

int ClientImpl::HolderOf(const std::string& table, uint64_t range_begin, int server) const {
  if (!features_.chain_routing) return server;
  StatusOr<std::vector<DenseSlice>> head = router_->map()->SplitDense(table, range_begin, 1);
  return head.ok() && !head->empty() ? head->front().server : server;
}

int ClientImpl::RowsHolderOf(const std::string& table, uint64_t bucket, int server) const {
  if (!features_.chain_routing) return server;
  std::shared_ptr<const ShardMap> now = router_->map();
  const wire::TableShards* ts = now->FindTable(table);
  return ts == nullptr || ts->buckets_size() == 0
             ? -1
             : now->BucketServer(*ts, static_cast<int>(bucket));
}

bool ClientImpl::IsLocal(int server) const {
  return features_.local_copies && replica_->IsLocal(server);
}

bool ClientImpl::LostAt(int server, std::string* endpoint, bool* stalled) const {
  return features_.local_copies && replica_->LostAt(server, endpoint, stalled);
}

bool ClientImpl::TakeOver(int holder, int spare) {
  if (!features_.local_copies || !replica_->TakeOver(holder, spare)) return false;
  rows_->TakeOver(holder, spare);
  LOG(WARNING) << "server " << spare << " takes over what server " << holder
               << " held alone; this worker's copies of it move there";
  return true;
}

void ClientImpl::Reassign(const std::string& table, uint64_t range_begin, int server) {
  if (features_.local_copies) replica_->Reassign(table, range_begin, server);
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
    req.header.set_key_begin(push.key_begin);
    req.header.set_key_count(rows ? push.ids.size() : push.grads.size());
    if (rows) req.frames.push_back(Frame::Share(push.ids));
    req.frames.push_back(EncodeFloats(push.grads, encoding_));
    return req;
  };
  CallServer(
      server, std::move(make),
      [done = std::move(done)](const Status& st, Message&& reply) { done(st, reply.header); }, 0,
      /*past_gate=*/true);
}

Status ClientImpl::ServeLocally(const std::shared_ptr<DenseOp>& op, const DenseSlice& s,
                                uint64_t at, uint64_t doubtful_id) {
  const wire::TableShards* ts = router_->map()->FindTable(op->table);
  if (ts == nullptr) return NotFoundError("unknown table '" + op->table + "'");
  const bool push = op->type != wire::PULL;
  const bool pull = op->type != wire::PUSH;
  if (push) RETURN_IF_ERROR(CheckPushFinite(op->grads.data() + at, s.count));
  const int holder = HolderOf(op->table, s.range_begin, s.server);
  // A worker that never pulled the whole range trains on the initializer's
  // values; only its change is merged at the re-seed (docs/stateless.md).
  replica_->StartFromInitializer(holder, op->table, s.range_begin, s.range_end,
                                 TableFromProto(ts->table()).init);
  // A rule whose state is a velocity (momentum) trains locally with that
  // momentum (the same step size as on the server, so accuracy does not
  // jump when the server is back); the others with plain SGD
  // (docs/stateless.md, "Choices").
  const wire::OptimizerProto& opt = ts->table().optimizer();
  const OptimizerRule* rule = FindOptimizerRule(opt.name());
  const bool velocity = rule != nullptr && rule->velocity_slot;
  const LocalStep step{opt.lr(), velocity ? opt.momentum() : 0.0f};
  StatusOr<int64_t> clock = replica_->Serve(
      holder, op->table, s.range_begin, step, s.begin,
      push ? op->grads.data() + at : nullptr, pull ? op->out.data() + at : nullptr, s.count,
      push ? doubtful_id : 0, push && doubtful_id != 0 ? op->grads.Slice(at, s.count) : FloatBuffer());
  if (!clock.ok()) {
    errors_.fetch_add(1);
    return clock.status();
  }
  if (push && !op->served_locally.exchange(true)) replica_->CountLocalStep();
  int64_t seen = op->min_params_clock.load();
  while (*clock < seen && !op->min_params_clock.compare_exchange_weak(seen, *clock)) {
  }
  return Status::OK();
}

Status ClientImpl::ServeRowsLocally(int server, wire::MsgType type, const std::string& table,
                                    size_t width, const KeyBuffer& ids, const FloatBuffer& grads,
                                    const FloatBuffer& out, const std::vector<uint32_t>& positions,
                                    std::atomic<bool>* served_locally, uint64_t doubtful_id) {
  const wire::TableShards* ts = router_->map()->FindTable(table);
  if (ts == nullptr) return NotFoundError("unknown table '" + table + "'");
  const TableOptions t = TableFromProto(ts->table());
  const bool push = type == wire::PUSH_ROWS;
  if (push) RETURN_IF_ERROR(CheckPushFinite(grads.data(), grads.size()));
  std::vector<float> rows(push ? 0 : ids.size() * width);
  rows_->Serve(server, table, t.init, width, t.optimizer.lr, ids, grads,
               push ? nullptr : rows.data(), push ? doubtful_id : 0);
  if (push && !served_locally->exchange(true)) replica_->CountLocalStep();
  for (size_t i = 0; i < positions.size() && !push; ++i) {
    std::memcpy(out.data() + positions[i] * width, rows.data() + i * width, width * sizeof(float));
  }
  return Status::OK();
}

void ClientImpl::RememberReply(const std::shared_ptr<DenseOp>& op, const DenseSlice& s,
                               uint64_t at, int64_t params_clock) {
  replica_->Remember(HolderOf(op->table, s.range_begin, s.server), op->table, s.range_begin, s.range_end, s.begin,
                     op->out.data() + at, s.count, params_clock);
  // Clocks never roll back: a server seeded at a higher clock than this
  // worker's moves it forward.
  int64_t c = clock_.load();
  while (params_clock > c && !clock_.compare_exchange_weak(c, params_clock)) {
  }
}

void ClientImpl::Rejoin(int server, bool same_server, const char* why) {
  if (!features_.local_copies) return;
  std::vector<DoubtfulPush> resend;
  std::vector<DoubtfulRowPush> resend_rows;
  std::vector<RangeDelta> deltas = replica_->Rejoin(server, same_server, &resend);
  std::vector<RowsDelta> row_deltas = rows_->Take(server, same_server, &resend_rows);
  LOG(INFO) << "server " << server << " is back (" << why << "); " << deltas.size() << " range(s) and "
            << row_deltas.size() << " sparse table(s) changed locally since the last copy go to "
            << "it as raw deltas, " << resend.size() + resend_rows.size()
            << " push(es) it may have applied are resent with their keys";
  const uint64_t version = router_->map()->version();
  const int64_t clock = clock_.load();
  auto send = [this, server](const char* what, std::function<Message()> make) {
    CallServer(server, std::move(make), [server, what](const Status& s, Message&&) {
      if (!s.ok()) LOG(WARNING) << what << " for server " << server << " lost: " << s;
    });
  };
  for (const DoubtfulPush& p : resend) {
    send("a resent push", [this, p, clock, version] {
      Message req = NewRequest(wire::PUSH, p.table, clock, version);
      req.header.set_push_id(p.push_id);
      req.header.set_key_begin(p.begin);
      req.header.set_key_count(p.grads.size());
      req.frames.push_back(EncodeFloats(p.grads, encoding_));
      return req;
    });
  }
  for (const DoubtfulRowPush& p : resend_rows) {
    send("a resent row push", [this, p, clock, version] {
      Message req = NewRequest(wire::PUSH_ROWS, p.table, clock, version);
      req.header.set_push_id(p.push_id);
      req.header.set_key_count(p.ids.size());
      req.frames.push_back(Frame::Share(p.ids));
      req.frames.push_back(EncodeFloats(p.grads, encoding_));
      return req;
    });
  }
  for (const RangeDelta& d : deltas) {
    send("a local change", [this, d, clock, version] {
      Message req = NewRequest(wire::PUSH, d.table, clock, version);
      req.header.set_key_begin(d.begin);
      req.header.set_key_count(d.delta.size());
      req.header.set_raw_delta(true);
      req.frames.push_back(EncodeFloats(d.delta, encoding_));
      return req;
    });
  }
  for (const RowsDelta& d : SplitByBucket(row_deltas)) {
    send("local row changes", [this, d, clock, version] {
      Message req = NewRequest(wire::PUSH_ROWS, d.table, clock, version);
      req.header.set_key_begin(d.bucket);
      req.header.set_key_count(d.ids.size());
      req.header.set_raw_delta(true);
      req.frames.push_back(Frame::Share(d.ids));
      req.frames.push_back(EncodeFloats(d.delta, encoding_));
      return req;
    });
  }
}

std::vector<RowsDelta> ClientImpl::SplitByBucket(const std::vector<RowsDelta>& deltas) const {
  if (!features_.chain_routing) return deltas;
  std::shared_ptr<const ShardMap> m = router_->map();
  std::vector<RowsDelta> out;
  for (const RowsDelta& d : deltas) {
    const wire::TableShards* ts = m->FindTable(d.table);
    if (ts == nullptr || ts->buckets_size() == 0 || d.ids.size() == 0) continue;
    const size_t width = d.delta.size() / d.ids.size();
    std::map<int, std::pair<std::vector<uint64_t>, std::vector<float>>> parts;
    for (size_t i = 0; i < d.ids.size(); ++i) {
      auto& part = parts[m->SparseBucket(*ts, d.ids[i])];
      part.first.push_back(d.ids[i]);
      part.second.insert(part.second.end(), d.delta.data() + i * width,
                         d.delta.data() + (i + 1) * width);
    }
    for (const auto& [bucket, part] : parts) {
      RowsDelta p;
      p.table = d.table;
      p.bucket = static_cast<uint64_t>(bucket);
      p.ids = KeyBuffer::CopyOf(part.first.data(), part.first.size());
      p.delta = FloatBuffer::CopyOf(part.second.data(), part.second.size());
      out.push_back(std::move(p));
    }
  }
  return out;
}

void ClientImpl::OnDisconnect(int peer) {
  if (!local_on_disconnect_.load() || shutting_down_.load()) return;
  std::shared_ptr<const ShardMap> m = router_->map();
  for (int i = 0; i < m->num_servers(); ++i) {
    std::string endpoint;
    if (router_->Peer(i, &endpoint) != peer || replica_->IsLocal(i)) continue;
    // A disconnect is a hint (ZeroMQ reconnects by itself): confirm it.
    Message probe;
    probe.header.set_type(wire::PING);
    probe.header.set_sender(job_.worker_id);
    const int probe_ms = options_.disconnect_probe_ms;
    rpc_->Call(peer, std::move(probe), probe_ms,
               [this, i, endpoint, probe_ms](const Status& s, Message&&) {
                 if (s.ok() || shutting_down_.load()) return;
                 GoLocal(i, endpoint, false,
                         "its connection closed and it did not answer a probe within " +
                             std::to_string(probe_ms) + " ms (" + s.ToString() + ")");
               });
  }
}

void ClientImpl::SendSeedCopies(const wire::HeartbeatReply& hr) {
  if (!features_.local_copies) return;
  for (const wire::ReseedRequest& q : hr.reseed()) {
    Message copy;
    copy.header.set_type(wire::SEED_COPY);
    copy.header.set_sender(job_.worker_id);
    wire::SeedData* d = copy.header.mutable_seed_data();
    d->set_server(q.server());
    d->set_map_version(q.map_version());
    d->set_worker(job_.worker_id);
    d->set_worker_clock(clock_.load());
    replica_->FillSeedCopy(q.server(), d, &copy.frames);
    rows_->FillSeedCopy(q.server(), replica_->LocalSince(q.server()), d, &copy.frames);
    LOG(INFO) << "sending the coordinator this worker's copy of server " << q.server() << "'s "
              << d->ranges_size() << " range(s) at clock " << d->worker_clock();
    StatusOr<Message> reply = rpc_->CallSync(coordinators_.current(), std::move(copy), 3000);
    if (!reply.ok()) LOG(WARNING) << "SEED_COPY for server " << q.server() << ": " << reply.status();
  }
}

void ClientImpl::ProbeStalledServers() {
  if (!features_.local_copies) return;
  // A server lost by a stall that the map still shows alive at the same
  // endpoint may just have been slow: probe it, and hand back the change.
  std::shared_ptr<const ShardMap> m = router_->map();
  for (int i = 0; i < m->num_servers(); ++i) {
    std::string lost_at;
    bool stalled = false;
    if (!replica_->LostAt(i, &lost_at, &stalled) || !stalled) continue;
    const wire::ServerInfo& info = m->proto().servers(i);
    if (!info.alive() || info.endpoint() != lost_at) continue;
    std::string endpoint;
    const int peer = router_->Peer(i, &endpoint);
    if (peer < 0 || endpoint != lost_at) continue;
    Message probe;
    probe.header.set_type(wire::SERVER_STATS);
    probe.header.set_sender(job_.worker_id);
    if (rpc_->CallSync(peer, std::move(probe), options_.local_after_ms).ok()) {
      Rejoin(i, true, "it answered a probe: it was slow, not lost");
    }
  }
}

}  // namespace client_internal
}  // namespace relaxps
