// DataPath: the client's request assembly. It turns one dense request
// (Push, Pull, PushPull, their *ZeroCopy forms) or one row request
// (PushRows, PullRows) into request parts by the shard map, hands each part
// to PartSender (part_sender.h), and completes the caller's request once,
// from its parts' outcomes (Join). It owns:
//  - the split: dense requests by owner (ShardMap::SplitDense), the slices
//    of one server's adjacent ranges merged into one part unless under
//    chain routing (CoalesceByServer: one request per server), large parts
//    split into aligned parts (dense_parts.h); rows grouped by owner, or by bucket
//    under chain routing, large row pulls split (GroupRows);
//  - the reassembly: pulled slices and rows copied into the caller's buffers
//    in the caller's order, a *ZeroCopy reply handed over in place when it
//    can be, the minimum clock of the parts published (Host::SetParamsClock)
//    and fed to the SSP cache;
//  - what a failed part does: a "moved" reply re-routes it
//    (PartSender::Rerouted), a lost server is the recovery role's decision
//    (OnPartLost: fail it, send it to the replacement, serve it from this
//    worker's copies via LocalFallback); a failed part fails the request
//    with "server N (endpoint)" in front of its error;
//  - the exactly-once keys of push parts (ClientFeatures::exactly_once_keys;
//    a re-route keeps its part's key), the pool the handed-over parameter
//    buffers come from, the count of replies handed over in place.
//
// Invariants: a request's callback runs exactly once, after every part
// completed, with the first failed part's error (OK if none). A push
// split into several parts is checked finite whole before any part is sent
// (Host::CheckPushFinite). Positions of rows are the caller's: a part's
// rows are written back at the positions they were taken from.
//
// Thread-safety: every method is safe from any thread. A request's callback
// runs on the transport's I/O thread, or inline on the calling thread when
// the request fails or is answered before it is sent (a local error, a
// cache hit, a part served from a local copy). Everything borrowed outlives
// this and every request in flight.
#ifndef RELAXPS_CLIENT_INTERNAL_DATA_PATH_H_
#define RELAXPS_CLIENT_INTERNAL_DATA_PATH_H_

#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/internal/dense_parts.h"
#include "client/internal/local_fallback.h"
#include "client/internal/part_sender.h"
#include "client/internal/router.h"
#include "client/internal/ssp_cache.h"
#include "common/buffer_pool.h"
#include "common/shard_map.h"
#include "common/thread_annotations.h"
#include "recovery/client_recovery.h"

namespace relaxps {
namespace client_internal {

// Completes a multi-part request: runs `done` once, after the last part, with
// the first error.
class Join {
 public:
  Join(int parts, Client::Callback done) : remaining_(parts), done_(std::move(done)) {}
  void PartDone(const Status& s) {
    {
      MutexLock l(&mu_);
      if (!s.ok() && first_error_.ok()) first_error_ = s;
    }
    if (remaining_.fetch_sub(1) == 1) done_(FirstError());
  }

 private:
  Status FirstError() {
    MutexLock l(&mu_);
    return first_error_;
  }

  std::atomic<int> remaining_;
  Client::Callback done_;
  Mutex mu_;
  Status first_error_ GUARDED_BY(mu_);
};

class DataPath {
 public:
  struct Options {
    // Dense slices larger than this are split into parts of about
    // dense_part_bytes (ClientOptions; dense_part_bytes < 4: never).
    int64_t dense_split_bytes = 0;
    int64_t dense_part_bytes = 0;
    // Row pulls of more rows than pull_rows_split are split into parts of
    // about pull_rows_part rows (ClientOptions).
    int64_t pull_rows_split = 0;
    int64_t pull_rows_part = 0;
    recovery::ClientFeatures features;  // The role's.
    wire::Encoding encoding = wire::ENC_FP32;  // Of push payloads.
  };

  // What the data path needs of its client.
  class Host {
   public:
    virtual ~Host() = default;
    // Not OK once the job failed: requests fail with it.
    virtual Status JobError() const = 0;
    // A request made at `clock` with the map of `map_version`.
    virtual Message NewRequest(wire::MsgType type, const std::string& table, int64_t clock,
                               uint64_t map_version) const = 0;
    // InvalidArgument (counted as an error) unless every value is finite.
    virtual Status CheckPushFinite(const float* values, size_t n) = 0;
    // Counts a failed request (ClientStats::errors).
    virtual void CountError() = 0;
    // This worker's clock: the clock a new request is made at.
    virtual int64_t clock() const = 0;
    // Records the clock the parameters of a completed pull reflect.
    virtual void SetParamsClock(int64_t params_clock) = 0;
    // An acknowledged push part, for the role (only with
    // ClientFeatures::report_acked_pushes).
    virtual void PushAcked(recovery::AckedPush push) = 0;
  };

  // `cache` and `fallback` may be null (no SSP cache, no local copies);
  // everything borrowed outlives this.
  DataPath(Options options, Router* router, PartSender* parts, recovery::ClientRecovery* role,
           SspCache* cache, LocalFallback* fallback, Host* host)
      : options_(std::move(options)), features_(options_.features), router_(router),
        parts_(parts), role_(role), cache_(cache), fallback_(fallback), host_(host) {}
  DataPath(const DataPath&) = delete;
  DataPath& operator=(const DataPath&) = delete;

  // A dense request of `type` for keys [offset, offset + n) of `table`:
  // grads (PUSH, PUSH_PULL) and out (PULL, PUSH_PULL) hold n floats.
  // `hand_over` set (and `out` empty, `done` null): a *ZeroCopy request,
  // completed with the parameters.
  void Dense(wire::MsgType type, const std::string& table, uint64_t offset, size_t n,
             FloatBuffer grads, FloatBuffer out, Client::Callback done,
             Client::ParamsCallback hand_over = nullptr);
  // A row request (PUSH_ROWS with grads, PULL_ROWS into out) for `ids`.
  void Sparse(wire::MsgType type, const std::string& table, KeyBuffer ids, FloatBuffer grads,
              FloatBuffer out, Client::Callback done);

  // Pull replies handed over in place (ClientStats::replies_handed_over).
  uint64_t replies_handed_over() const { return replies_handed_over_.load(); }

 private:
  // The positions of a request's rows, by the request part they go in: one
  // part per owner (under chain replication per bucket), a large pull's
  // split into several (Options::pull_rows_part).
  struct RowsPart {
    int group = 0;  // Server, or bucket under chain replication.
    std::vector<uint32_t> positions;
  };
  std::vector<RowsPart> GroupRows(wire::MsgType type, const KeyBuffer& ids,
                                  const std::vector<uint32_t>& positions, const ShardMap& map,
                                  const wire::TableShards& shards, bool by_bucket) const;
  // A dense request being routed: what every part of it shares.
  struct DenseOp {
    wire::MsgType type;
    std::string table;
    FloatBuffer grads, out;  // Whole-request buffers (out empty for PUSH).
    size_t n = 0;            // Keys of the whole request.
    // A *ZeroCopy request: `out` stays empty while its single part may still
    // hand over its reply message; it is made (EnsureOut) as soon as the
    // parameters must be assembled (several parts, a local answer).
    bool hand_over = false;
    int64_t clock;
    std::atomic<int64_t> min_params_clock{INT64_MAX};
    std::atomic<bool> served_locally{false};  // Counted once in local_steps.
  };
  // Whether dense requests may be split into parts (Options). Under every
  // policy: with exactly-once keys each part has a key of its own (a resent
  // part is a duplicate where it was applied, a new part is new), and the
  // parts after the first carry push_continues, so the server counts the
  // request once (optimizer step, AppliedLedger part count), the update log
  // and a local copy likewise.
  bool SplitsParts() const {
    return options_.dense_part_bytes >= static_cast<int64_t>(sizeof(float));
  }
  // Splits every slice larger than options_.dense_split_bytes into aligned
  // parts of about options_.dense_part_bytes, sent in flight at once
  // (client/internal/dense_parts.h). (*continues)[i]: slice i is a later
  // part of a split one (wire::Header.push_continues).
  void SplitLargeParts(std::vector<DenseSlice>* slices, std::vector<bool>* continues) const;
  // Routes keys [begin, begin + count) of op (at `offset` within its
  // buffers) with `map` and completes `done` when every part has.
  // `push_id`: the exactly-once key of a re-routed part (0: new parts get
  // fresh ids). A re-routed part (reroutes > 0) is not split again (a
  // second split would give one key to several parts); `continues`: it is
  // a later part of a split push, and its first slice says so again
  // (push_continues) while a slice starting another range counts its step.
  void SendDense(const std::shared_ptr<DenseOp>& op, std::shared_ptr<const ShardMap> map,
                 uint64_t begin, uint64_t offset, uint64_t count, int reroutes,
                 Client::Callback done, uint64_t push_id = 0, bool continues = false);
  // Makes op->out of a *ZeroCopy request (a no-op otherwise). Only while no
  // other part of it is in flight: before its parts are sent, or from the
  // callback of its single part.
  void EnsureOut(DenseOp* op) {
    if (op->hand_over && op->out.empty()) op->out = NewParams(op->n);
  }
  // A buffer for parameters handed over to the caller: large ones come from
  // out_pool_, pre-faulted and reused once the caller drops them (a fresh
  // 16 MiB allocation per request cost thousands of page faults).
  FloatBuffer NewParams(size_t n) { return out_pool_.Acquire<float>(n); }
  // Routes the rows at `positions` of ids/grads/out with `map`: by owner,
  // or under chain replication by bucket (one part per bucket, to its head,
  // the bucket in key_begin). `push_id`: the exactly-once key of a re-routed
  // part (0: new parts get fresh ids).
  void SendRows(wire::MsgType type, const std::string& table, const KeyBuffer& ids,
                const FloatBuffer& grads, const FloatBuffer& out, size_t width, int64_t clock,
                const std::vector<uint32_t>& positions, std::shared_ptr<const ShardMap> map,
                int reroutes, Client::Callback done, uint64_t push_id,
                std::shared_ptr<std::atomic<bool>> served_locally = nullptr);
  // Whether `server`'s parts are served from this worker's copies.
  bool ServedHere(int server) const { return fallback_ != nullptr && fallback_->IsLocal(server); }
  // The server holding the dense range of `table` at `range_begin` (under
  // chain routing the head of its chain), and the same for a sparse bucket
  // (-1: none).
  int HolderOf(const std::string& table, uint64_t range_begin, int server) const;
  int RowsHolderOf(const std::string& table, uint64_t bucket, int server) const;
  // The ranges of map `m` that part `s` (routed by `m`) spans, one slice
  // each (offsets within the same request as s.offset); {s} for a part of
  // one range.
  static std::vector<DenseSlice> RangesOf(const ShardMap& m, const std::string& table,
                                          const DenseSlice& s);
  // Serves one dense part (routed by `m`) of the local `server` from the
  // copies of the ranges it spans (op's buffers at `at`) and lowers
  // op->min_params_clock to the copies' clock. False, serving nothing, when
  // `server` is not local any more (LocalFallback::ServingPart); else true,
  // with the outcome in *result. `doubtful_id`: see
  // LocalFallback::ServeDense. `continues`: a later part of a split push
  // (its first range's local step was counted by the push's first part).
  bool ServeLocally(int server, const std::shared_ptr<DenseOp>& op, const ShardMap& m,
                    const DenseSlice& s, uint64_t at, uint64_t doubtful_id, bool continues,
                    Status* result);
  static BufferPoolOptions ParamsPoolOptions() {
    BufferPoolOptions o;
    o.max_cached_bytes = size_t{256} << 20;  // A client's share; a server keeps 1 GiB.
    return o;
  }

  // Constant after construction.
  const Options options_;
  const recovery::ClientFeatures& features_;  // options_.features.
  Router* const router_;
  PartSender* const parts_;
  recovery::ClientRecovery* const role_;
  SspCache* const cache_;           // Null: no SSP cache.
  LocalFallback* const fallback_;   // Null: no local copies.
  Host* const host_;

  // Atomic.
  std::atomic<uint64_t> next_push_id_{1};
  std::atomic<uint64_t> replies_handed_over_{0};
  BufferPool out_pool_{ParamsPoolOptions()};  // Thread-safe.
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_DATA_PATH_H_
