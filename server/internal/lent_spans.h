// LentSpans: the keys of a dense shard whose memory is lent to ZeroMQ, which
// sends it without a copy (a range move's copy phase, docs/elastic.md "One
// move"), and the writes that must wait for it.
//
// Lend(offset, n) registers keys [offset, offset + n) (every slot of them)
// and returns a handle; whoever holds it keeps the span lent, and dropping
// it (ZeroMQ freeing the message, on its I/O thread) gives it back. A writer
// calls WaitUntilReturned before it writes keys: it blocks until no lent
// span overlaps them, so ZeroMQ never reads a key while the optimizer writes
// it. A span that is not back within `wait_ms` (the peer stopped reading:
// it is dead or wedged) is let go of: the write proceeds, and the span is
// recorded as torn (what ZeroMQ sends of it may mix the values before and
// after the write), for the lender to send those keys again (TakeTorn).
//
// The state is shared with every handle, so a handle may outlive this
// object (a message still queued in ZeroMQ when the shard is gone).
//
// Thread-safety: all methods are safe from any thread; handles may be
// dropped from any thread.
#ifndef RELAXPS_SERVER_INTERNAL_LENT_SPANS_H_
#define RELAXPS_SERVER_INTERNAL_LENT_SPANS_H_

#include <cstdint>
#include <memory>
#include <vector>

namespace relaxps {
namespace server_internal {

class LentSpans {
 public:
  struct Span {
    uint64_t offset;
    uint64_t count;
  };
  struct Stats {
    uint64_t lent = 0;       // Spans lent so far.
    uint64_t lent_keys = 0;  // Their keys.
    uint64_t waits = 0;      // Writes that had to wait for a span.
    uint64_t wait_us = 0;    // Time they waited, in all.
    uint64_t torn = 0;       // Spans let go of past the wait bound.
  };

  LentSpans();
  LentSpans(const LentSpans&) = delete;
  LentSpans& operator=(const LentSpans&) = delete;
  ~LentSpans();

  // Lends keys [offset, offset + n) until the returned handle is dropped.
  // REQUIRES: n > 0.
  std::shared_ptr<void> Lend(uint64_t offset, uint64_t n);

  // Blocks until no lent span overlaps keys [offset, offset + n), at most
  // `wait_ms` (>= 0); the spans still out then are recorded as torn and
  // forgotten (their handles give nothing back any more). Returns at once
  // when nothing is lent.
  void WaitUntilReturned(uint64_t offset, uint64_t n, int64_t wait_ms);

  // Whether any span is lent now.
  bool Any() const;
  // The torn spans since the last call (ascending offsets, may overlap),
  // forgotten.
  std::vector<Span> TakeTorn();
  Stats stats() const;

 private:
  struct Core;
  struct Handle;
  const std::shared_ptr<Core> core_;
};

}  // namespace server_internal
}  // namespace relaxps

#endif  // RELAXPS_SERVER_INTERNAL_LENT_SPANS_H_
