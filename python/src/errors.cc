#include "errors.h"

namespace py = pybind11;

namespace relaxps {
namespace python {
namespace {

constexpr int kCodes = static_cast<int>(StatusCode::kMaxCode) + 1;

// Indexed by StatusCode; [0] is the base class Error. Set once at import.
PyObject* g_types[kCodes] = {};

PyObject* NewClass(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("relaxps.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.attr(name) = py::reinterpret_borrow<py::object>(type);
  return type;  // The module keeps a reference; so does g_types, for ever.
}

}  // namespace

void RegisterErrors(py::module_& m) {
  PyObject* base = NewClass(m, "Error", PyExc_Exception,
                            "A relaxps call failed: e.code names the Status code "
                            "('Unavailable', ...), e.message is the Status message.");
  g_types[0] = base;
  struct Extra {
    StatusCode code;
    PyObject* builtin;  // A second base for idiomatic except clauses, or null.
    const char* doc;
  };
  const Extra extras[] = {
      {StatusCode::kInvalidArgument, PyExc_ValueError, "Bad argument: wrong size, bad option."},
      {StatusCode::kNotFound, PyExc_LookupError, "Unknown table, missing file or checkpoint."},
      {StatusCode::kUnavailable, PyExc_ConnectionError, "A server or the coordinator is down."},
      {StatusCode::kIOError, nullptr, "Disk or socket failure."},
      {StatusCode::kCorruption, nullptr, "Stored data failed a consistency check."},
      {StatusCode::kAborted, nullptr, "Cancelled: the client closed or the job failed."},
      {StatusCode::kDeadlineExceeded, PyExc_TimeoutError, "No answer before the deadline."},
      {StatusCode::kFailedPrecondition, nullptr, "The state does not allow the call."},
      {StatusCode::kInternal, nullptr, "A bug or an unexpected library exception."},
      {StatusCode::kWrongShard, nullptr, "Routing: the keys are not served there."},
      {StatusCode::kPermissionDenied, nullptr, "The sender may not send this."},
      {StatusCode::kResourceExhausted, nullptr,
       "A server's limit on unread replies refused the request until its deadline "
       "(nothing was applied; the client retries it before giving up)."},
  };
  for (const Extra& e : extras) {
    py::tuple bases = e.builtin != nullptr
                          ? py::make_tuple(py::handle(base), py::handle(e.builtin))
                          : py::make_tuple(py::handle(base));
    g_types[static_cast<int>(e.code)] =
        NewClass(m, StatusCodeName(e.code), bases.ptr(), e.doc);
  }
}

void ThrowStatus(const Status& status, const std::string& context) {
  const int code = static_cast<int>(status.code());
  PyObject* type = code > 0 && code < kCodes && g_types[code] != nullptr ? g_types[code]
                                                                         : g_types[0];
  const std::string text =
      context.empty() ? status.message() : context + ": " + status.message();
  py::object exc = py::reinterpret_borrow<py::object>(type)(text);
  exc.attr("code") = StatusCodeName(status.code());
  exc.attr("message") = status.message();
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

}  // namespace python
}  // namespace relaxps
