#include "server/internal/push_dedup.h"

namespace relaxps {
namespace server_internal {

bool PushDedup::Applied(int worker, uint64_t incarnation, uint64_t push_id) const {
  auto it = ids_.find({worker, incarnation});
  if (it == ids_.end()) return false;
  const std::set<uint64_t>& ids = it->second;
  return ids.count(push_id) > 0 || (ids.size() >= kWindow && push_id < *ids.begin());
}

void PushDedup::Record(int worker, uint64_t incarnation, uint64_t push_id) {
  std::set<uint64_t>& ids = ids_[{worker, incarnation}];
  ids.insert(push_id);
  while (ids.size() > kWindow) ids.erase(ids.begin());
}

}  // namespace server_internal
}  // namespace relaxps
