// Tables, learning rates and shard map installs.
#include "coordinator/internal/coordinator_impl.h"

#include <algorithm>
#include <cmath>

#include "common/table.h"

namespace relaxps {
namespace coordinator_internal {

void CoordinatorImpl::HandleCreateTable(Request req) {
  const TableOptions t = TableFromProto(req.msg.header.create_table());
  Status valid = t.Validate();
  if (valid.ok() && t.type == TableType::kDense && options_.max_table_bytes > 0 &&
      t.size > options_.max_table_bytes / sizeof(float)) {
    valid = InvalidArgumentError("table '" + t.name + "' of " + std::to_string(t.size) +
                                 " floats is larger than the job admits (--max_table_mb=" +
                                 std::to_string(options_.max_table_bytes >> 20) + ")");
  }
  if (!valid.ok()) {
    rpc_->ReplyStatus(req, valid).IgnoreError();
    return;
  }
  for (const wire::TableShards& ts : map_.tables()) {
    if (ts.table().name() != t.name) continue;
    std::string a, b;
    wire::TableProto requested, existing = ts.table();
    TableToProto(t, &requested);
    existing.clear_lr_changes();  // Later SetLearningRate calls are not part of the identity.
    requested.clear_lr_changes();
    existing.SerializeToString(&a);
    requested.SerializeToString(&b);
    Status s = a == b ? Status::OK()
                      : InvalidArgumentError("table '" + t.name +
                                             "' already exists with different options");
    // Identical: acknowledge once every server has the table (it may still be
    // in flight for the first creator; INSTALL_MAP is idempotent).
    if (!s.ok()) {
      rpc_->ReplyStatus(req, s).IgnoreError();
      return;
    }
    break;
  }
  if (outcome_.failed()) {
    rpc_->ReplyStatus(req, AbortedError(outcome_.error())).IgnoreError();
    return;
  }
  if (members_.live_servers() < ExpectedServers()) {
    rpc_->ReplyStatus(req, UnavailableError("waiting for servers: " +
                                            std::to_string(members_.live_servers()) + " of " +
                                            std::to_string(ExpectedServers()) + " registered"))
        .IgnoreError();
    return;
  }
  const bool created =
      std::none_of(map_.tables().begin(), map_.tables().end(),
                   [&](const wire::TableShards& ts) { return ts.table().name() == t.name; });
  if (created) {
    Status admit = map_.tables_size() >= options_.max_tables
                       ? FailedPreconditionError(
                             "table '" + t.name + "' refused: the job has " +
                             std::to_string(map_.tables_size()) +
                             " tables, the most it admits (--max_tables=" +
                             std::to_string(options_.max_tables) + ")")
                       : control_limiter_.Take(req.identity, "CREATE_TABLE", clock_->NowMs());
    if (!admit.ok()) {
      Refuse(req, admit);
      return;
    }
    wire::TableShards* ts = map_.add_tables();
    TableToProto(t, ts->mutable_table());
    // A table created after servers joined or were drained is spread over
    // the servers there are now (a joined server would otherwise hold none
    // of it until a move, a drained one would be given some), unless the
    // policy keeps the home placement (chains).
    std::vector<int> ids;
    if (recovery_->PlacesNewTablesOnCurrentServers()) ids = PlacementServers();
    if (ids.empty()) {
      for (int i = 0; i < options_.num_servers; ++i) ids.push_back(i);
    }
    const int n = static_cast<int>(ids.size());
    auto place = [&ids](auto* part) {
      part->set_server(ids[part->server()]);
      for (int& s : *part->mutable_chain()) s = ids[s];
    };
    if (t.type == TableType::kDense) {
      for (wire::DenseRange r : ShardMap::AssignDense(t.size, n, job_.replicas())) {
        place(&r);
        *ts->add_ranges() = r;
      }
    } else {
      const int buckets = options_.sparse_buckets > 0 ? options_.sparse_buckets : n;
      for (wire::SparseBucket b : ShardMap::AssignBuckets(buckets, n, job_.replicas())) {
        place(&b);
        *ts->add_buckets() = b;
      }
    }
    map_.set_version(map_.version() + 1);
    LOG(INFO) << "created " << (t.type == TableType::kDense ? "dense" : "sparse") << " table '"
              << t.name << "' (size " << t.size << ", width " << t.row_width << ", "
              << t.optimizer.name << " lr " << t.optimizer.lr << "), map version "
              << map_.version();
  }
  InstallMapAndReply(std::move(req), "installing shard map", created ? t.name : "");
}

void CoordinatorImpl::InstallMapAndReply(Request req, const std::string& what,
                                         const std::string& drop_on_failure) {
  if (!Persist()) return;
  Message install;
  install.header.set_type(wire::INSTALL_MAP);
  *install.header.mutable_shard_map() = map_;
  auto shared = std::make_shared<Request>(std::move(req));
  const uint64_t version = map_.version();
  const uint64_t epoch = map_.epoch();
  Broadcast(install, [this, shared, what, drop_on_failure, version, epoch](const Status& s) {
    EmitMapInstalled(version, epoch, what, s);
    if (!s.ok()) {
      // A table a server could not create (over its quota, out of memory)
      // leaves no trace: servers would otherwise retry it at every
      // heartbeat and every later CREATE_TABLE would fail too.
      if (!drop_on_failure.empty()) DropTable(drop_on_failure, s);
      rpc_->ReplyStatus(*shared, s.WithPrefix(what)).IgnoreError();
      return;
    }
    Message reply = MakeReply(shared->msg.header, Status::OK());
    *reply.header.mutable_shard_map() = map_;
    rpc_->Reply(*shared, std::move(reply)).IgnoreError();
  });
}

void CoordinatorImpl::HandleSetLearningRate(Request req) {
  const wire::Header& h = req.msg.header;
  const wire::LrChange& c = h.lr_change();
  Status bad;
  if (!h.has_lr_change() || !(c.lr() > 0) || !std::isfinite(c.lr()) || c.from_clock() < 0) {
    bad = InvalidArgumentError("SET_LEARNING_RATE needs a positive finite lr and a clock >= 0");
  } else if (outcome_.failed()) {
    bad = AbortedError(outcome_.error());
  }
  wire::TableProto* table = nullptr;
  for (wire::TableShards& ts : *map_.mutable_tables()) {
    if (ts.table().name() == h.table()) table = ts.mutable_table();
  }
  if (bad.ok() && table == nullptr) bad = NotFoundError("unknown table '" + h.table() + "'");
  if (bad.ok() && table->lr_changes_size() >= kMaxLrChanges) {
    bad = FailedPreconditionError("table '" + h.table() + "' already has " +
                                  std::to_string(kMaxLrChanges) +
                                  " learning-rate changes, the most it keeps");
  }
  if (!bad.ok()) {
    rpc_->ReplyStatus(req, bad).IgnoreError();
    return;
  }
  // Sorted by clock; a second change at the same clock replaces the first.
  TableOptions t = TableFromProto(*table);
  auto at = std::lower_bound(t.lr_changes.begin(), t.lr_changes.end(),
                             std::make_pair(c.from_clock(), -1.0f));
  if (at != t.lr_changes.end() && at->first == c.from_clock()) {
    at->second = c.lr();
  } else {
    t.lr_changes.insert(at, {c.from_clock(), c.lr()});
  }
  TableToProto(t, table);
  map_.set_version(map_.version() + 1);
  LOG(INFO) << "table '" << t.name << "': learning rate " << c.lr() << " from clock "
            << c.from_clock() << " (worker " << h.sender() << "), map version " << map_.version();
  InstallMapAndReply(std::move(req), "installing the new learning rate");
}

void CoordinatorImpl::DropTable(const std::string& name, const Status& why) {
  auto* tables = map_.mutable_tables();
  for (int i = 0; i < tables->size(); ++i) {
    if (tables->Get(i).table().name() != name) continue;
    tables->DeleteSubrange(i, 1);
    map_.set_version(map_.version() + 1);
    LOG(WARNING) << "table '" << name << "' dropped from the map (version " << map_.version()
                 << "): " << why;
    PushMap("table '" + name + "' dropped");
    return;
  }
}

void CoordinatorImpl::Broadcast(const Message& msg, std::function<void(const Status&)> done,
                                int timeout_ms, ReplyFn on_reply) {
  struct State {
    int remaining = 0;
    Status first_error;
    std::function<void(const Status&)> done;
  };
  auto state = std::make_shared<State>();
  state->done = std::move(done);
  std::vector<std::pair<int, int>> targets;
  for (const auto& [id, m] : members_.servers()) {
    if (m.alive) targets.emplace_back(id, server_peer_[id]);
  }
  state->remaining = static_cast<int>(targets.size());
  if (targets.empty()) {
    state->done(Status::OK());
    return;
  }
  // Every broadcast tells the servers who their peers are now.
  wire::Header header = msg.header;
  FillServerTokens(&header);
  for (const auto& [id, peer] : targets) {
    Message copy;
    copy.header = header;
    const int server_id = id;
    servers_rpc_->Call(peer, std::move(copy), timeout_ms,
                       [this, state, server_id, on_reply](const Status& s, Message&& reply) {
                         auto shared = std::make_shared<Message>(std::move(reply));
                         rpc_->Post([state, s, server_id, on_reply, shared] {
                           if (!s.ok() && state->first_error.ok()) {
                             state->first_error = s.WithPrefix("server " + std::to_string(server_id));
                           }
                           if (s.ok() && on_reply) on_reply(server_id, *shared);
                           if (--state->remaining == 0) state->done(state->first_error);
                         });
                       });
  }
}

void CoordinatorImpl::EmitMapInstalled(uint64_t version, uint64_t epoch, const std::string& why,
                                       const Status& s) {
  Emit("shard_map_installed", {{"version", version},
                               {"epoch", epoch},
                               {"reason", why},
                               {"ok", s.ok()},
                               {"error", s.ok() ? std::string() : s.ToString()}});
}

void CoordinatorImpl::PushMap(const std::string& why) {
  if (!Persist()) return;
  Message install;
  install.header.set_type(wire::INSTALL_MAP);
  *install.header.mutable_shard_map() = map_;
  const uint64_t epoch = map_.epoch();
  const uint64_t version = map_.version();
  Broadcast(install, [this, why, epoch, version](const Status& s) {
    if (!s.ok()) LOG(WARNING) << "installing the map of epoch " << epoch << " (" << why << "): " << s;
    EmitMapInstalled(version, epoch, why, s);
  }, 2000);
}

}  // namespace coordinator_internal
}  // namespace relaxps
