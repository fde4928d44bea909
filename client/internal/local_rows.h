// LocalRows: a stateless-recovery worker's copies of the sparse rows it
// pulled, and the row changes it made while their server was lost.
//
// No worker holds a whole sparse table, so unlike dense ranges (LocalReplica)
// a lost server's rows cannot be seeded from the workers' copies. While the
// server is local, PullRows is answered from the rows this worker pulled
// before, or from the table's initializer for a row it never saw, and
// PushRows applies plain SGD at the table's learning rate to those rows and
// accumulates the change per row. The re-seeded server starts from its own
// rows (its latest checkpoint, or the initializer) and the coordinator merges
// every worker's pending changes on top (SEED_COPY / SEED rows); changes made
// after the copy go to the seeded server as a raw row delta.
//
// Memory: every row this worker pulled stays cached (one row of floats per
// distinct id).
//
// Thread-safety: all methods are safe to call from multiple threads.
#ifndef RELAXPS_CLIENT_INTERNAL_LOCAL_ROWS_H_
#define RELAXPS_CLIENT_INTERNAL_LOCAL_ROWS_H_

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/buffer.h"
#include "common/initializer.h"
#include "common/thread_annotations.h"
#include "common/wire.h"

namespace relaxps {
namespace client_internal {

// A row push that was sent to a server and then served locally because the
// server did not answer in time (see DoubtfulPush in local_replica.h).
struct DoubtfulRowPush {
  std::string table;
  KeyBuffer ids;
  FloatBuffer grads;
  uint64_t push_id = 0;
};

// Pending changes to rows of one table, handed back to their server.
struct RowsDelta {
  std::string table;
  KeyBuffer ids;
  FloatBuffer delta;  // ids.size() * width floats.
  int64_t local_steps = 0;
  uint64_t bucket = 0;  // Chain replication: the bucket of every id (ClientImpl::SplitByBucket).
};

class LocalRows {
 public:
  LocalRows() = default;
  LocalRows(const LocalRows&) = delete;
  LocalRows& operator=(const LocalRows&) = delete;

  // n rows of `width` floats of `table` returned by a server.
  void Remember(const std::string& table, size_t width, const uint64_t* ids,
                const float* values, size_t n);

  // Serves the rows `ids` of `table` held by the lost `server` locally: with
  // `grads` (non-empty) applies one SGD step at `lr` to each, else copies
  // them to `out`. A row
  // never pulled starts from `init`. `doubtful_id` != 0: the push was sent
  // under that key and the server may still apply it (kept apart, see Take).
  void Serve(int server, const std::string& table, const Initializer& init, size_t width,
             float lr, const KeyBuffer& ids, const FloatBuffer& grads, float* out,
             uint64_t doubtful_id = 0);

  // Appends the pending changes to `server`'s rows to a SEED_COPY (SeedRows
  // and two frames per table) and forgets them. `base_clock`: the clock at
  // which the server went local.
  void FillSeedCopy(int server, int64_t base_clock, wire::SeedData* data,
                    std::vector<Frame>* frames);

  // Hybrid spare takeover: the pending changes to `holder`'s rows (and its
  // doubtful pushes and step count) become `spare`'s.
  void TakeOver(int holder, int spare);

  // Takes the pending changes to `server`'s rows (after a rejoin). With
  // `same_server` (it was slow, not lost) the doubtful pushes are left out of
  // the changes and moved to *resend; otherwise they are part of them.
  std::vector<RowsDelta> Take(int server, bool same_server, std::vector<DoubtfulRowPush>* resend);

 private:
  struct Row {
    std::vector<float> value;
    std::vector<float> delta;  // Empty when nothing is pending.
    std::vector<float> doubtful_delta;  // Doubtful pushes' part (empty if none).
    int server = -1;           // Of the pending change.
  };
  struct Table {
    size_t width = 0;
    std::unordered_map<uint64_t, Row> rows;
    std::map<int, int64_t> local_steps;  // Per server, since the last copy.
    std::map<int, std::vector<DoubtfulRowPush>> doubtful;  // Per server.
  };

  // The pending rows of `server` in `t`, as ids and changes (with the
  // doubtful pushes' unless `without_doubtful`); clears them.
  static void TakePending(int server, bool without_doubtful, Table* t, KeyBuffer* ids,
                          FloatBuffer* delta);

  Mutex mu_;
  std::map<std::string, Table> tables_ GUARDED_BY(mu_);
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_LOCAL_ROWS_H_
