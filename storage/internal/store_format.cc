#include "storage/internal/store_format.h"

#include <cstring>

#include "storage/internal/spec_util.h"

namespace relaxps {
namespace storage_internal {
namespace {

constexpr uint32_t kTableMetaMagic = 0x52505354;  // "RPST"
constexpr uint32_t kMaxSegments = 1 << 16;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    out_.append(buf, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void PutInit(const Initializer& init) {
    Put<uint64_t>(init.seed);
    Put<uint32_t>(static_cast<uint32_t>(init.segments.size()));
    for (const InitSegment& s : init.segments) {
      Put<uint64_t>(s.begin);
      Put<uint64_t>(s.end);
      Put<uint8_t>(static_cast<uint8_t>(s.kind));
      Put<float>(s.a);
      Put<float>(s.b);
    }
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Bounds-checked reader: every Get returns false once the data runs out.
class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  template <typename T>
  bool Get(T* v) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(std::string* s) {
    uint32_t n;
    if (!Get(&n) || data_.size() - pos_ < n) return false;
    s->assign(data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool GetInit(Initializer* init) {
    uint32_t n;
    if (!Get(&init->seed) || !Get(&n) || n > kMaxSegments) return false;
    init->segments.resize(n);
    for (InitSegment& s : init->segments) {
      uint8_t kind;
      if (!Get(&s.begin) || !Get(&s.end) || !Get(&kind) || !Get(&s.a) || !Get(&s.b)) return false;
      if (kind > static_cast<uint8_t>(InitKind::kNormal)) return false;
      s.kind = static_cast<InitKind>(kind);
    }
    return true;
  }
  bool done() const { return pos_ == data_.size(); }

 private:
  const std::string& data_;
  size_t pos_ = 0;
};

void PutBigEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetBigEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

Status Malformed(const std::string& what) {
  return CorruptionError("malformed store record " + what);
}

}  // namespace

std::string EncodeStoreMeta(const StoreMeta& m) {
  Writer w;
  w.Put<uint32_t>(m.version);
  w.Put<uint32_t>(m.next_table_id);
  return w.Take();
}

Status DecodeStoreMeta(const std::string& data, const std::string& what, StoreMeta* m) {
  Reader r(data);
  if (!r.Get(&m->version) || !r.Get(&m->next_table_id) || !r.done()) return Malformed(what);
  if (m->version != kStoreFormatVersion) {
    return CorruptionError(what + ": unsupported store format version " +
                           std::to_string(m->version));
  }
  return Status::OK();
}

std::string EncodeFlushRecord(const FlushRecord& f) {
  Writer w;
  w.Put<int64_t>(f.clock);
  w.Put<uint8_t>(f.apply_pending ? 1 : 0);
  return w.Take();
}

Status DecodeFlushRecord(const std::string& data, const std::string& what, FlushRecord* f) {
  Reader r(data);
  uint8_t pending;
  if (!r.Get(&f->clock) || !r.Get(&pending) || pending > 1 || !r.done()) return Malformed(what);
  f->apply_pending = pending == 1;
  return Status::OK();
}

std::string EncodeTableMeta(const TableMeta& t) {
  Writer w;
  w.Put<uint32_t>(kTableMetaMagic);
  w.Put<uint8_t>(static_cast<uint8_t>(t.kind));
  w.Put<uint32_t>(t.id);
  if (t.kind == TableKind::kDense) {
    const DenseShardSpec& s = t.dense;
    w.PutString(s.table);
    w.Put<uint64_t>(s.begin);
    w.Put<uint64_t>(s.end);
    w.Put<int32_t>(s.num_slots);
    w.Put<float>(s.slot_init);
    w.PutInit(s.init);
    w.Put<int64_t>(t.step);
    w.Put<int64_t>(t.clock);
    w.Put<uint64_t>(t.generation);
    w.Put<uint32_t>(static_cast<uint32_t>(kDenseChunkFloats));
    // A table whose newest generation is complete ends here (as records did
    // before delta generations); else the base generation follows.
    // A table with dense log records (wal_per_update) ends with the base
    // generation (even when complete) and the last record it reflects.
    if (t.base_generation != t.generation || t.log_seq != 0) w.Put<uint64_t>(t.base_generation);
    if (t.log_seq != 0) w.Put<uint64_t>(t.log_seq);
  } else {
    const SparseTableSpec& s = t.sparse;
    w.PutString(s.table);
    w.Put<uint32_t>(s.width);
    w.Put<int32_t>(s.num_slots);
    w.Put<float>(s.slot_init);
    w.PutInit(s.init);
    w.Put<uint64_t>(t.num_rows);
    w.Put<int64_t>(t.step);
  }
  return w.Take();
}

Status DecodeTableMeta(const std::string& data, const std::string& what, TableMeta* t) {
  Reader r(data);
  uint32_t magic;
  uint8_t kind;
  if (!r.Get(&magic) || magic != kTableMetaMagic || !r.Get(&kind) || kind > 1 || !r.Get(&t->id)) {
    return Malformed(what);
  }
  t->kind = static_cast<TableKind>(kind);
  int32_t slots;
  if (t->kind == TableKind::kDense) {
    DenseShardSpec& s = t->dense;
    uint32_t chunk_floats;
    if (!r.GetString(&s.table) || !r.Get(&s.begin) || !r.Get(&s.end) || !r.Get(&slots) ||
        !r.Get(&s.slot_init) || !r.GetInit(&s.init) || !r.Get(&t->step) || !r.Get(&t->clock) ||
        !r.Get(&t->generation) || !r.Get(&chunk_floats)) {
      return Malformed(what);
    }
    // A record that ends here names a complete generation; else the base
    // generation follows, older than the newest one.
    t->base_generation = t->generation;
    t->log_seq = 0;
    if (!r.done()) {
      if (!r.Get(&t->base_generation)) return Malformed(what);
      if (!r.done() && (!r.Get(&t->log_seq) || !r.done() || t->log_seq == 0)) {
        return Malformed(what);
      }
      if (t->base_generation > t->generation ||
          (t->base_generation == t->generation && t->log_seq == 0)) {
        return CorruptionError(what + ": base generation " +
                               std::to_string(t->base_generation) +
                               " is not older than generation " + std::to_string(t->generation));
      }
    }
    if (chunk_floats != kDenseChunkFloats) {
      return CorruptionError(what + ": dense chunk size " + std::to_string(chunk_floats) +
                             " differs from this build's " + std::to_string(kDenseChunkFloats));
    }
    s.num_slots = slots;
  } else {
    SparseTableSpec& s = t->sparse;
    if (!r.GetString(&s.table) || !r.Get(&s.width) || !r.Get(&slots) || !r.Get(&s.slot_init) ||
        !r.GetInit(&s.init) || !r.Get(&t->num_rows) || !r.Get(&t->step) || !r.done()) {
      return Malformed(what);
    }
    s.num_slots = slots;
  }
  // A well-formed record can still describe a table no store can hold (no
  // slots, an empty or inverted range, a bad initializer): refuse it here
  // instead of allocating from it on load.
  Status valid = t->kind == TableKind::kDense ? ValidateDenseSpec(t->dense)
                                              : ValidateSparseSpec(t->sparse);
  if (!valid.ok()) return CorruptionError(what + ": " + valid.message());
  return Status::OK();
}

std::string TableMetaKey(const std::string& table) { return std::string(1, kTablePrefix) + table; }

std::string DensePrefix(uint32_t table_id, uint64_t generation) {
  std::string k(1, kDensePrefix);
  PutBigEndian(&k, table_id, 4);
  PutBigEndian(&k, generation, 8);
  return k;
}

std::string DenseChunkKey(uint32_t table_id, uint64_t generation, int slot, uint64_t chunk) {
  std::string k = DensePrefix(table_id, generation);
  k.push_back(static_cast<char>(slot));
  PutBigEndian(&k, chunk, 8);
  return k;
}

std::string RowKey(char prefix, uint32_t table_id, uint64_t row) {
  std::string k(1, prefix);
  PutBigEndian(&k, table_id, 4);
  PutBigEndian(&k, row, 8);
  return k;
}

bool ParseDenseChunkKey(const std::string& key, uint32_t* table_id, uint64_t* generation,
                        int* slot, uint64_t* chunk) {
  if (key.size() != 22 || key[0] != kDensePrefix) return false;
  *table_id = static_cast<uint32_t>(GetBigEndian(key.data() + 1, 4));
  *generation = GetBigEndian(key.data() + 5, 8);
  *slot = static_cast<unsigned char>(key[13]);
  *chunk = GetBigEndian(key.data() + 14, 8);
  return true;
}

bool ParseRowKey(const std::string& key, uint32_t* table_id, uint64_t* row) {
  if (key.size() != 13 || (key[0] != kRowPrefix && key[0] != kStagedPrefix)) return false;
  *table_id = static_cast<uint32_t>(GetBigEndian(key.data() + 1, 4));
  *row = GetBigEndian(key.data() + 5, 8);
  return true;
}

}  // namespace storage_internal
}  // namespace relaxps
