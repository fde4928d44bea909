#include "arrays.h"

#include <cstdint>
#include <cstring>
#include <string>

#include <pybind11/numpy.h>

namespace py = pybind11;

namespace relaxps {
namespace python {
namespace {

void Release(Py_buffer* view) {
  PyBuffer_Release(view);
  delete view;
}

std::string What(const ArrayArg& arg) { return std::string(arg.op) + ": " + arg.name; }

// The object whose buffer is taken: `obj` itself, or for a torch tensor
// tensor.detach().numpy(), an ndarray sharing the tensor's memory (and
// holding a reference to it).
py::object Exporter(py::handle obj, const ArrayArg& arg) {
  if (PyObject_CheckBuffer(obj.ptr())) return py::reinterpret_borrow<py::object>(obj);
  const std::string type = py::str(py::type::handle_of(obj).attr("__module__")).cast<std::string>() +
                           "." + py::type::handle_of(obj).attr("__name__").cast<std::string>();
  if (py::hasattr(obj, "detach") && py::hasattr(obj, "numpy") && py::hasattr(obj, "device")) {
    const std::string device = py::str(obj.attr("device").attr("type"));
    if (device != "cpu") {
      throw py::type_error(What(arg) + " is a tensor on '" + device +
                           "'; only CPU tensors can be sent without a copy (use .cpu())");
    }
    return obj.attr("detach")().attr("numpy")();
  }
  throw py::type_error(What(arg) +
                       " must be a numpy array, a CPU torch tensor or another object with the "
                       "buffer protocol, not " + type);
}

// The format without a native/little-endian byte-order prefix.
std::string PlainFormat(const Py_buffer& view) {
  std::string f = view.format == nullptr ? "B" : view.format;
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@')) f.erase(0, 1);
  return f;
}

// A new view of `obj`'s memory, checked for C-contiguity and writability;
// the caller checks the format.
Py_buffer* Acquire(py::handle obj, bool writable, const ArrayArg& arg) {
  py::object exporter = Exporter(obj, arg);
  auto* view = new Py_buffer;
  if (PyObject_GetBuffer(exporter.ptr(), view, PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
    delete view;
    throw py::error_already_set();
  }
  if (!PyBuffer_IsContiguous(view, 'C')) {
    Release(view);
    throw py::value_error(What(arg) +
                          " is not C-contiguous; pass a contiguous array (np.ascontiguousarray, "
                          "tensor.contiguous()) so that it can be used without a copy");
  }
  if (writable && view->readonly) {
    Release(view);
    throw py::value_error(What(arg) + " is read-only; the result is written into it");
  }
  return view;
}

std::string DtypeError(const ArrayArg& arg, const char* want, const Py_buffer& view) {
  return What(arg) + " must hold " + want + ", got format '" + PlainFormat(view) +
         "' with " + std::to_string(view.itemsize) + "-byte items";
}

}  // namespace

void Graveyard::Bury(Py_buffer* view) {
  std::lock_guard<std::mutex> l(mu_);
  buried_.push_back(Grave{view, nullptr});
  count_.store(buried_.size(), std::memory_order_release);
}

void Graveyard::Bury(PyObject* object) {
  std::lock_guard<std::mutex> l(mu_);
  buried_.push_back(Grave{nullptr, object});
  count_.store(buried_.size(), std::memory_order_release);
}

void Graveyard::Drain() {
  // A Bury() racing with this load is drained by the next call.
  if (count_.load(std::memory_order_acquire) == 0) return;
  if (!draining_.empty()) return;  // A release below re-entered (an object's __del__).
  {
    std::lock_guard<std::mutex> l(mu_);
    draining_.swap(buried_);
    count_.store(0, std::memory_order_release);
  }
  for (const Grave& g : draining_) {
    if (g.view != nullptr) {
      Release(g.view);
    } else {
      Py_DECREF(g.object);
    }
  }
  draining_.clear();
}

size_t Graveyard::pending() {
  std::lock_guard<std::mutex> l(mu_);
  return buried_.size();
}

Graveyard& Graves() {
  static Graveyard* graves = new Graveyard;  // Never destroyed (see the header).
  return *graves;
}

namespace {

// numpy's ndarray type once an ndarray was seen (numpy is then imported),
// or null: an object of another type never makes the module import numpy.
PyTypeObject* NdarrayType(py::handle obj) {
  static PyTypeObject* ndarray = nullptr;  // Guarded by the GIL.
  static bool unavailable = false;         // Guarded by the GIL.
  if (ndarray == nullptr && !unavailable &&
      std::strcmp(Py_TYPE(obj.ptr())->tp_name, "numpy.ndarray") == 0) {
    try {
      ndarray = py::detail::npy_api::get().PyArray_Type_;
    } catch (const py::error_already_set&) {  // numpy's C API not found: no fast path.
      unavailable = true;
    }
  }
  return ndarray;
}

// The fast path (see the header): `obj`'s float32 memory when it is an
// ndarray numpy would export as C-contiguous, native float32 and (if
// `writable`) writeable; false otherwise, and the buffer protocol decides.
bool FastFloats(py::handle obj, bool writable, float** data, size_t* n) {
  PyTypeObject* ndarray = NdarrayType(obj);
  if (ndarray == nullptr || Py_TYPE(obj.ptr()) != ndarray) return false;
  const py::detail::PyArray_Proxy* a = py::detail::array_proxy(obj.ptr());
  constexpr int kContiguous = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_;
  constexpr int kWriteable = py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  if ((a->flags & kContiguous) == 0 || (writable && (a->flags & kWriteable) == 0)) return false;
  const py::detail::PyArrayDescr_Proxy* d = py::detail::array_descriptor_proxy(a->descr);
  // '=' native; '<' is native too on a little-endian host.
  const bool native = d->byteorder == '=' || (d->byteorder == '<' && PY_LITTLE_ENDIAN);
  if (d->type_num != py::detail::npy_api::NPY_FLOAT_ || !native) return false;
  size_t count = 1;
  for (int i = 0; i < a->nd; ++i) count *= static_cast<size_t>(a->dimensions[i]);
  *data = reinterpret_cast<float*>(a->data);
  *n = count;
  return true;
}

}  // namespace

FloatBuffer FloatsOf(py::handle obj, bool writable, const ArrayArg& arg) {
  float* data;
  size_t count;
  if (FastFloats(obj, writable, &data, &count)) {
    PyObject* ref = obj.inc_ref().ptr();
    return FloatBuffer::Wrap(data, count, [ref] { Graves().Bury(ref); });
  }
  Py_buffer* view = Acquire(obj, writable, arg);
  if (PlainFormat(*view) != "f" || view->itemsize != 4) {
    const std::string why = DtypeError(arg, "float32", *view);
    Release(view);
    throw py::type_error(why);
  }
  const size_t n = static_cast<size_t>(view->len) / sizeof(float);
  return FloatBuffer::Wrap(static_cast<float*>(view->buf), n,
                           [view] { Graves().Bury(view); });
}

KeyBuffer KeysOf(py::handle obj, const ArrayArg& arg) {
  Py_buffer* view = Acquire(obj, false, arg);
  const std::string f = PlainFormat(*view);
  const bool is_signed = f == "q" || f == "l";
  if (!(is_signed || f == "Q" || f == "L") || view->itemsize != 8) {
    const std::string why = DtypeError(arg, "uint64 or int64 row ids", *view);
    Release(view);
    throw py::type_error(why);
  }
  const size_t n = static_cast<size_t>(view->len) / sizeof(uint64_t);
  if (is_signed) {
    const int64_t* ids = static_cast<const int64_t*>(view->buf);
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] < 0) {
        Release(view);
        throw py::value_error(What(arg) + "[" + std::to_string(i) + "] is " +
                              std::to_string(ids[i]) + "; row ids must be >= 0");
      }
    }
  }
  return KeyBuffer::Wrap(static_cast<uint64_t*>(view->buf), n, [view] { Graves().Bury(view); });
}

}  // namespace python
}  // namespace relaxps
