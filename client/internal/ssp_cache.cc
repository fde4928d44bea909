#include "client/internal/ssp_cache.h"

#include <cstring>

namespace relaxps {
namespace client_internal {

bool SspCache::Serve(const std::string& table, uint64_t offset, const FloatBuffer& out,
                     int64_t worker_clock, int64_t* params_clock) {
  const int64_t needed = worker_clock - staleness_bound_;
  {
    MutexLock l(&mu_);
    auto it = entries_.find(table);
    if (it != entries_.end()) {
      const Entry& e = it->second;
      // [offset, offset + out.size()) inside [e.offset, e.offset + size),
      // tested without sums that could wrap near 2^64.
      const uint64_t cached = e.values.size();
      const bool covers = offset >= e.offset && out.size() <= cached &&
                          offset - e.offset <= cached - out.size();
      if (covers && e.params_clock >= needed) {
        std::memcpy(out.data(), e.values.data() + (offset - e.offset), out.bytes());
        hits_.fetch_add(1);
        *params_clock = e.params_clock;
        return true;
      }
    }
  }
  misses_.fetch_add(1);
  return false;
}

void SspCache::Fill(const std::string& table, uint64_t offset, const FloatBuffer& values,
                    int64_t params_clock) {
  MutexLock l(&mu_);
  Entry& e = entries_[table];
  if (e.values.size() != values.size()) e.values = FloatBuffer::Uninitialized(values.size());
  std::memcpy(e.values.data(), values.data(), values.bytes());
  e.offset = offset;
  e.params_clock = params_clock;
}

}  // namespace client_internal
}  // namespace relaxps
