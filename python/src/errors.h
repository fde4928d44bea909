// relaxps.Error and its subclasses, one per StatusCode: a Status that is not
// OK becomes a Python exception carrying its message.
//
//   Error(Exception)                   e.code: "Unavailable", ...; e.message
//     InvalidArgument(Error, ValueError)
//     NotFound(Error, LookupError)
//     Unavailable(Error, ConnectionError)
//     DeadlineExceeded(Error, TimeoutError)
//     IOError, Corruption, Aborted, FailedPrecondition, Internal,
//     WrongShard, PermissionDenied, ResourceExhausted(Error)
//
// Thread-safety: REQUIRES the GIL.
#ifndef RELAXPS_PYTHON_ERRORS_H_
#define RELAXPS_PYTHON_ERRORS_H_

#include <string>

#include <pybind11/pybind11.h>

#include "relaxps/status.h"

namespace relaxps {
namespace python {

// Creates the exception classes as attributes of `m`.
void RegisterErrors(pybind11::module_& m);

// Raises the exception of `status`'s code with the message
// "<context>: <status message>" (just the status message for an empty
// context). REQUIRES: !status.ok().
[[noreturn]] void ThrowStatus(const Status& status, const std::string& context);

// Raises unless `status` is OK.
inline void Check(const Status& status, const std::string& context) {
  if (!status.ok()) ThrowStatus(status, context);
}

}  // namespace python
}  // namespace relaxps

#endif  // RELAXPS_PYTHON_ERRORS_H_
