// The blocking dense calls of relaxps.Client (push, pull, push_pull) as
// METH_FASTCALL methods: CPython hands them its argument array as is, and
// they call PyClient directly.
//
// pybind11's generic dispatcher (argument records, two vectors allocated per
// call, a type caster per argument) cost about 1,600 instructions of a 4 KiB
// push_pull on the calling thread, as much as the rest of the module's glue
// (docs/benchmarks.md, issue 41). These three are what a training loop calls
// every step; everything else stays with pybind11.
//
// Same signatures, defaults, keywords and errors as the pybind11 methods
// they replace: (table, grads[, offset=0]), (table, out[, offset=0]),
// (table, grads, out[, offset=0]), positional or by keyword; a bad call
// raises TypeError (ValueError for a negative offset), a failed request its
// relaxps.Error. inspect.signature() reads them from __text_signature__.
//
// Thread-safety: as PyClient (called with the GIL held, by CPython).
#ifndef RELAXPS_PYTHON_FAST_CALLS_H_
#define RELAXPS_PYTHON_FAST_CALLS_H_

#include <pybind11/pybind11.h>

#include "py_client.h"

namespace relaxps {
namespace python {

// Sets push, pull and push_pull on `cls` (replacing any definition).
void DefineFastCalls(pybind11::class_<PyClient>& cls);

}  // namespace python
}  // namespace relaxps

#endif  // RELAXPS_PYTHON_FAST_CALLS_H_
