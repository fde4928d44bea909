// PyClient: relaxps.Client, a relaxps::Client driven from Python; Request:
// an operation in flight (the *_async methods).
//
// Every blocking call releases the GIL while it waits, so other Python
// threads run; waits on a request wake every 100 ms to run Python's signal
// handlers (Ctrl-C raises KeyboardInterrupt; the request goes on, and the
// arrays it was given stay alive until the client drops them, see arrays.h).
// Connect, create_table, clock, barrier and set_learning_rate block with the
// GIL released and without that check.
//
// Arrays are used in place (arrays.h): push* read the caller's memory,
// pull* write into it. A synchronous call returns only once the client is
// done with the request: the caller may then reuse its arrays. An *_async
// call's arrays must be left alone until its Request completed.
//
// Thread-safety: like relaxps::Client, a PyClient may be used from several
// Python threads. Every method REQUIRES the GIL (pybind11 holds it).
#ifndef RELAXPS_PYTHON_PY_CLIENT_H_
#define RELAXPS_PYTHON_PY_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include <pybind11/pybind11.h>

#include "options.h"
#include "relaxps/client.h"

namespace relaxps {
namespace python {

class Request {
 public:
  Request(std::future<Status> future, std::string context)
      : future_(future.share()), context_(std::move(context)) {}

  // Waits up to `timeout_s` (None: for ever). True once the request
  // completed OK, False if it is still running at the timeout; raises its
  // error otherwise.
  bool Wait(std::optional<double> timeout_s);
  bool done() const;

 private:
  std::shared_future<Status> future_;
  const std::string context_;
};

class PyClient {
 public:
  // Connects (Client::Connect) with the GIL released; raises its error.
  explicit PyClient(ClientOptions options);
  ~PyClient();
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  // Deregisters and stops the client's threads; pending requests fail with
  // Aborted. Idempotent; later calls raise relaxps.Aborted. A call waiting
  // in another thread keeps the client alive until it returns (at its
  // request's deadline at the latest); the client stops then.
  void Close();
  bool closed() const { return client_ == nullptr; }

  void CreateTable(const TableArgs& args);
  pybind11::dict GetTable(const std::string& name);
  pybind11::list ListTables();
  void SetLearningRate(const std::string& table, float lr);

  // Blocking data operations (ops: "push", "pull", "push_pull",
  // "pull_rows", "push_rows").
  void Push(const std::string& table, pybind11::handle grads, uint64_t offset);
  void Pull(const std::string& table, pybind11::handle out, uint64_t offset);
  void PushPull(const std::string& table, pybind11::handle grads, pybind11::handle out,
                uint64_t offset);
  void PullRows(const std::string& table, pybind11::handle ids, pybind11::handle out);
  void PushRows(const std::string& table, pybind11::handle ids, pybind11::handle grads);
  // The same, returning at once.
  std::unique_ptr<Request> PushAsync(const std::string& table, pybind11::handle grads,
                                     uint64_t offset);
  std::unique_ptr<Request> PullAsync(const std::string& table, pybind11::handle out,
                                     uint64_t offset);
  std::unique_ptr<Request> PushPullAsync(const std::string& table, pybind11::handle grads,
                                         pybind11::handle out, uint64_t offset);
  std::unique_ptr<Request> PullRowsAsync(const std::string& table, pybind11::handle ids,
                                         pybind11::handle out);
  std::unique_ptr<Request> PushRowsAsync(const std::string& table, pybind11::handle ids,
                                         pybind11::handle grads);

  // Advances this worker's clock; returns the new clock.
  int64_t Clock();
  void Barrier();
  // Client::ReportFinished: tells the coordinator this worker's run ended
  // (`error` None: cleanly; a relaxps.Error: with its code and message; any
  // other object: Internal with its str()), so a lost goodbye cannot turn a
  // clean job into a failure. Raises the report's own error.
  void ReportFinished(pybind11::handle error, int timeout_ms);

  int worker_id();
  int64_t current_clock();
  int64_t last_params_clock();
  bool coordinator_healthy();
  // True once the coordinator reported the job over (relaxps-ctl shutdown):
  // finish the step and leave.
  bool job_done() const { return job_done_->load(); }
  pybind11::dict job();
  pybind11::dict stats();

 private:
  // A blocking data operation: `start(client, done)` takes the arrays and
  // starts the request; waits for `done` reading the replies on this thread
  // (Client::Drive) where it can, without a future or a Request; raises the
  // request's error as "<op> of table '<table>': ...".
  template <typename StartFn>
  void Blocking(const char* op, const std::string& table, StartFn start);
  // The same, returning a Request at once.
  template <typename StartFn>
  std::unique_ptr<Request> Async(const char* op, const std::string& table, StartFn start);

  // The client, or relaxps.Aborted if closed. Each call holds its own
  // reference, so close() from another thread cannot free the client under
  // a call that is waiting.
  std::shared_ptr<Client> client(const char* op);

  std::shared_ptr<Client> client_;  // Guarded by the GIL.
  // Set by ClientOptions::on_job_done on the heartbeat thread (no GIL).
  std::shared_ptr<std::atomic<bool>> job_done_ = std::make_shared<std::atomic<bool>>(false);
};

// Defines relaxps._relaxps.Client and Request in `m`.
void DefineClient(pybind11::module_& m);

}  // namespace python
}  // namespace relaxps

#endif  // RELAXPS_PYTHON_PY_CLIENT_H_
