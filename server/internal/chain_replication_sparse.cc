// Chain replication of sparse tables (the write rule kForwardAlongChain): the
// server side.
//
// Rows hash into a fixed number of buckets (ShardMap::SparseBucket); each
// bucket is replicated like a dense range, by its own chain, with its own
// sequence numbers, exactly-once record and state transfer. A worker sends
// the rows of one bucket in one request, naming the bucket in key_begin, to
// the bucket's head; the head applies the update, numbers it and forwards
// the same ids and gradients; the push is answered once every live replica
// applied it. Pulls are answered by the head once everything they reflect is
// acknowledged, as for dense ranges (docs/chain_replication.md).
#include <algorithm>
#include <map>

#include "common/payload_codec.h"
#include "common/shard_map.h"
#include "kernels/staged_optimizer.h"
#include "server/internal/request_codec.h"
#include "server/internal/chain_replication.h"

namespace relaxps {
namespace server_internal {

Status ChainReplication::CreateBuckets(const TableOptions& t, const wire::TableShards& ts, int slots,
                                 bool known) {
  for (int b = 0; b < ts.buckets_size(); ++b) {
    const auto& chain = ts.buckets(b).chain();
    if (std::find(chain.begin(), chain.end(), id()) == chain.end()) continue;
    if (buckets_.count({t.name, static_cast<uint64_t>(b)})) continue;
    SparseTableSpec spec;
    spec.table = BucketStoreTable(t.name, b);
    spec.width = t.row_width;
    spec.num_slots = slots;
    spec.init = t.init;
    RETURN_IF_ERROR(host_->store()->CreateSparse(spec));
    ASSIGN_OR_RETURN(std::unique_ptr<kernels::Optimizer> optimizer,
                     kernels::NewOptimizer(t.optimizer));
    if (host_->update_device() != nullptr) {
      optimizer = kernels::NewStagedOptimizer(std::move(optimizer), host_->update_device());
    }
    // Buckets apply every push on arrival (no BSP/SSP gate under chain).
    auto shard = std::make_unique<SparseShardState>(spec, std::move(optimizer), /*policy=*/nullptr,
                                                    host_->device(), host_->store(), host_->buffer_pool());
    shard->set_rates(t);
    RangeState range;
    range.bucket = std::make_unique<SparseBucketState>(std::move(shard), host_->store(), spec.table,
                                                       b, ts.buckets_size());
    range.table = t.name;
    range.key = static_cast<uint64_t>(b);
    range.chain = std::make_unique<ChainReplica>();
    // A table that existed before this server registered, or before this map
    // (hybrid: joining a chain once it was seeded), is held by the other
    // replicas: its state comes as a snapshot from the predecessor.
    range.chain->set_has_state(host_->registered() && !known);
    const bool has_state = range.chain->has_state();
    buckets_.emplace(std::make_pair(t.name, static_cast<uint64_t>(b)), std::move(range));
    LOG(INFO) << "table '" << t.name << "': sparse bucket " << b << " of " << ts.buckets_size()
              << ", rows of width " << t.row_width << " (chain replica"
              << (has_state ? ")" : ", awaiting state)");
  }
  return Status::OK();
}

Status ChainReplication::SeedBuckets(const wire::SeedRows& r, const Frame* ids_frame,
                               const Frame* deltas_frame, bool apply) {
  std::map<int, SparseBucketState*> held;
  for (int b : r.buckets()) {
    auto it = buckets_.find({r.table(), static_cast<uint64_t>(b)});
    if (it == buckets_.end()) {
      return InvalidArgumentError("seed names bucket " + std::to_string(b) + " of '" + r.table() +
                                  "', which server " + std::to_string(id()) + " does not hold");
    }
    held[b] = it->second.bucket.get();
  }
  if (r.count() > 0) {
    if (held.empty() || ids_frame == nullptr || deltas_frame == nullptr) {
      return InvalidArgumentError("seed rows of '" + r.table() + "' name no bucket");
    }
    const size_t width = held.begin()->second->shard()->width();
    const int num_buckets = held.begin()->second->num_buckets();
    StatusOr<const uint64_t*> ids = DecodeRowIds(*ids_frame, r.count(), &ids_scratch_);
    RETURN_IF_ERROR(ids.status());
    std::vector<float> scratch;
    ASSIGN_OR_RETURN(const float* deltas,
                     DecodeFloats(*deltas_frame, r.count() * width, wire::ENC_FP32, &scratch));
    // Group by bucket: every row must lie in a bucket the seed names.
    std::map<int, std::pair<std::vector<uint64_t>, std::vector<float>>> parts;
    for (size_t i = 0; i < r.count(); ++i) {
      const int b = SparseOwner((*ids)[i], num_buckets);
      if (!held.count(b)) {
        return InvalidArgumentError("seed row " + std::to_string((*ids)[i]) + " of '" + r.table() +
                                    "' lies in bucket " + std::to_string(b) +
                                    ", which the seed does not name");
      }
      auto& part = parts[b];
      part.first.push_back((*ids)[i]);
      part.second.insert(part.second.end(), deltas + i * width, deltas + (i + 1) * width);
    }
    for (auto& [b, part] : parts) {
      if (apply) RETURN_IF_ERROR(held[b]->AddDelta(part.first.data(), part.first.size(),
                                                   part.second.data()));
    }
  }
  if (!apply) return Status::OK();
  for (int b : r.buckets()) buckets_.at({r.table(), static_cast<uint64_t>(b)}).chain->set_has_state(true);
  LOG(INFO) << "seeded " << r.buckets_size() << " bucket(s) of '" << r.table() << "' with "
            << r.count() << " row(s) of the workers' merged changes on top of "
            << (options_.restored_from.empty() ? "the initializer's values"
                                               : "the restored checkpoint " + options_.restored_from);
  return Status::OK();
}

void ChainReplication::HandleSparse(Request&& req) {
  const wire::Header& h = req.msg.header;
  auto it = buckets_.find({h.table(), h.key_begin()});
  if (it == buckets_.end()) {
    const wire::TableShards* ts = nullptr;
    for (const wire::TableShards& t : host_->map().tables()) {
      if (t.table().name() == h.table()) ts = &t;
    }
    host_->Reject(req, ts == nullptr ? NotFoundError("unknown sparse table '" + h.table() + "'")
                : ts->table().type() != static_cast<int>(TableType::kSparse)
                    ? InvalidArgumentError("table '" + h.table() + "' is dense")
                    : WrongShardError("bucket " + std::to_string(h.key_begin()) + " of table '" +
                                      h.table() + "' is not held by server " +
                                      std::to_string(id())));
    return;
  }
  RangeState* range = &it->second;
  SparseBucketState* bucket = range->bucket.get();
  ChainReplica* chain = range->chain.get();
  const bool push = h.type() == wire::PUSH_ROWS;
  // Inspection (a state slot, or a read by no worker): this replica's copy.
  const bool inspect = !push && (h.slot() != 0 || h.sender() < 0);
  if (h.epoch() > epoch()) {
    host_->Reject(req, UnavailableError("server " + std::to_string(id()) + " is at epoch " +
                                 std::to_string(epoch()) + ", the request at " +
                                 std::to_string(h.epoch())));
    return;
  }
  if (!inspect && !chain->head()) {
    host_->Reject(req, WrongShardError("bucket " + std::to_string(h.key_begin()) + " of table '" +
                                h.table() + "': server " + std::to_string(id()) +
                                " is not the head of its chain"));
    return;
  }
  if (!chain->has_state()) {
    host_->Reject(req, UnavailableError("server " + std::to_string(id()) + " is awaiting state"));
    return;
  }
  SparseShardState* shard = bucket->shard();
  if (h.slot() != 0 && (push || h.slot() < 0 || h.slot() >= shard->num_slots())) {
    host_->Reject(req, InvalidArgumentError("slot " + std::to_string(h.slot()) + " of table '" +
                                     h.table() + "' cannot be read (PULL_ROWS only; the table has " +
                                     std::to_string(shard->num_slots()) + " slots)"));
    return;
  }
  if (!host_->CheckFrameCount(req, push ? 2 : 1)) return;
  StatusOr<const uint64_t*> ids = DecodeRowIds(req.msg.frames[0], h.key_count(), &ids_scratch_);
  if (!ids.ok()) {
    host_->Reject(req, ids.status());
    return;
  }
  const size_t n = h.key_count();
  for (size_t i = 0; i < n; ++i) {
    if (SparseOwner((*ids)[i], bucket->num_buckets()) != bucket->bucket()) {
      host_->Reject(req, InvalidArgumentError("row " + std::to_string((*ids)[i]) + " of table '" +
                                       h.table() + "' is not in bucket " +
                                       std::to_string(bucket->bucket())));
      return;
    }
  }
  auto shared = std::make_shared<Request>(std::move(req));  // `h` is gone from here on.
  const wire::Header& sh = shared->msg.header;
  if (!push) {
    StatusOr<FloatBuffer> rows = shard->Read(*ids, n, sh.slot());
    if (!rows.ok()) {
      host_->Reject(*shared, rows.status());
      return;
    }
    auto reply = std::make_shared<Message>(MakeReply(sh, Status::OK()));
    reply->header.set_encoding(sh.encoding());
    reply->frames.push_back(EncodeFloats(*rows, sh.encoding()));
    auto answer = [this, shared, reply] { host_->ReplyWith(*shared, std::move(*reply)); };
    if (inspect) {
      answer();
    } else {
      // Everything these rows reflect must survive a failover (beyond the
      // lag asynchronous replication allows).
      WhenAcknowledgeable(chain, chain->applied_seq(), answer);
    }
    return;
  }
  auto ack = [this, chain, shared](uint64_t seq) {
    return [this, chain, shared, seq] {
      host_->ReplyWith(*shared, PushReply(*chain, shared->msg.header, seq, false));
    };
  };
  const uint64_t done_at =
      sh.push_id() > 0 ? chain->FindApplied(sh.sender(), sh.incarnation(), sh.push_id()) : 0;
  if (done_at > 0) {
    // A resend (after a failover or a lost reply): applied once already.
    stats()->set_duplicates_skipped(stats()->duplicates_skipped() + 1);
    WhenAcknowledgeable(chain, done_at, ack(done_at));
    return;
  }
  const float* grads = host_->DecodeGradient(*shared, shared->msg.frames[1], n * shard->width(), true);
  if (grads == nullptr) return;
  const uint64_t seq = chain->NextSeq();
  // Hybrid: a worker hands back what it changed on its own rows while the
  // bucket was stranded as a raw delta, replicated like any push.
  Status s = sh.raw_delta() ? bucket->AddDelta(*ids, n, grads)
                            : bucket->Push(sh.sender(), sh.clock(), *ids, n, grads);
  if (!s.ok()) {
    // Keep the sequence gap-free with an update that changes nothing.
    Message filler;
    filler.header.set_type(wire::CHAIN_COMPLETE);
    filler.header.set_table(sh.table());
    filler.header.set_key_begin(range->key);
    Commit(range, seq, &filler);
    host_->Reject(*shared, s);
    return;
  }
  chain->RecordApplied(sh.sender(), sh.incarnation(), sh.push_id(), seq);
  Commit(range, seq, &shared->msg);
  WhenAcknowledgeable(chain, seq, ack(seq));
}

bool ChainReplication::ApplyForwardedSparse(RangeState* range, const Request& req) {
  const wire::Header& h = req.msg.header;
  SparseBucketState* bucket = range->bucket.get();
  switch (h.type()) {
    case wire::PUSH_ROWS: {
      if (req.msg.frames.size() != 2) {
        host_->Reject(req, InvalidArgumentError("forwarded PUSH_ROWS without ids and gradients"));
        return false;
      }
      StatusOr<const uint64_t*> ids =
          DecodeRowIds(req.msg.frames[0], h.key_count(), &ids_scratch_);
      if (!ids.ok()) {
        host_->Reject(req, ids.status());
        return false;
      }
      const float* grads =
          host_->DecodeGradient(req, req.msg.frames[1], h.key_count() * bucket->shard()->width(),
                         /*check_finite=*/false);
      if (grads == nullptr) return false;
      Status s = h.raw_delta() ? bucket->AddDelta(*ids, h.key_count(), grads)
                               : bucket->Push(h.sender(), h.clock(), *ids, h.key_count(), grads);
      if (!s.ok()) {
        LOG(ERROR) << "replica could not apply forwarded update " << h.chain_seq() << ": " << s;
      }
      return true;
    }
    case wire::CHAIN_COMPLETE:  // A filler keeping the sequence gap-free.
      return true;
    default:
      host_->Reject(req, InvalidArgumentError("cannot replicate " + wire::MsgType_Name(h.type()) +
                                       " in a sparse bucket"));
      return false;
  }
}

}  // namespace server_internal
}  // namespace relaxps
