// Table descriptions shared by the coordinator, servers and clients.
#ifndef RELAXPS_TABLE_H_
#define RELAXPS_TABLE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "relaxps/status.h"
#include "relaxps/initializer.h"
#include "relaxps/lr_schedule.h"
#include "relaxps/optimizer_options.h"

namespace relaxps {

enum class TableType { kDense = 0, kSparse = 1 };

struct TableOptions {
  std::string name;
  TableType type = TableType::kDense;
  // Dense: number of float parameters. Sparse: ignored (ids are 64-bit).
  uint64_t size = 0;
  // Sparse: floats per row. Dense: ignored.
  uint32_t row_width = 0;
  // Server-side update rule.
  OptimizerOptions optimizer;
  // Initial values (dense: keys; sparse: columns of each row).
  Initializer init;
  // How the rate changes with the clock: a push of clock c is applied with
  // optimizer.lr * lr_schedule.Factor(c) on every shard.
  LrSchedule lr_schedule;
  // Learning-rate changes made with Client::SetLearningRate (from_clock,
  // lr), sorted by from_clock; filled in by the coordinator and ignored by
  // CreateTable. Read them with Client::GetTable.
  std::vector<std::pair<int64_t, float>> lr_changes;

  // The rate a push (or BSP round) of `clock` is applied with, as a factor
  // on optimizer.lr: the latest lr_changes entry at or before `clock` (else
  // optimizer.lr), times lr_schedule.Factor(clock).
  double LrScaleAt(int64_t clock) const;

  // Checks name, sizes, optimizer and initializer.
  Status Validate() const;
};

}  // namespace relaxps

#endif  // RELAXPS_TABLE_H_
