// Python keyword arguments <-> relaxps option structs (TableOptions and its
// Initializer, OptimizerOptions, LrSchedule).
//
// Thread-safety: REQUIRES the GIL.
#ifndef RELAXPS_PYTHON_OPTIONS_H_
#define RELAXPS_PYTHON_OPTIONS_H_

#include <cstdint>
#include <string>

#include <pybind11/pybind11.h>

#include "relaxps/table.h"

namespace relaxps {
namespace python {

// create_table's arguments, defaults as in TableOptions.
struct TableArgs {
  std::string name;
  uint64_t size = 0;
  bool sparse = false;
  uint32_t row_width = 0;
  OptimizerOptions optimizer;
  // None (zeros); "zeros"; a whole-table segment ("uniform", a, b); or a
  // list of segments (begin, end, kind[, a[, b]]) or dicts with those keys.
  // Dense: keys; sparse: columns of each row.
  pybind11::object init;
  uint64_t init_seed = 0;
  // ParseLrSchedule's syntax: "constant", "step:every=N,gamma=G", ...
  std::string lr_schedule = "constant";
};

// Raises relaxps.InvalidArgument (or TypeError for a malformed init) naming
// the problem; the result passed TableOptions::Validate().
TableOptions MakeTableOptions(const TableArgs& args);

// The options as a dict (get_table, list_tables).
pybind11::dict TableDict(const TableOptions& options);

}  // namespace python
}  // namespace relaxps

#endif  // RELAXPS_PYTHON_OPTIONS_H_
