#include "fast_calls.h"

#include <cstdint>
#include <exception>
#include <string>

namespace py = pybind11;

namespace relaxps {
namespace python {
namespace {

constexpr int kMaxParams = 4;

// The parameters of one method, positional or by keyword; the first
// `required` have no default.
struct Params {
  const char* method;
  const char* names[kMaxParams];
  int count;
  int required;
};

// Fills values[0, p.count) from a vectorcall's arguments (null: not given).
// False with a TypeError set for a bad call.
bool ParseArgs(const Params& p, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
               PyObject** values) {
  if (nargs > p.count) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", p.method,
                 p.count, nargs);
    return false;
  }
  for (int i = 0; i < p.count; ++i) values[i] = i < nargs ? args[i] : nullptr;
  const Py_ssize_t keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < keywords; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    int i = 0;
    while (i < p.count && PyUnicode_CompareWithASCIIString(key, p.names[i]) != 0) ++i;
    if (i == p.count) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", p.method,
                   key);
      return false;
    }
    if (values[i] != nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", p.method,
                   p.names[i]);
      return false;
    }
    values[i] = args[nargs + k];
  }
  for (int i = 0; i < p.required; ++i) {
    if (values[i] == nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", p.method,
                   p.names[i], i + 1);
      return false;
    }
  }
  return true;
}

std::string TableName(const char* method, PyObject* table) {
  Py_ssize_t size;
  const char* utf8 = PyUnicode_Check(table) ? PyUnicode_AsUTF8AndSize(table, &size) : nullptr;
  if (utf8 == nullptr) {
    if (PyErr_Occurred()) throw py::error_already_set();
    throw py::type_error(std::string(method) + ": table must be a str, not " +
                         Py_TYPE(table)->tp_name);
  }
  return std::string(utf8, static_cast<size_t>(size));
}

// Not given: 0.
uint64_t Offset(const char* method, PyObject* offset) {
  if (offset == nullptr) return 0;
  if (!PyIndex_Check(offset)) {
    throw py::type_error(std::string(method) + ": offset must be an int, not " +
                         Py_TYPE(offset)->tp_name);
  }
  py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(offset));
  if (!index) throw py::error_already_set();
  const unsigned long long value = PyLong_AsUnsignedLongLong(index.ptr());
  if (value == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error(std::string(method) + ": offset must be a non-negative int below 2**64");
  }
  return value;
}

// Runs `call(client)` for the method's self and returns None, or null with
// the Python error set (what pybind11 does at its own boundary).
template <typename Fn>
PyObject* Invoke(PyObject* self, Fn call) {
  try {
    call(py::cast<PyClient&>(py::handle(self)));
    Py_RETURN_NONE;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

constexpr Params kPush{"push", {"table", "grads", "offset"}, 3, 2};
constexpr Params kPull{"pull", {"table", "out", "offset"}, 3, 2};
constexpr Params kPushPull{"push_pull", {"table", "grads", "out", "offset"}, 4, 3};

// push(table, grads, offset=0) and pull(table, out, offset=0).
template <const Params& kParams,
          void (PyClient::*kMethod)(const std::string&, py::handle, uint64_t)>
PyObject* OneArray(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* v[kMaxParams];
  if (!ParseArgs(kParams, args, nargs, kwnames, v)) return nullptr;
  return Invoke(self, [&](PyClient& c) {
    (c.*kMethod)(TableName(kParams.method, v[0]), v[1], Offset(kParams.method, v[2]));
  });
}

PyObject* PushPull(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* v[kMaxParams];
  if (!ParseArgs(kPushPull, args, nargs, kwnames, v)) return nullptr;
  return Invoke(self, [&](PyClient& c) {
    c.PushPull(TableName(kPushPull.method, v[0]), v[1], v[2], Offset(kPushPull.method, v[3]));
  });
}

template <typename Fn>
PyCFunction AsCFunction(Fn* fn) {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fn));
}

// Static: a method descriptor points at its PyMethodDef for ever.
PyMethodDef g_methods[] = {
    {"push", AsCFunction(&OneArray<kPush, &PyClient::Push>), METH_FASTCALL | METH_KEYWORDS,
     "push($self, /, table, grads, offset=0)\n--\n\n"
     "Sends gradients for keys [offset, offset + grads.size), read in place."},
    {"pull", AsCFunction(&OneArray<kPull, &PyClient::Pull>), METH_FASTCALL | METH_KEYWORDS,
     "pull($self, /, table, out, offset=0)\n--\n\n"
     "Fills `out` (float32, C-contiguous, written in place) with keys "
     "[offset, offset + out.size)."},
    {"push_pull", AsCFunction(&PushPull), METH_FASTCALL | METH_KEYWORDS,
     "push_pull($self, /, table, grads, out, offset=0)\n--\n\n"
     "Push, then `out` receives the parameters after it was applied; one round trip."},
};

}  // namespace

void DefineFastCalls(py::class_<PyClient>& cls) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  for (PyMethodDef& def : g_methods) {
    py::object descr = py::reinterpret_steal<py::object>(PyDescr_NewMethod(type, &def));
    if (!descr) throw py::error_already_set();
    cls.attr(def.ml_name) = descr;
  }
}

}  // namespace python
}  // namespace relaxps
