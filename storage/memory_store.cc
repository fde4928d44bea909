// MemoryStore: a ParamStore that keeps everything in process memory.
//
// Dense shards are 64-byte aligned float arrays, one per slot (shared with
// the payloads a range move sends out of them: PinDense); sparse rows
// live in a RowArena (blocks of rows behind an open-addressing id index) and
// are created from the initializer on first touch.
// Nothing survives the process: Flush is a no-op and Checkpoint is
// Unavailable.
#include <algorithm>
#include <map>
#include <new>
#include <memory>
#include <string>
#include <vector>

#include "storage/internal/dense_arrays.h"
#include "storage/internal/row_arena.h"
#include "storage/internal/spec_util.h"
#include "storage/param_store.h"

namespace relaxps {
namespace {

using storage_internal::DenseArrays;

class MemoryStore final : public ParamStore {
 public:
  MemoryStore() = default;

  const char* Name() const override { return "memory"; }

  StatusOr<DenseShard*> CreateDense(const DenseShardSpec& spec) override {
    RETURN_IF_ERROR(storage_internal::ValidateDenseSpec(spec));
    if (sparse_.count(spec.table)) {
      return InvalidArgumentError("table '" + spec.table + "' already exists as a sparse table");
    }
    auto it = dense_.find(spec.table);
    if (it != dense_.end()) {
      if (!storage_internal::SameDenseShape(it->second->shard.spec, spec)) {
        return InvalidArgumentError("dense shard " + storage_internal::DescribeDense(spec) +
                                    " conflicts with existing " +
                                    storage_internal::DescribeDense(it->second->shard.spec));
      }
      return &it->second->shard;
    }
    auto entry = std::make_unique<DenseEntry>();
    entry->shard.spec = spec;
    const size_t n = spec.end - spec.begin;
    try {
      entry->arrays = DenseArrays(spec.num_slots, n);
      entry->shard.slots = entry->arrays.slots();
      for (int s = 0; spec.initialize && s < spec.num_slots; ++s) {
        storage_internal::InitDenseRange(spec, s, 0, n, entry->shard.slots[s]);
      }
    } catch (const std::bad_alloc&) {
      return Status(StatusCode::kInternal,
                    "out of memory allocating dense shard " + storage_internal::DescribeDense(spec));
    }
    DenseShard* shard = &entry->shard;
    dense_.emplace(spec.table, std::move(entry));
    return shard;
  }

  DenseShard* GetDense(const std::string& table) override {
    auto it = dense_.find(table);
    return it == dense_.end() ? nullptr : &it->second->shard;
  }

  Status ReshapeDense(DenseShard* shard, const std::string& name, uint64_t end) override {
    DenseEntry* entry = Find(shard);
    if (entry == nullptr) {
      return InvalidArgumentError("ReshapeDense: shard does not belong to this store");
    }
    RETURN_IF_ERROR(
        storage_internal::CheckReshape(entry->shard, entry->arrays.capacity(), name, end));
    const std::string old_name = shard->spec.table;
    if (name != old_name) {
      if (dense_.count(name) > 0 || sparse_.count(name) > 0) {
        return InvalidArgumentError("cannot rename dense shard '" + old_name + "' to '" + name +
                                    "': a table of that name exists");
      }
      auto node = dense_.extract(old_name);
      node.key() = name;
      dense_.insert(std::move(node));
    }
    shard->spec.table = name;
    shard->spec.end = end;
    return Status::OK();
  }

  void ReleaseDenseTail(DenseShard* shard) override {
    if (DenseEntry* entry = Find(shard); entry != nullptr) {
      entry->arrays.ReleaseBeyond(shard->size());
    }
  }

  std::shared_ptr<const void> PinDense(DenseShard* shard) override {
    DenseEntry* entry = Find(shard);
    return entry != nullptr ? entry->arrays.Pin() : nullptr;
  }

  Status DenseUpdated(DenseShard* shard, size_t offset, size_t n) override {
    if (shard == nullptr || GetDense(shard->spec.table) != shard) {
      return InvalidArgumentError("DenseUpdated: shard does not belong to this store");
    }
    if (offset > shard->size() || n > shard->size() - offset) {
      return InvalidArgumentError("DenseUpdated: range [" + std::to_string(offset) + ", +" +
                                  std::to_string(n) + ") exceeds shard size " +
                                  std::to_string(shard->size()));
    }
    return Status::OK();
  }

  Status CreateSparse(const SparseTableSpec& spec) override {
    RETURN_IF_ERROR(storage_internal::ValidateSparseSpec(spec));
    if (dense_.count(spec.table)) {
      return InvalidArgumentError("table '" + spec.table + "' already exists as a dense shard");
    }
    auto it = sparse_.find(spec.table);
    if (it != sparse_.end()) {
      if (!storage_internal::SameSparseSpec(it->second.spec, spec)) {
        return InvalidArgumentError("sparse table " + storage_internal::DescribeSparse(spec) +
                                    " conflicts with the existing spec " +
                                    storage_internal::DescribeSparse(it->second.spec));
      }
      return Status::OK();
    }
    SparseTable& t = sparse_[spec.table];
    t.spec = spec;
    t.rows = std::make_unique<storage_internal::RowArena>(spec.row_floats());
    return Status::OK();
  }

  const SparseTableSpec* GetSparse(const std::string& table) const override {
    auto it = sparse_.find(table);
    return it == sparse_.end() ? nullptr : &it->second.spec;
  }

  int64_t* SparseStep(const std::string& table) override {
    auto it = sparse_.find(table);
    return it == sparse_.end() ? nullptr : &it->second.step;
  }

  Status ReadRows(const std::string& table, const uint64_t* ids, size_t n,
                  float* out) override {
    return ForEachRowCreating(table, ids, n, [out](size_t i, float* row, size_t rf) {
      std::copy(row, row + rf, out + i * rf);
    });
  }

  Status PeekRows(const std::string& table, const uint64_t* ids, size_t n,
                  float* out) override {
    auto it = sparse_.find(table);
    if (it == sparse_.end()) return NotFoundError("no sparse table '" + table + "'");
    SparseTable& t = it->second;
    const size_t rf = t.spec.row_floats();
    storage_internal::ForEachRowPrefetched(*t.rows, ids, n, [&](size_t i) {
      const float* row = t.rows->Find(ids[i]);
      if (row == nullptr) {
        storage_internal::InitRow(t.spec, ids[i], out + i * rf);
      } else {
        std::copy(row, row + rf, out + i * rf);
      }
    });
    return Status::OK();
  }

  Status WriteRows(const std::string& table, const uint64_t* ids, size_t n,
                   const float* rows) override {
    auto it = sparse_.find(table);
    if (it == sparse_.end()) return NotFoundError("no sparse table '" + table + "'");
    SparseTable& t = it->second;
    const size_t rf = t.spec.row_floats();
    storage_internal::ForEachRowPrefetched(*t.rows, ids, n, [&](size_t i) {
      float* row = t.rows->FindOrInsert(ids[i]).first;
      std::copy(rows + i * rf, rows + (i + 1) * rf, row);
    });
    return Status::OK();
  }

  bool UpdatesRowsInPlace() const override { return true; }

  Status UpdateRowsInPlace(const std::string& table, const uint64_t* ids, size_t n,
                           const std::function<void(size_t i, float* row)>& update) override {
    return ForEachRowCreating(table, ids, n,
                              [&update](size_t i, float* row, size_t) { update(i, row); });
  }

  StatusOr<uint64_t> NumRows(const std::string& table) override {
    auto it = sparse_.find(table);
    if (it == sparse_.end()) return NotFoundError("no sparse table '" + table + "'");
    return static_cast<uint64_t>(it->second.rows->size());
  }

  Status SparseRowIds(const std::string& table, std::vector<uint64_t>* ids) override {
    auto it = sparse_.find(table);
    if (it == sparse_.end()) return NotFoundError("no sparse table '" + table + "'");
    ids->reserve(ids->size() + it->second.rows->size());
    it->second.rows->ForEachId([ids](uint64_t id) { ids->push_back(id); });
    return Status::OK();
  }

  Status Flush(int64_t clock) override { return Status::OK(); }

  Status Checkpoint(const std::string& dir, int64_t clock) override {
    return UnavailableError("memory store has no durable state");
  }

  std::vector<std::string> Tables() const override {
    std::vector<std::string> names;
    for (const auto& [name, entry] : dense_) names.push_back(name);
    for (const auto& [name, table] : sparse_) names.push_back(name);
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  struct DenseEntry {
    DenseShard shard;  // shard.slots point into arrays.
    DenseArrays arrays;
  };

  // The entry of a shard of this store, or nullptr.
  DenseEntry* Find(const DenseShard* shard) {
    if (shard == nullptr) return nullptr;
    auto it = dense_.find(shard->spec.table);
    return it != dense_.end() && &it->second->shard == shard ? it->second.get() : nullptr;
  }
  struct SparseTable {
    SparseTableSpec spec;
    int64_t step = 0;
    std::unique_ptr<storage_internal::RowArena> rows;
  };

  // Calls visit(i, row, row_floats) for the row of each of ids[0, n),
  // created from the initializer if missing, with the rows a few ids ahead
  // already on their way into the cache.
  template <typename Visit>
  Status ForEachRowCreating(const std::string& table, const uint64_t* ids, size_t n,
                            Visit visit) {
    auto it = sparse_.find(table);
    if (it == sparse_.end()) return NotFoundError("no sparse table '" + table + "'");
    SparseTable& t = it->second;
    const size_t rf = t.spec.row_floats();
    storage_internal::ForEachRowPrefetched(*t.rows, ids, n, [&](size_t i) {
      auto [row, inserted] = t.rows->FindOrInsert(ids[i]);
      if (inserted) storage_internal::InitRow(t.spec, ids[i], row);
      visit(i, row, rf);
    });
    return Status::OK();
  }

  // Not synchronized: the server serializes calls (see param_store.h).
  // unique_ptr keeps DenseShard addresses stable across rehashing.
  std::map<std::string, std::unique_ptr<DenseEntry>> dense_;
  std::map<std::string, SparseTable> sparse_;
};

}  // namespace

std::unique_ptr<ParamStore> NewMemoryStore() { return std::make_unique<MemoryStore>(); }

}  // namespace relaxps
