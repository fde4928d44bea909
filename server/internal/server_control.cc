// ServerImpl: control messages from the coordinator and operators
// (server_impl.h): SERVER_STATS, SEED (workers re-seeding a server) and
// CHECKPOINT, and the applied record saved with the state (applied_ledger.h).
// Loop thread.

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "common/optimizer_rules.h"
#include "common/payload_codec.h"
#include "server/internal/request_codec.h"
#include "server/internal/server_checkpoints.h"
#include "server/internal/server_impl.h"

namespace relaxps {
namespace server_internal {

uint64_t ServerImpl::UpdatesApplied() {
  uint64_t applied = dropped_updates_applied_;
  ForEachUnit([&applied](RangeState* unit) {
    applied += unit->shard != nullptr ? unit->shard->updates_applied()
                                      : unit->bucket->shard()->updates_applied();
  });
  for (auto& [n, s] : sparse_) applied += s->updates_applied();
  return applied;
}

void ServerImpl::HandleStats(const Request& req) {
  Message reply = MakeReply(req.msg.header, Status::OK());
  stats_.set_updates_applied(UpdatesApplied());
  *reply.header.mutable_server_stats() = stats_;
  durability_.FillStats(reply.header.mutable_server_stats());
  FillAppliedParts(reply.header.mutable_server_stats());
  ReplyWith(req, std::move(reply));
}

void ServerImpl::HandleSeed(const Request& req) {
  const wire::Header& h = req.msg.header;
  if (!h.has_seed_data()) {
    Reject(req, InvalidArgumentError("SEED without seed_data"));
    return;
  }
  const wire::SeedData& seed = h.seed_data();
  size_t frames = 0;
  for (const wire::SeedRange& r : seed.ranges()) frames += r.has_copy() ? 1 + r.slots() : 0;
  const size_t row_frames = frames;  // Sparse rows' frames follow the ranges'.
  for (const wire::SeedRows& r : seed.rows()) frames += r.count() > 0 ? 2 : 0;
  if (!CheckFrameCount(req, frames)) return;
  // Rows: the merged changes of the workers, on top of this server's rows.
  std::vector<std::pair<SparseShardState*, const wire::SeedRows*>> rows;
  for (size_t k = 0, f = row_frames; k < static_cast<size_t>(seed.rows_size()); ++k) {
    const wire::SeedRows& r = seed.rows(k);
    if (ChainReplicates()) {  // Hybrid: rows of stranded buckets.
      const bool frames_here = r.count() > 0;
      Status s = chain_->SeedBuckets(r, frames_here ? &req.msg.frames[f] : nullptr,
                             frames_here ? &req.msg.frames[f + 1] : nullptr, /*apply=*/false);
      if (!s.ok()) {
        Reject(req, s);
        return;
      }
      f += frames_here ? 2 : 0;
      continue;
    }
    if (r.count() == 0) continue;
    auto it = sparse_.find(r.table());
    if (it == sparse_.end() || req.msg.frames[f].size() != r.count() * sizeof(uint64_t) ||
        req.msg.frames[f + 1].size() != r.count() * it->second->width() * sizeof(float)) {
      Reject(req, InvalidArgumentError("seed rows of '" + r.table() + "' match no sparse table "
                                       "here or have frames of the wrong size"));
      return;
    }
    rows.emplace_back(it->second.get(), &r);
    f += 2;
  }
  // Check every range before changing anything.
  struct SeedFrames {
    DenseShardState* shard;
    const Frame* params;
    const Frame* velocity;  // Or null: the optimizer slots are reset.
  };
  std::vector<SeedFrames> todo;
  size_t f = 0;
  for (const wire::SeedRange& r : seed.ranges()) {
    auto it = dense_.find({r.table(), r.begin()});
    if (it == dense_.end() || it->second.shard->spec().end != r.end()) {
      Reject(req, InvalidArgumentError("seed for '" + r.table() + "' [" +
                                       std::to_string(r.begin()) + ", " +
                                       std::to_string(r.end()) + ") matches no shard here"));
      return;
    }
    if (!r.has_copy()) continue;  // No worker held it: keep the initializer's values.
    const size_t bytes = (r.end() - r.begin()) * sizeof(float);
    const OptimizerRule* rule = FindOptimizerRule(it->second.shard->optimizer_name());
    const bool velocity = rule != nullptr && rule->velocity_slot;
    if (r.slots() > 1 || (r.slots() == 1 && (r.change_only() || !velocity))) {
      Reject(req, InvalidArgumentError("seed for '" + r.table() + "' carries " +
                                       std::to_string(r.slots()) + " optimizer slot(s); only a "
                                       "momentum table's velocity can be seeded"));
      return;
    }
    for (uint32_t k = 0; k <= r.slots(); ++k) {
      const Frame& frame = req.msg.frames[f + k];
      if (frame.size() != bytes) {
        Reject(req, InvalidArgumentError("seed frame of " + std::to_string(frame.size()) +
                                         " bytes for " + std::to_string(r.end() - r.begin()) +
                                         " floats"));
        return;
      }
    }
    todo.push_back(SeedFrames{it->second.shard.get(), &req.msg.frames[f],
                              r.slots() == 1 ? &req.msg.frames[f + 1] : nullptr});
    f += 1 + r.slots();
  }
  size_t i = 0;
  std::vector<float> scratch, velocity_scratch;  // For frames not float-aligned.
  for (const wire::SeedRange& r : seed.ranges()) {
    // Hybrid: the seeded range heads its chain from here on (a range no
    // worker held keeps what the store loaded: a restored checkpoint, the
    // last flush, or the initializer).
    RangeState& state = dense_.at({r.table(), r.begin()});
    if (state.chain != nullptr) state.chain->set_has_state(true);
    if (!r.has_copy()) {
      LOG(INFO) << "'" << r.table() << "' [" << r.begin() << ", " << r.end()
                << "): no worker copy; keeping the values loaded at start"
                << (options_.restore_from.empty() ? "" : " (restored checkpoint)");
      continue;
    }
    const SeedFrames& todo_i = todo[i++];
    DenseShardState* shard = todo_i.shard;
    const size_t n = r.end() - r.begin();
    StatusOr<const float*> values = DecodeFloats(*todo_i.params, n, wire::ENC_FP32, &scratch);
    StatusOr<const float*> velocity = static_cast<const float*>(nullptr);
    if (todo_i.velocity != nullptr) {
      velocity = DecodeFloats(*todo_i.velocity, n, wire::ENC_FP32, &velocity_scratch);
    }
    // Hybrid: no worker held a real copy, only changes made on the
    // initializer's values; they go on top of what this server loaded.
    Status s = !values.ok()      ? values.status()
               : !velocity.ok()  ? velocity.status()
               : r.change_only() ? shard->AddDelta(r.begin(), *values, n)
                                 : shard->Seed(*values, n, r.clock(), *velocity);
    if (!s.ok()) {
      Reject(req, s);
      return;
    }
    LOG(INFO) << "seeded '" << r.table() << "' [" << r.begin() << ", " << r.end() << ") "
              << (r.change_only() ? "with the workers' merged changes on top of the values "
                                    "loaded at start"
                                  : "at clock " + std::to_string(r.clock()) +
                                        (r.slots() == 1 ? " with the workers' velocity"
                                                        : " (optimizer slots reset)"));
  }
  for (size_t k = 0, f = row_frames; ChainReplicates() && k < static_cast<size_t>(seed.rows_size()); ++k) {
    const wire::SeedRows& r = seed.rows(k);
    const bool frames_here = r.count() > 0;
    Status s = chain_->SeedBuckets(r, frames_here ? &req.msg.frames[f] : nullptr,
                           frames_here ? &req.msg.frames[f + 1] : nullptr, /*apply=*/true);
    if (!s.ok()) {
      Reject(req, s);
      return;
    }
    f += frames_here ? 2 : 0;
  }
  for (size_t k = 0, f = row_frames; k < rows.size(); ++k, f += 2) {
    auto [shard, r] = rows[k];
    StatusOr<const uint64_t*> ids =
        server_internal::DecodeRowIds(req.msg.frames[f], r->count(), &ids_scratch_);
    StatusOr<const float*> delta = DecodeFloats(req.msg.frames[f + 1], r->count() * shard->width(),
                                                wire::ENC_FP32, &scratch);
    Status s = !ids.ok() ? ids.status() : !delta.ok() ? delta.status()
                                                      : shard->AddDelta(*ids, r->count(), *delta);
    if (!s.ok()) {
      Reject(req, s);
      return;
    }
    LOG(INFO) << "seeded " << r->count() << " row(s) of '" << r->table()
              << "' with the workers' merged changes on top of "
              << (options_.restore_from.empty() ? "the rows it holds (the initializer's)"
                                                : "the restored checkpoint");
  }
  awaiting_seed_ = false;
  ReplyWith(req, MakeReply(h, Status::OK()));
}

void ServerImpl::FillAppliedParts(wire::ServerStats* stats) {
  std::map<std::pair<int, uint64_t>, uint64_t> counts;
  // A unit counts where it is served: held alone, or at the head of its
  // chain (the replicas after it hold a prefix of the head's updates), so
  // the servers' counts add up to the job's.
  ForEachUnit([&](RangeState* range) {
    if (range->chain != nullptr && (!range->chain->head() || !range->chain->has_state())) return;
    range->ledger()->AddCounts(&counts);
  });
  applied_.AddSparseCounts(&counts);
  for (const auto& [key, parts] : counts) {
    wire::AppliedParts* a = stats->add_applied_parts();
    a->set_worker(key.first);
    a->set_incarnation(key.second);
    a->set_parts(parts);
  }
}

void ServerImpl::SaveApplied(uint64_t checkpoint_seq) {
  std::vector<AppliedRecords::Unit> units;
  ForEachUnit([&units](RangeState* range) {
    // A replica awaiting its state transfer reflects nothing yet.
    if (range->chain != nullptr && !range->chain->has_state()) return;
    units.push_back({range->table, range->key, range->bucket != nullptr, range->ledger()});
  });
  Status s = applied_.Save(checkpoint_seq, units);
  if (!s.ok()) LOG(ERROR) << "saving the applied record: " << s;
}

Status ServerImpl::RestoreApplied() {
  AppliedRecords::Targets targets;
  targets.is_sparse = [this](const std::string& table) { return sparse_.count(table) > 0; };
  targets.find_bucket = [this](const std::string& table, uint64_t key) -> AppliedLedger* {
    RangeState* b = chain_ != nullptr ? chain_->FindBucket(table, key) : nullptr;
    return b != nullptr ? b->ledger() : nullptr;
  };
  targets.find_dense = [this](const std::string& table, uint64_t begin, uint64_t end) {
    std::vector<AppliedLedger*> ledgers;
    for (auto it = dense_.lower_bound({table, 0}); it != dense_.end() && it->first.first == table;
         ++it) {
      const DenseShardSpec& spec = it->second.shard->spec();
      if (spec.begin < end && begin < spec.end) ledgers.push_back(it->second.ledger());
    }
    return ledgers;
  };
  ASSIGN_OR_RETURN(const size_t restored, applied_.Restore(targets));
  if (restored > 0) {
    LOG(INFO) << "server " << id_ << ": the applied record of " << restored
              << " range(s) restored with the state"
              << (options_.restore_from.empty() ? "" : " (restored checkpoint)");
  }
  return Status::OK();
}

void ServerImpl::HandleCheckpoint(Request&& req) {
  const wire::Header& h = req.msg.header;
  if (!h.has_checkpoint_request()) {
    Reject(req, InvalidArgumentError("CHECKPOINT without checkpoint_request"));
    return;
  }
  const int64_t clock = h.checkpoint_request().clock();
  if (clock < 0) {
    Reject(req, InvalidArgumentError("CHECKPOINT at negative clock " + std::to_string(clock)));
    return;
  }
  // The checkpoint's flush covers what has been applied so far, and the
  // applied record what that state reflects.
  const uint64_t seq = h.checkpoint_request().seq();
  SaveApplied(seq);
  // The checkpoint's state is captured now (the store copies what a later
  // update changes): a push acknowledged from here on may be missing from
  // it, and is in every later one.
  applied_.Captured(seq);
  int64_t flushed_clock = last_flush_clock_;
  for (auto& [key, range] : dense_) {
    flushed_clock = std::max(flushed_clock, range.shard->visible_clock());
  }
  // Synchronous checkpointing: writes wait from here until the snapshot is
  // durable (ReleaseHeldWrites).
  if (holds_writes_during_checkpoint_) checkpoint_hold_.Begin();
  // Written in the background; the reply waits for it on this loop.
  auto shared_req = std::make_shared<Request>(std::move(req));
  server_internal::WriteCheckpointAsync(
      store_.get(), options_.store.file_system.get(), checkpoint_root_, clock,
      options_.keep_checkpoints, id_,
      [this, shared_req, clock, seq, flushed_clock](StatusOr<wire::ShardCheckpoint> done) {
        rpc_->Post([this, shared_req, clock, seq, flushed_clock, done = std::move(done)] {
          const wire::Header& h = shared_req->msg.header;
          if (!done.ok()) {
            EmitEvent(options_.events.get(), "checkpoint_write_failed",
                      {{"server", id_},
                       {"seq", seq},
                       {"clock", clock},
                       {"reason", done.status().ToString()}});
            Reject(*shared_req, done.status());
            ReleaseHeldWrites(seq, clock);
            // After the reply: under --on_disk_error=stop this stops the loop.
            OnDurableWrite(DurableWrite::kCheckpoint,
                           done.status().WithPrefix("checkpoint at clock " + std::to_string(clock)));
            return;
          }
          OnDurableWrite(DurableWrite::kCheckpoint, Status::OK());
          EmitEvent(options_.events.get(), "checkpoint_written",
                    {{"server", id_},
                     {"seq", seq},
                     {"clock", clock},
                     {"bytes", done->bytes()},
                     {"seconds", done->seconds()},
                     {"dir", done->dir()}});
          last_flush_clock_ = std::max(last_flush_clock_, flushed_clock);
          Message reply = MakeReply(h, Status::OK());
          *reply.header.mutable_shard_checkpoint() = *done;
          reply.header.mutable_shard_checkpoint()->set_seq(seq);
          ReplyWith(*shared_req, std::move(reply));
          ReleaseHeldWrites(seq, clock);
        });
      });
}

void ServerImpl::ReleaseHeldWrites(uint64_t seq, int64_t clock) {
  if (!holds_writes_during_checkpoint_) return;
  // Once the coordinator has this server's answer (sent first) for every
  // checkpoint in progress.
  server_internal::CheckpointHold::Released released = checkpoint_hold_.End(clock_->NowMs());
  if (released.requests.empty()) return;
  EmitEvent(options_.events.get(), "checkpoint_writes_held",
            {{"server", id_},
             {"seq", seq},
             {"clock", clock},
             {"requests", static_cast<uint64_t>(released.requests.size())},
             {"ms", released.waited_ms}});
  for (Request& r : released.requests) HandleData(std::move(r));
}

}  // namespace server_internal
}  // namespace relaxps
