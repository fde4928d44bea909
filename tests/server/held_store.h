// HeldStore: a ParamStore for tests that forwards every call to a memory
// store and holds its row updates (UpdateRowsInPlace, WriteRows) while a
// RowGate is closed. It shows what a server does before a row update has
// happened, e.g. whether it has acknowledged the push.
//
// Thread-safety: RowGate is thread-safe; HeldStore is used by one server
// loop thread, as any ParamStore.
#ifndef RELAXPS_TESTS_SERVER_HELD_STORE_H_
#define RELAXPS_TESTS_SERVER_HELD_STORE_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "storage/param_store.h"

namespace relaxps {
namespace test {

class RowGate {
 public:
  // A row update waits here while the gate is closed.
  void Pass() {
    std::unique_lock<std::mutex> l(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(l, [this] { return open_; });
    --waiting_;
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Whether a row update waits at the gate within `timeout`.
  bool AwaitWaiter(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [this] { return waiting_ > 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int waiting_ = 0;
};

class HeldStore final : public ParamStore {
 public:
  // A ServerOptions::store_factory of memory stores held by `gate`;
  // in_place false: the store reports that it cannot update rows in place,
  // so the server reads and writes whole rows instead (as a rocksdb store).
  static std::function<StatusOr<std::unique_ptr<ParamStore>>(const ParamStoreOptions&)> Factory(
      std::shared_ptr<RowGate> gate, bool in_place) {
    return [gate, in_place](const ParamStoreOptions&) -> StatusOr<std::unique_ptr<ParamStore>> {
      return std::unique_ptr<ParamStore>(new HeldStore(gate, in_place));
    };
  }

  const char* Name() const override { return "held"; }
  StatusOr<DenseShard*> CreateDense(const DenseShardSpec& spec) override {
    return inner_->CreateDense(spec);
  }
  DenseShard* GetDense(const std::string& table) override { return inner_->GetDense(table); }
  Status DenseUpdated(DenseShard* shard, size_t offset, size_t n) override {
    return inner_->DenseUpdated(shard, offset, n);
  }
  Status CreateSparse(const SparseTableSpec& spec) override { return inner_->CreateSparse(spec); }
  const SparseTableSpec* GetSparse(const std::string& table) const override {
    return inner_->GetSparse(table);
  }
  Status ReadRows(const std::string& table, const uint64_t* ids, size_t n, float* out) override {
    return inner_->ReadRows(table, ids, n, out);
  }
  Status PeekRows(const std::string& table, const uint64_t* ids, size_t n, float* out) override {
    return inner_->PeekRows(table, ids, n, out);
  }
  Status WriteRows(const std::string& table, const uint64_t* ids, size_t n,
                   const float* rows) override {
    gate_->Pass();
    return inner_->WriteRows(table, ids, n, rows);
  }
  bool UpdatesRowsInPlace() const override { return in_place_; }
  Status UpdateRowsInPlace(const std::string& table, const uint64_t* ids, size_t n,
                           const std::function<void(size_t i, float* row)>& update) override {
    gate_->Pass();
    return inner_->UpdateRowsInPlace(table, ids, n, update);
  }
  int64_t* SparseStep(const std::string& table) override { return inner_->SparseStep(table); }
  StatusOr<uint64_t> NumRows(const std::string& table) override { return inner_->NumRows(table); }
  Status SparseRowIds(const std::string& table, std::vector<uint64_t>* ids) override {
    return inner_->SparseRowIds(table, ids);
  }
  Status Flush(int64_t clock) override { return inner_->Flush(clock); }
  Status Checkpoint(const std::string& dir, int64_t clock) override {
    return inner_->Checkpoint(dir, clock);
  }
  std::vector<std::string> Tables() const override { return inner_->Tables(); }

 private:
  HeldStore(std::shared_ptr<RowGate> gate, bool in_place)
      : gate_(std::move(gate)), in_place_(in_place), inner_(NewMemoryStore()) {}

  const std::shared_ptr<RowGate> gate_;
  const bool in_place_;
  const std::unique_ptr<ParamStore> inner_;
};

}  // namespace test
}  // namespace relaxps

#endif  // RELAXPS_TESTS_SERVER_HELD_STORE_H_
