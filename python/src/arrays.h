// Python arrays handed to the client without a copy.
//
// A float32 numpy array, any object exposing the buffer protocol, or a CPU
// torch tensor (through tensor.detach().numpy(), which shares its memory)
// becomes a relaxps::FloatBuffer (ids: a KeyBuffer) that points into the
// caller's memory: push reads the array itself, pull writes into it.
//
// Fast path: a numpy.ndarray (the exact type) of native float32, C-contiguous
// (and writeable, for `out`) is taken by reading the array's own header
// (pybind11's numpy proxies: data, shape, flags, dtype) and holding a
// reference to it; numpy's buffer export (a format string built per call,
// a Py_buffer allocated) was most of the module's own cost on a 4 KiB
// request (docs/benchmarks.md, issue 41). Everything else, and every array
// the fast path declines, goes through the buffer protocol, which also
// gives the errors (wrong dtype, non-contiguous, read-only).
//
// Lifetime: the Buffer holds the object's Py_buffer (fast path: a reference
// to the array) until the client drops its last reference to the Buffer.
// That may happen on a client or ZeroMQ thread that does not hold the GIL (a
// zero-copy send's free callback), so the release never touches Python: it
// moves the Py_buffer or reference into a graveyard (a mutex and a vector),
// and the graveyard is emptied, under the GIL, by the next call of the
// module (every Client method and Request.wait) or by
// relaxps._relaxps.release_buffers(). Memory handed to the client thus stays
// valid as long as the client may read or write it, even past an exception
// or a KeyboardInterrupt.
//
// Thread-safety: Bury() is safe from any thread without the GIL; everything
// else REQUIRES the GIL.
#ifndef RELAXPS_PYTHON_ARRAYS_H_
#define RELAXPS_PYTHON_ARRAYS_H_

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include <pybind11/pybind11.h>

#include "relaxps/buffer.h"

namespace relaxps {
namespace python {

class Graveyard {
 public:
  // Any thread, GIL or not: keeps `view` (PyBuffer_Release and delete) or
  // the reference `object` (Py_DECREF) for release by Drain().
  void Bury(Py_buffer* view);
  void Bury(PyObject* object);
  // REQUIRES the GIL: releases everything buried. Takes no lock when
  // nothing is (the common case on every call of the module).
  void Drain();
  // Views and references not yet released (for tests).
  size_t pending();

 private:
  struct Grave {
    Py_buffer* view;   // Or null, then:
    PyObject* object;  // An owned reference.
  };
  std::mutex mu_;
  std::vector<Grave> buried_;     // Guarded by mu_.
  std::atomic<size_t> count_{0};  // buried_.size(), read without mu_.
  // What Drain() releases, swapped with buried_: both keep their capacity,
  // so burying and draining allocate nothing once warm. Guarded by the GIL.
  std::vector<Grave> draining_;
};

// The module's graveyard (one per process: buffers may outlive the client
// that sent them). Never destroyed, so a late release cannot find it gone.
Graveyard& Graves();

// What an argument is, for error messages: "grads", "out", "ids".
struct ArrayArg {
  const char* op;    // "push", "pull", ...
  const char* name;  // "grads", "out", "ids"
};

// REQUIRES the GIL. The float32 C-contiguous memory of `obj` as a
// FloatBuffer sharing it (writable: the client writes into it). Raises
// TypeError for an object without the buffer protocol (or a non-CPU tensor)
// or of another dtype, ValueError for non-contiguous or read-only memory.
FloatBuffer FloatsOf(pybind11::handle obj, bool writable, const ArrayArg& arg);
// REQUIRES the GIL. uint64 or int64 ids (int64 must be >= 0), C-contiguous.
KeyBuffer KeysOf(pybind11::handle obj, const ArrayArg& arg);

}  // namespace python
}  // namespace relaxps

#endif  // RELAXPS_PYTHON_ARRAYS_H_
