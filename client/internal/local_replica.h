// LocalReplica: a stateless-recovery worker's own copy of the dense ranges it
// trains on, and what it changed while their server was lost.
//
// Under a policy whose workers keep local copies (--recovery=stateless,
// hybrid; recovery::ClientFeatures::local_copies) the
// client remembers the last parameters every dense range returned. When a
// range's server is lost (its request failed or timed out, or the shard map
// says it is dead) the server goes "local": pushes to its ranges are applied
// to the copy with the table's learning rate, with momentum for a momentum
// table (the velocity starts at zero when the server is lost) and plain SGD
// otherwise (docs/stateless.md says why), and pulls are answered from the
// copy, so training never waits.
// The change made since the last successful pull is accumulated per range;
// it goes to the coordinator with the copy when a new server is
// seeded (SEED_COPY), and whatever was changed after that copy is handed to
// the seeded server as a raw delta when the worker switches back to it.
//
// Thread-safety: all methods are safe to call from multiple threads.
#ifndef RELAXPS_CLIENT_INTERNAL_LOCAL_REPLICA_H_
#define RELAXPS_CLIENT_INTERNAL_LOCAL_REPLICA_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/buffer.h"
#include "common/initializer.h"
#include "common/shard_map.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/wire.h"

namespace relaxps {
namespace client_internal {

// A push that was sent to a server and then served locally because the
// server did not answer in time: the server may still apply it. On switching
// back to that same server it is resent with its exactly-once key instead of
// being part of the raw delta, so it counts once either way.
struct DoubtfulPush {
  std::string table;
  uint64_t begin = 0;  // First key of the part.
  uint64_t push_id = 0;
  FloatBuffer grads;
  // A later part of a split push: resent with push_continues (no step of
  // its own on the server).
  bool continues = false;
};

// How a push is applied to a local copy: w -= lr * v with v = momentum * v + g
// (momentum 0: plain SGD, no velocity kept).
struct LocalStep {
  float lr = 0.0f;
  float momentum = 0.0f;
};

// A dense range's accumulated change, handed back to its server.
struct RangeDelta {
  std::string table;
  uint64_t begin = 0;
  FloatBuffer delta;
  int64_t local_steps = 0;
};

class LocalReplica {
 public:
  LocalReplica() = default;
  LocalReplica(const LocalReplica&) = delete;
  LocalReplica& operator=(const LocalReplica&) = delete;

  // Parameters keys [begin, begin + n) of the range [range_begin, range_end)
  // of `table` (held by `server`) returned from a server, reflecting
  // `params_clock`. Ignored while the server is local. The copy is whole
  // (Serve trains on it) once the remembered keys cover the range: in one
  // call, or in the parts of a split pull.
  void Remember(int server, const std::string& table, uint64_t range_begin, uint64_t range_end,
                uint64_t begin, const float* values, size_t n, int64_t params_clock);

  // Marks `server` (last seen at `endpoint`) lost; from now on its ranges are
  // served locally. Returns false if it already was. `stalled`: lost by a
  // timeout (it may still be alive) rather than a closed connection or the
  // coordinator's word.
  // `clock`: this worker's clock at that moment (the base of its row changes).
  bool GoLocal(int server, const std::string& endpoint, bool stalled, int64_t clock = 0);
  // The clock at which `server` went local (0 if it is not local).
  int64_t LocalSince(int server) const;
  bool IsLocal(int server) const;
  // Hybrid: the range at (table, range_begin) is now held by `server` (its
  // chain's last replica). Its copy and base stay; if `server` is already
  // local the range's change starts from zero. No-op for an unknown range.
  void Reassign(const std::string& table, uint64_t range_begin, int server);
  // Range moves (docs/elastic.md "Stateless"): the copies follow `map`. A
  // copy of a range held by a server that is not local is cut where `map`
  // cuts its keys, each piece keyed by its own range and naming its holder
  // in `map`, with the copy's clock (a move copies the state as it is: the
  // values the copy reflects are the same wherever they live). A copy of a
  // local server's range keeps its server (its change since going local
  // belongs to that server's re-seed). Returns how many copies changed.
  int FollowMoves(const ShardMap& map);
  // Hybrid spare takeover: `spare` took over what the local server `holder`
  // held alone. `spare` becomes local in its place (same base clock, no
  // endpoint: it is used again once the map shows it alive) and keeps every
  // copy and change of `holder`'s ranges. False if `holder` is not local.
  bool TakeOver(int holder, int spare);
  // A worker that never pulled the whole range [range_begin, range_end) of
  // `table` held by the local `server` trains on the table's initializer
  // values `init` (keys [range_begin, range_end)) from now on: a
  // change-only copy (SeedRange.change_only) whose base clock is the clock
  // at which `server` went local. No-op if it holds a whole copy.
  void StartFromInitializer(int server, const std::string& table, uint64_t range_begin,
                            uint64_t range_end, const Initializer& init);
  // The endpoint `server` was lost at and whether by a stall; false if not local.
  bool LostAt(int server, std::string* endpoint, bool* stalled) const;

  // Serves a part of a request locally: with `grads` (push) applies one
  // `step` to keys [begin, begin + n) of the range; with `out` copies the
  // range's keys there. Returns the clock of the last pull.
  // Unavailable if this worker never pulled the whole range (nothing to
  // train on). `doubtful_id` != 0: the push was sent to the server, which
  // may apply it too (see DoubtfulPush); `doubtful_grads` are its gradients.
  // `continues`: a later part of a split push whose first part counted the
  // range's local step (the push is one step however many parts it has).
  // A doubtful push's change is kept apart (it may be resent instead), but
  // its gradient enters the velocity like any other: a server that applied
  // it keeps that gradient in its own velocity too, so under momentum the
  // raw delta handed back to the same server is not exact (SGD's is).
  StatusOr<int64_t> Serve(int server, const std::string& table, uint64_t range_begin,
                          const LocalStep& step, uint64_t begin, const float* grads,
                          float* out, size_t n, uint64_t doubtful_id = 0,
                          const FloatBuffer& doubtful_grads = FloatBuffer(),
                          bool continues = false);
  // Counts one request served locally (ClientStats::local_steps).
  void CountLocalStep();

  // The SEED_COPY body and frames for `server`'s ranges: per range the copy,
  // the change since the last pull and, when it kept one, its velocity
  // (SeedRange.slots = 1); the change restarts from zero (what follows goes
  // to the seeded server as a raw delta).
  void FillSeedCopy(int server, wire::SeedData* data, std::vector<Frame>* frames);

  // Ends local mode for `server` and returns the changes made since the last
  // SEED_COPY (or since going local) with at least one local step. With
  // `same_server` (it was slow, not lost: it kept its state) the doubtful
  // pushes are left out of the changes and moved to *resend; otherwise (a
  // new, seeded server never saw them) they are part of the changes.
  std::vector<RangeDelta> Rejoin(int server, bool same_server,
                                 std::vector<DoubtfulPush>* resend);

  // Pushes served locally, ever.
  uint64_t local_steps() const;

 private:
  struct Range {
    int server = -1;
    uint64_t begin = 0, end = 0;
    bool have = false;  // The whole range was pulled at least once (or from_init).
    // Until `have`: the keys remembered so far (offset -> end offset,
    // merged), so the parts of a split pull make a whole copy together.
    std::map<uint64_t, uint64_t> covered;
    bool from_init = false;  // Started from the initializer (StartFromInitializer).
    int64_t base_clock = -1;
    std::vector<float> params;
    std::vector<float> delta;    // Local changes, doubtful pushes excepted.
    std::vector<float> doubtful_delta;  // The doubtful pushes' local changes.
    std::vector<float> velocity;  // Local momentum since going local; empty: none.
    std::vector<DoubtfulPush> doubtful;
    int64_t local_steps = 0;     // Since the last pull.
    int64_t unsent_steps = 0;    // Since the last SEED_COPY.
  };
  struct Lost {
    std::string endpoint;
    bool stalled = false;
    int64_t clock = 0;
  };
  using Key = std::pair<std::string, uint64_t>;  // (table, range begin)

  // The range's whole local change: delta plus the doubtful pushes'.
  static std::vector<float> AllChanges(const Range& r);

  mutable Mutex mu_;
  std::map<Key, Range> ranges_ GUARDED_BY(mu_);
  std::map<int, Lost> lost_ GUARDED_BY(mu_);  // Local servers.
  uint64_t local_steps_ GUARDED_BY(mu_) = 0;
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_LOCAL_REPLICA_H_
