// LocalFallback (local_fallback.h): going local, serving from the copies,
// re-seeding and rejoining.
#include "client/internal/local_fallback.h"

#include <cstring>
#include <map>
#include <utility>

#include "common/optimizer_rules.h"
#include "common/table.h"

namespace relaxps {
namespace client_internal {

StatusOr<std::unique_ptr<LocalFallback>> LocalFallback::New(Host* host, Router* router,
                                                            Transport* transport,
                                                            const Options& options) {
  if (options.disconnect_probe_ms <= 0 || options.stalled_probe_ms <= 0) {
    return InvalidArgumentError("local_after_ms and disconnect_probe_ms must be positive");
  }
  return std::unique_ptr<LocalFallback>(new LocalFallback(host, router, transport, options));
}

void LocalFallback::GoLocal(int server, const std::string& endpoint, bool stalled,
                            const std::string& why) {
  if (!replica_.GoLocal(server, endpoint, stalled, host_->clock())) return;
  LOG(WARNING) << "server " << server << " (" << endpoint << ") lost: " << why
               << "; training on this worker's copy of its ranges until it is replaced";
  EmitEvent(options_.events, "client_went_local",
            {{"worker", host_->worker_id()}, {"server", server}, {"clock", host_->clock()},
             {"reason", why}});
  std::string current;
  const int peer = router_->Peer(server, &current);
  // Whatever else waits on it is served locally now, not at its deadline.
  // The cancellation names the same kind of loss: the data path takes a part
  // it fails back to GoLocal, which may come after this server has answered a
  // probe and rejoined (a loaded worker runs the callbacks late). A stall must
  // stay a stall there, which the next probe rejoins; as an "unavailable"
  // server it would stay local for good, its worker training alone beside a
  // live server that never again sees its pushes.
  if (peer >= 0 && current == endpoint) {
    const std::string what = "server " + std::to_string(server);
    transport_->CancelPeer(peer, stalled ? DeadlineExceededError(what + " stalled: " + why)
                                         : UnavailableError(what + " lost"));
  }
}

bool LocalFallback::TakeOver(int holder, int spare) {
  if (!replica_.TakeOver(holder, spare)) return false;
  rows_.TakeOver(holder, spare);
  late_.Move(holder, spare);
  LOG(WARNING) << "server " << spare << " takes over what server " << holder
               << " held alone; this worker's copies of it move there";
  return true;
}

int LocalFallback::HolderOf(const std::string& table, uint64_t range_begin, int server) const {
  return options_.chain_routing ? router_->RangeHolder(table, range_begin, server) : server;
}

StatusOr<int64_t> LocalFallback::ServeDense(const ServingPart& part, const std::string& table,
                                            const DenseSlice& s, const float* grads, float* out,
                                            std::atomic<bool>* served_locally,
                                            uint64_t doubtful_id, FloatBuffer doubtful_grads,
                                            bool continues) {
  DCHECK(part.local());
  const wire::TableShards* ts = router_->map()->FindTable(table);
  if (ts == nullptr) return NotFoundError("unknown table '" + table + "'");
  if (grads != nullptr) RETURN_IF_ERROR(host_->CheckPushFinite(grads, s.count));
  const int holder = HolderOf(table, s.range_begin, s.server);
  // A worker that never pulled the whole range trains on the initializer's
  // values; only its change is merged at the re-seed (docs/stateless.md).
  replica_.StartFromInitializer(holder, table, s.range_begin, s.range_end,
                                TableFromProto(ts->table()).init);
  // A rule whose state is a velocity (momentum) trains locally with that
  // momentum (the same step size as on the server, so accuracy does not
  // jump when the server is back); the others with plain SGD
  // (docs/stateless.md, "Choices").
  const wire::OptimizerProto& opt = ts->table().optimizer();
  const OptimizerRule* rule = FindOptimizerRule(opt.name());
  const bool velocity = rule != nullptr && rule->velocity_slot;
  const LocalStep step{opt.lr(), velocity ? opt.momentum() : 0.0f};
  const bool doubtful = grads != nullptr && doubtful_id != 0;
  StatusOr<int64_t> clock =
      replica_.Serve(holder, table, s.range_begin, step, s.begin, grads, out, s.count,
                     doubtful ? doubtful_id : 0, doubtful ? std::move(doubtful_grads) : FloatBuffer(),
                     grads != nullptr && continues);
  if (!clock.ok()) {
    host_->CountError();
    return clock.status();
  }
  if (grads != nullptr) {
    late_.Record(holder, host_->clock());
    if (!served_locally->exchange(true)) replica_.CountLocalStep();
  }
  return *clock;
}

bool LocalFallback::ServeRows(int server, wire::MsgType type, const std::string& table,
                              size_t width, const KeyBuffer& ids, const FloatBuffer& grads,
                              const FloatBuffer& out, const std::vector<uint32_t>& positions,
                              std::atomic<bool>* served_locally, uint64_t doubtful_id,
                              Status* result) {
  ServingPart part(this, server);
  if (!part.local()) return false;
  *result = ServeRowsLocked(server, type, table, width, ids, grads, out, positions,
                            served_locally, doubtful_id);
  return true;
}

Status LocalFallback::ServeRowsLocked(int server, wire::MsgType type, const std::string& table,
                                      size_t width, const KeyBuffer& ids,
                                      const FloatBuffer& grads, const FloatBuffer& out,
                                      const std::vector<uint32_t>& positions,
                                      std::atomic<bool>* served_locally, uint64_t doubtful_id) {
  const wire::TableShards* ts = router_->map()->FindTable(table);
  if (ts == nullptr) return NotFoundError("unknown table '" + table + "'");
  const TableOptions t = TableFromProto(ts->table());
  const bool push = type == wire::PUSH_ROWS;
  if (push) RETURN_IF_ERROR(host_->CheckPushFinite(grads.data(), grads.size()));
  std::vector<float> rows(push ? 0 : ids.size() * width);
  rows_.Serve(server, table, t.init, width, t.optimizer.lr, ids, grads,
              push ? nullptr : rows.data(), push ? doubtful_id : 0);
  if (push) {
    late_.Record(server, host_->clock());
    if (!served_locally->exchange(true)) replica_.CountLocalStep();
  }
  for (size_t i = 0; i < positions.size() && !push; ++i) {
    std::memcpy(out.data() + positions[i] * width, rows.data() + i * width, width * sizeof(float));
  }
  return Status::OK();
}

void LocalFallback::RememberDense(const std::string& table, const DenseSlice& s,
                                  const float* params, int64_t params_clock) {
  replica_.Remember(HolderOf(table, s.range_begin, s.server), table, s.range_begin, s.range_end,
                    s.begin, params, s.count, params_clock);
  // Clocks never roll back: a server seeded at a higher clock than this
  // worker's moves it forward.
  host_->RaiseClock(params_clock);
}

void LocalFallback::Rejoin(int server, bool same_server, const char* why) {
  std::vector<DoubtfulPush> resend;
  std::vector<DoubtfulRowPush> resend_rows;
  std::vector<RangeDelta> deltas;
  std::vector<RowsDelta> row_deltas;
  StalenessHistogram late;  // The steps whose change goes to it now.
  uint64_t local_steps = 0;
  {
    MutexLock l(&serve_mu_);  // No part is half served (ServingPart).
    deltas = replica_.Rejoin(server, same_server, &resend);
    row_deltas = rows_.Take(server, same_server, &resend_rows);
    late = late_.Take(server, host_->clock());  // And those a re-seed copy took.
    local_steps = replica_.local_steps();
  }
  EmitEvent(options_.events, "client_rejoined",
            {{"worker", host_->worker_id()},
             {"server", server},
             {"clock", host_->clock()},
             {"local_steps", local_steps},
             {"late_updates", late.total()},
             {"staleness_hist", late.EventCounts()}});
  LOG(INFO) << "server " << server << " is back (" << why << "); " << deltas.size()
            << " range(s) and " << row_deltas.size()
            << " sparse table(s) changed locally since the last copy go to it as raw deltas, "
            << resend.size() + resend_rows.size()
            << " push(es) it may have applied are resent with their keys";
  const uint64_t version = router_->map()->version();
  const int64_t clock = host_->clock();
  // One push of `type` on `table` at `key_begin` (a dense range's first key
  // or a bucket): `ids` for rows, `values` the payload.
  auto send = [this, server, clock, version](const char* what, wire::MsgType type,
                                             const std::string& table, uint64_t key_begin,
                                             uint64_t push_id, bool raw_delta, KeyBuffer ids,
                                             FloatBuffer values, bool continues) {
    auto make = [this, type, table, key_begin, push_id, raw_delta, ids, values, clock, version,
                 continues] {
      Message req = host_->NewRequest(type, table, clock, version);
      const bool rows = type == wire::PUSH_ROWS;
      req.header.set_push_id(push_id);
      req.header.set_key_begin(key_begin);
      req.header.set_key_count(rows ? ids.size() : values.size());
      req.header.set_raw_delta(raw_delta);
      req.header.set_push_continues(continues);
      if (rows) req.frames.push_back(Frame::Share(ids));
      req.frames.push_back(host_->EncodeValues(values));
      return req;
    };
    host_->SendToServer(server, std::move(make), [server, what](const Status& s, Message&&) {
      if (!s.ok()) LOG(WARNING) << what << " for server " << server << " lost: " << s;
    });
  };
  for (const DoubtfulPush& p : resend) {
    send("a resent push", wire::PUSH, p.table, p.begin, p.push_id, false, KeyBuffer(), p.grads,
         p.continues);
  }
  for (const DoubtfulRowPush& p : resend_rows) {
    send("a resent row push", wire::PUSH_ROWS, p.table, 0, p.push_id, false, p.ids, p.grads,
         false);
  }
  for (const RangeDelta& d : deltas) {
    send("a local change", wire::PUSH, d.table, d.begin, 0, true, KeyBuffer(), d.delta, false);
  }
  for (const RowsDelta& d : SplitByBucket(row_deltas)) {
    send("local row changes", wire::PUSH_ROWS, d.table, d.bucket, 0, true, d.ids, d.delta,
         false);
  }
}

std::vector<RowsDelta> LocalFallback::SplitByBucket(const std::vector<RowsDelta>& deltas) const {
  if (!options_.chain_routing) return deltas;
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

void LocalFallback::OnDisconnect(int peer) {
  if (host_->shutting_down()) return;
  std::shared_ptr<const ShardMap> m = router_->map();
  for (int i = 0; i < m->num_servers(); ++i) {
    std::string endpoint;
    if (router_->Peer(i, &endpoint) != peer || replica_.IsLocal(i)) continue;
    // A disconnect is a hint (ZeroMQ reconnects by itself): confirm it.
    Message probe;
    probe.header.set_type(wire::PING);
    probe.header.set_sender(host_->worker_id());
    const int probe_ms = options_.disconnect_probe_ms;
    transport_->Call(peer, std::move(probe), probe_ms,
                     [this, i, endpoint, probe_ms](const Status& s, Message&&) {
                       if (s.ok() || host_->shutting_down()) return;
                       GoLocal(i, endpoint, false,
                               "its connection closed and it did not answer a probe within " +
                                   std::to_string(probe_ms) + " ms (" + s.ToString() + ")");
                     });
  }
}

void LocalFallback::SendSeedCopies(const wire::HeartbeatReply& reply) {
  for (const wire::ReseedRequest& q : reply.reseed()) {
    Message copy;
    copy.header.set_type(wire::SEED_COPY);
    copy.header.set_sender(host_->worker_id());
    wire::SeedData* d = copy.header.mutable_seed_data();
    d->set_server(q.server());
    d->set_map_version(q.map_version());
    d->set_worker(host_->worker_id());
    d->set_worker_clock(host_->clock());
    {
      MutexLock l(&serve_mu_);  // No part is half served (ServingPart).
      replica_.FillSeedCopy(q.server(), d, &copy.frames);
      rows_.FillSeedCopy(q.server(), replica_.LocalSince(q.server()), d, &copy.frames);
      // The copy carries every change made so far: those steps are applied
      // (late) by the seeded server.
      late_.HandBack(q.server(), d->worker_clock());
    }
    LOG(INFO) << "sending the coordinator this worker's copy of server " << q.server() << "'s "
              << d->ranges_size() << " range(s) at clock " << d->worker_clock();
    StatusOr<Message> answer = host_->CallCoordinatorSync(std::move(copy), 3000);
    if (!answer.ok()) LOG(WARNING) << "SEED_COPY for server " << q.server() << ": " << answer.status();
  }
}

void LocalFallback::ProbeStalledServers() {
  // A server lost by a stall that the map still shows alive at the same
  // endpoint may just have been slow: probe it, and hand back the change.
  std::shared_ptr<const ShardMap> m = router_->map();
  for (int i = 0; i < m->num_servers(); ++i) {
    std::string lost_at;
    bool stalled = false;
    if (!replica_.LostAt(i, &lost_at, &stalled) || !stalled) continue;
    const wire::ServerInfo& info = m->proto().servers(i);
    if (!info.alive() || info.endpoint() != lost_at) continue;
    std::string endpoint;
    const int peer = router_->Peer(i, &endpoint);
    if (peer < 0 || endpoint != lost_at) continue;
    Message probe;
    probe.header.set_type(wire::SERVER_STATS);
    probe.header.set_sender(host_->worker_id());
    if (transport_->CallSync(peer, std::move(probe), options_.stalled_probe_ms).ok()) {
      Rejoin(i, true, "it answered a probe: it was slow, not lost");
    }
  }
}

}  // namespace client_internal
}  // namespace relaxps
