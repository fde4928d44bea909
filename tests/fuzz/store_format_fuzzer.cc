// Fuzz target: the readers of the RocksDB store's on-disk format
// (storage/internal/store_format): the store metadata, flush record and
// table records decoded when a store opens, and the dense-chunk and row keys
// parsed while loading. A damaged database must give Corruption, never a
// crash, and a record the decoder accepts must describe a table the store
// can load.
//
// Input: a selector byte, then the record or key bytes.
//
// Invariants: an accepted record re-encodes to the same bytes; an accepted
// table record passes the same spec validation as CreateDense/CreateSparse;
// an accepted key re-encodes to the same key.
#include <cstdint>
#include <string>

#include "storage/internal/spec_util.h"
#include "storage/internal/store_format.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace relaxps;
  using namespace relaxps::storage_internal;
  fuzz::FuzzInput in(data, size);
  const uint8_t which = in.Take<uint8_t>();
  const std::string bytes = in.TakeRest();
  switch (which % 5) {
    case 0: {
      StoreMeta m;
      if (DecodeStoreMeta(bytes, "fuzz", &m).ok()) FUZZ_CHECK(EncodeStoreMeta(m) == bytes);
      break;
    }
    case 1: {
      FlushRecord f;
      if (DecodeFlushRecord(bytes, "fuzz", &f).ok()) FUZZ_CHECK(EncodeFlushRecord(f) == bytes);
      break;
    }
    case 2: {
      TableMeta t;
      if (!DecodeTableMeta(bytes, "fuzz", &t).ok()) break;
      FUZZ_CHECK(EncodeTableMeta(t) == bytes);
      FUZZ_CHECK(t.kind == TableKind::kDense ? ValidateDenseSpec(t.dense).ok()
                                             : ValidateSparseSpec(t.sparse).ok());
      break;
    }
    case 3: {
      uint32_t id;
      uint64_t generation, chunk;
      int slot;
      if (ParseDenseChunkKey(bytes, &id, &generation, &slot, &chunk)) {
        FUZZ_CHECK(DenseChunkKey(id, generation, slot, chunk) == bytes);
      }
      break;
    }
    default: {
      uint32_t id;
      uint64_t row;
      if (ParseRowKey(bytes, &id, &row)) FUZZ_CHECK(RowKey(bytes[0], id, row) == bytes);
      break;
    }
  }
  return 0;
}
