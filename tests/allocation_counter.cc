#include "tests/allocation_counter.h"

#include <cstdlib>
#include <new>

namespace {
thread_local bool counting = false;
thread_local int64_t allocations = 0;

// Every unaligned form, new and delete alike, goes through malloc and free:
// a form left to the library (libzmq uses new(std::nothrow)) would meet the
// other side's in AddressSanitizer's books as a mismatch. The aligned forms
// stay the library's, both sides.
void* Allocate(std::size_t bytes) noexcept {
  if (counting) ++allocations;
  return std::malloc(bytes == 0 ? 1 : bytes);
}

void* AllocateOrThrow(std::size_t bytes) {
  void* p = Allocate(bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t bytes) { return AllocateOrThrow(bytes); }
void* operator new[](std::size_t bytes) { return AllocateOrThrow(bytes); }
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept { return Allocate(bytes); }
void* operator new[](std::size_t bytes, const std::nothrow_t&) noexcept { return Allocate(bytes); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

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
