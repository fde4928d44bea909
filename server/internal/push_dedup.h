// PushDedup: the exactly-once record of an unreplicated server's dense
// pushes (--recovery=stateless).
//
// A stateless worker that gave up on a push after local_after_ms applies it
// to its own copy; if the server was only slow, it applies the push too. When
// the worker switches back it resends the push with the same key (worker,
// incarnation, push id) instead of handing its effect back as a raw delta:
// the server applies it only if it never did. (Chain replication keeps the
// same record per range, replicated: server/internal/chain_replica.h.)
//
// Thread-safety: not synchronized; the server's loop thread only.
#ifndef RELAXPS_SERVER_INTERNAL_PUSH_DEDUP_H_
#define RELAXPS_SERVER_INTERNAL_PUSH_DEDUP_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

namespace relaxps {
namespace server_internal {

class PushDedup {
 public:
  // Push ids remembered per (worker, incarnation): the newest this many.
  static constexpr size_t kWindow = 4096;

  // True if the push was recorded, or is older than every remembered one of a
  // full window (a resend that late was applied long ago).
  bool Applied(int worker, uint64_t incarnation, uint64_t push_id) const;
  void Record(int worker, uint64_t incarnation, uint64_t push_id);

 private:
  std::map<std::pair<int, uint64_t>, std::set<uint64_t>> ids_;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_PUSH_DEDUP_H_
