#include "tests/allocation_counter.h"

#include <cstdlib>
#include <new>

namespace {
thread_local bool counting = false;
thread_local int64_t allocations = 0;
}  // namespace

void* operator new(std::size_t bytes) {
  if (counting) ++allocations;
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t /*bytes*/) noexcept { std::free(p); }

namespace relaxps {
namespace test {

void StartCountingAllocations() {
  allocations = 0;
  counting = true;
}

int64_t StopCountingAllocations() {
  counting = false;
  return allocations;
}

}  // namespace test
}  // namespace relaxps
