// FuzzInput: splits a fuzzer's byte string into typed fields, like LLVM's
// FuzzedDataProvider but usable from the gcc build, where the corpus replay
// (replay_main.cc) runs every target without libFuzzer.
//
// Reading past the end yields zeros and empty strings, so every input is
// valid. Not thread-safe (one per input).
#ifndef RELAXPS_TESTS_FUZZ_FUZZ_INPUT_H_
#define RELAXPS_TESTS_FUZZ_FUZZ_INPUT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include <google/protobuf/stubs/logging.h>

namespace relaxps {
namespace fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_ - pos_; }

  // The next sizeof(T) bytes as a T (little-endian host), zero-padded.
  template <typename T>
  T Take() {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    T v{};
    const size_t n = std::min(sizeof(T), remaining());
    std::memcpy(&v, data_ + pos_, n);
    pos_ += n;
    return v;
  }
  // An integer in [lo, hi] (one byte of input when the range is small).
  uint64_t TakeInRange(uint64_t lo, uint64_t hi) {
    const uint64_t span = hi - lo;
    const uint64_t raw = span < 256 ? Take<uint8_t>() : Take<uint64_t>();
    return span == UINT64_MAX ? raw : lo + raw % (span + 1);
  }
  // Up to `max` bytes, the length taken from the input first.
  std::string TakeString(size_t max) {
    return TakeBytes(static_cast<size_t>(TakeInRange(0, max)));
  }
  std::string TakeBytes(size_t n) {
    n = std::min(n, remaining());
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::string TakeRest() { return TakeBytes(remaining()); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace fuzz
}  // namespace relaxps

// Silences protobuf's log lines about malformed input (invalid UTF-8 in a
// string field, ...), expected while fuzzing. Call at the start of a target.
inline void QuietProtobufLogs() {
  static const bool done = (google::protobuf::SetLogHandler(nullptr), true);
  (void)done;
}

// Every target defines this (libFuzzer's entry point); replay_main.cc calls
// it for each corpus file. Returns 0.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// Stops the process with a message: a broken invariant is a finding.
#define FUZZ_CHECK(cond)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__,        \
                   __LINE__, #cond);                                          \
      std::abort();                                                           \
    }                                                                         \
  } while (0)

#endif  // RELAXPS_TESTS_FUZZ_FUZZ_INPUT_H_
