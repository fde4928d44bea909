// SspCache: the worker-side parameter cache of SSP (the Petuum/Bosen design).
//
// Keeps the values of each table's last dense pull and the clock they
// reflect; a later pull of a range inside it is answered locally while those
// values reflect clock >= the worker's clock - staleness bound. Reads within
// the bound may miss this worker's own recent pushes, as SSP allows.
//
// Thread-safety: all methods are safe from any thread.
#ifndef RELAXPS_CLIENT_INTERNAL_SSP_CACHE_H_
#define RELAXPS_CLIENT_INTERNAL_SSP_CACHE_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/buffer.h"
#include "common/thread_annotations.h"

namespace relaxps {
namespace client_internal {

class SspCache {
 public:
  // `staleness_bound` in clocks (ConsistencyPolicy::staleness_bound()).
  explicit SspCache(int staleness_bound) : staleness_bound_(staleness_bound) {}
  SspCache(const SspCache&) = delete;
  SspCache& operator=(const SspCache&) = delete;

  // If the cached pull covers keys [offset, offset + out.size()) of `table`
  // and is fresh enough for a worker at `worker_clock`: fills `out`, sets
  // *params_clock to the clock they reflect and returns true (a hit).
  bool Serve(const std::string& table, uint64_t offset, const FloatBuffer& out,
             int64_t worker_clock, int64_t* params_clock);
  // Replaces the table's entry with a copy of `values` (keys from `offset`),
  // reflecting `params_clock`.
  void Fill(const std::string& table, uint64_t offset, const FloatBuffer& values,
            int64_t params_clock);

  uint64_t hits() const { return hits_.load(); }
  uint64_t misses() const { return misses_.load(); }

 private:
  struct Entry {
    uint64_t offset = 0;
    FloatBuffer values;
    int64_t params_clock = -1;
  };

  const int staleness_bound_;
  Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ GUARDED_BY(mu_);
  std::atomic<uint64_t> hits_{0}, misses_{0};
};

}  // namespace client_internal
}  // namespace relaxps

#endif  // RELAXPS_CLIENT_INTERNAL_SSP_CACHE_H_
