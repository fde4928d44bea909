// Counts the heap allocations (operator new) that the calling thread makes
// between StartCountingAllocations() and StopCountingAllocations(): for tests
// that bound what one call allocates on its caller's thread (not on the
// client's, the servers' or ZeroMQ's threads).
//
// Linking tests/allocation_counter.cc replaces the test binary's global
// operator new and operator delete, every unaligned form (sized, array and
// nothrow included: AddressSanitizer reports memory that one form allocated
// and a library form freed as a mismatch). Link it only into the tests that
// count.
//
// Thread-safety: the count is per thread.
#ifndef RELAXPS_TESTS_ALLOCATION_COUNTER_H_
#define RELAXPS_TESTS_ALLOCATION_COUNTER_H_

#include <cstdint>

namespace relaxps {
namespace test {

void StartCountingAllocations();
// Stops counting and returns the allocations since the start.
int64_t StopCountingAllocations();

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_ALLOCATION_COUNTER_H_
