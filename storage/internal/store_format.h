// On-disk format of the RocksDB param store: key layout and the encoding of
// its metadata records.
//
// Keys (one byte of kind, then big-endian integers so that a table's keys are
// contiguous and ordered):
//   "M"                           StoreMeta (format version, next table id)
//   "F"                           FlushRecord (clock of the last Flush, staged
//                                 rows still to be applied)
//   "t" + table name              TableMeta (kind, id, spec, step/clock and
//                                 generation, or row count)
//   "r" + be32 id + be64 row      committed sparse row record (all slots)
//   "s" + be32 id + be64 row      staged row: evicted from the cache since the
//                                 last Flush; committed by the next one
//   "z" + be32 id + be64 gen      dense chunk i of a slot in generation gen:
//       + u8 slot + be64 i        kDenseChunkFloats floats (the last one may
//                                 be shorter)
// Floats are stored in host (little-endian) byte order.
//
// Dense generations: a flush writes the chunks of a dense table that changed
// since the previous flush under a new generation, and the table record names
// it. A generation is a base (every chunk) or a delta (the changed chunks
// only); the record also names the latest base, and the table's value is the
// base overlaid by the deltas after it in order. A flush writes a new base once
// the deltas would add up to more than the table (or there would be too many of
// them); then every older generation is garbage as soon as the commit lands. A
// delta that holds every chunk of the deltas before it supersedes them: they
// are garbage once it lands, and a generation missing between the base and the
// newest one is one that was dropped so. Each generation is one contiguous key
// range that overlaps nothing else, and the dense prefix sorts after every
// other kind, so a generation's SST file is ingested straight into the bottom
// level and later dropped whole (DeleteFilesInRange) instead of being rewritten
// by compactions. Base generation 0 means "never flushed": chunks absent from
// it and from the deltas hold their initial values.
//
// All functions are pure; safe to call from any thread.
#ifndef RELAXPS_STORAGE_INTERNAL_STORE_FORMAT_H_
#define RELAXPS_STORAGE_INTERNAL_STORE_FORMAT_H_

#include <cstdint>
#include <string>

#include "common/status.h"
#include "storage/param_store.h"

namespace relaxps {
namespace storage_internal {

inline constexpr uint32_t kStoreFormatVersion = 2;
// 64 KiB per dense chunk: large enough for cheap sequential writes, small
// enough that a wal_per_update write of a few keys stays small.
inline constexpr size_t kDenseChunkFloats = 16384;

inline constexpr char kStoreMetaKey[] = "M";
inline constexpr char kFlushKey[] = "F";
inline constexpr char kTablePrefix = 't';
inline constexpr char kRowPrefix = 'r';
inline constexpr char kStagedPrefix = 's';
inline constexpr char kDensePrefix = 'z';  // Must sort after every other kind.

struct StoreMeta {
  uint32_t version = kStoreFormatVersion;
  uint32_t next_table_id = 1;
};

struct FlushRecord {
  int64_t clock = 0;
  // true: the staged rows ("s" keys) belong to the last Flush and must be
  // moved to "r" keys on open; false: staged rows are uncommitted garbage.
  bool apply_pending = false;
};

enum class TableKind : uint8_t { kDense = 0, kSparse = 1 };

struct TableMeta {
  TableKind kind = TableKind::kDense;
  uint32_t id = 0;
  DenseShardSpec dense;    // kind == kDense.
  int64_t step = 0;        // Optimizer steps applied (both kinds).
  int64_t clock = 0;       // kind == kDense.
  uint64_t generation = 0;  // kind == kDense: its newest generation.
  uint64_t base_generation = 0;  // kind == kDense: its complete generation.
  // kind == kDense: the last dense log record (dense_log.h) the committed
  // generations reflect; later records of the table are replayed on load.
  uint64_t log_seq = 0;
  SparseTableSpec sparse;  // kind == kSparse.
  uint64_t num_rows = 0;   // kind == kSparse.
  const std::string& name() const { return kind == TableKind::kDense ? dense.table : sparse.table; }
};

std::string EncodeStoreMeta(const StoreMeta& m);
std::string EncodeFlushRecord(const FlushRecord& f);
std::string EncodeTableMeta(const TableMeta& t);
// Corruption (mentioning `what`) for a truncated or malformed record, and
// for a table record whose spec fails ValidateDenseSpec/ValidateSparseSpec.
Status DecodeStoreMeta(const std::string& data, const std::string& what, StoreMeta* m);
Status DecodeFlushRecord(const std::string& data, const std::string& what, FlushRecord* f);
Status DecodeTableMeta(const std::string& data, const std::string& what, TableMeta* t);

std::string TableMetaKey(const std::string& table);
std::string DenseChunkKey(uint32_t table_id, uint64_t generation, int slot, uint64_t chunk);
// Prefix of all chunks of one generation of a dense table; generations
// [a, b) of a table are the keys [DensePrefix(id, a), DensePrefix(id, b)).
std::string DensePrefix(uint32_t table_id, uint64_t generation);
std::string RowKey(char prefix, uint32_t table_id, uint64_t row);
// Parses a dense chunk key. false if malformed.
bool ParseDenseChunkKey(const std::string& key, uint32_t* table_id, uint64_t* generation,
                        int* slot, uint64_t* chunk);
// Parses an "r" or "s" key. false if malformed.
bool ParseRowKey(const std::string& key, uint32_t* table_id, uint64_t* row);

}  // namespace storage_internal
}  // namespace relaxps

#endif  // RELAXPS_STORAGE_INTERNAL_STORE_FORMAT_H_
