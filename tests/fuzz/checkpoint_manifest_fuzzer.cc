// Fuzz target: the checkpoint manifest reader (storage/checkpoint,
// storage_internal::ParseCheckpointManifest), which decides whether a
// checkpoint directory is restored. A damaged manifest must give
// Corruption, never a crash or a half-filled CheckpointInfo.
//
// Input: a mode byte, then manifest text. Odd modes append a correct
// "crc32c" line to the text, so the fuzzer gets past the checksum into the
// record parser; even modes parse the bytes as they are.
//
// Invariants on an accepted manifest: it had a clock and a store, every file
// name (separate or packed) is non-empty without '/', bytes is the sum of
// their sizes, and every packed file lies inside the manifest text.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "storage/checkpoint.h"
#include "storage/internal/checkpoint_manifest.h"
#include "storage/internal/crc32c.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace relaxps;
  fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.Take<uint8_t>();
  std::string text = in.TakeRest();
  if (mode % 2 == 1) {
    char crc[9];
    std::snprintf(crc, sizeof(crc), "%08x", storage_internal::Crc32c(0, text.data(), text.size()));
    text += std::string("crc32c ") + crc + "\n";
  }
  CheckpointInfo info;
  std::vector<storage_internal::PackedFile> packed;
  if (!storage_internal::ParseCheckpointManifest("fuzz", text, &info, &packed).ok()) return 0;
  FUZZ_CHECK(!info.store.empty());
  uint64_t bytes = 0;
  for (const auto* list : {&info.files, &info.packed}) {
    for (const CheckpointFile& f : *list) {
      FUZZ_CHECK(!f.name.empty() && f.name.find('/') == std::string::npos);
      bytes += f.size;
    }
  }
  FUZZ_CHECK(bytes == info.bytes);
  FUZZ_CHECK(packed.size() == info.packed.size());
  for (const storage_internal::PackedFile& p : packed) {
    FUZZ_CHECK(p.offset <= text.size() && p.size <= text.size() - p.offset);
  }
  return 0;
}
