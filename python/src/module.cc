// relaxps._relaxps: the Python bindings of librelaxps_client.so. The
// package relaxps (python/relaxps/__init__.py) re-exports them; see
// py_client.h for the blocking and GIL rules, arrays.h for zero-copy arrays
// and their lifetime, errors.h for the exceptions.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "arrays.h"
#include "errors.h"
#include "fast_calls.h"
#include "options.h"
#include "py_client.h"

namespace py = pybind11;

namespace relaxps {
namespace python {

void DefineClient(py::module_& m) {
  py::class_<Request>(m, "Request",
                      "An operation in flight (Client.*_async). Leave its arrays alone until "
                      "it completed.")
      .def("wait", &Request::Wait, py::arg("timeout") = py::none(),
           "Waits up to `timeout` seconds (None: until done). True once done OK, False if "
           "still running; raises the request's relaxps.Error.")
      .def("done", &Request::done, "True once the request completed (OK or not).");

  const ClientOptions d;  // The defaults of the C++ ClientOptions.
  py::class_<PyClient> client(m, "Client",
                              "A worker (or observer) of a relaxps job: relaxps::Client from "
                              "Python.");
  // push, pull and push_pull (fast_calls.h).
  DefineFastCalls(client);
  client
      .def(py::init([](const std::string& coordinator, const std::string& role, int worker_id,
                       int request_timeout_ms, int heartbeat_ms, int recovery_timeout_ms,
                       const std::string& wire_dtype, bool ssp_cache, int local_after_ms,
                       int disconnect_probe_ms, int barrier_timeout_ms,
                       int coordinator_timeout_ms, const std::string& keys_dir,
                       const std::string& curve_name, int64_t max_message_bytes,
                       int64_t update_log_bytes, const std::string& events_file,
                       const std::string& source_address) {
             ClientOptions o;
             o.coordinator = coordinator;
             o.role = role;
             o.worker_id = worker_id;
             o.request_timeout_ms = request_timeout_ms;
             o.heartbeat_ms = heartbeat_ms;
             o.recovery_timeout_ms = recovery_timeout_ms;
             o.wire_dtype = wire_dtype;
             o.ssp_cache = ssp_cache;
             o.local_after_ms = local_after_ms;
             o.disconnect_probe_ms = disconnect_probe_ms;
             o.barrier_timeout_ms = barrier_timeout_ms;
             o.coordinator_timeout_ms = coordinator_timeout_ms;
             o.curve.keys_dir = keys_dir;
             o.curve.name = curve_name;
             o.max_message_bytes = max_message_bytes;
             o.update_log_bytes = update_log_bytes;
             o.source_address = source_address;
             if (!events_file.empty()) {
               EventLogOptions events;
               events.path = events_file;  // Named worker-<id> at registration.
               StatusOr<std::shared_ptr<EventLog>> log = EventLog::Open(events);
               Check(log.status(), "events_file");
               o.events = *log;
             }
             return std::make_unique<PyClient>(std::move(o));
           }),
           py::arg("coordinator"), py::kw_only(), py::arg("role") = d.role,
           py::arg("worker_id") = d.worker_id,
           py::arg("request_timeout_ms") = d.request_timeout_ms,
           py::arg("heartbeat_ms") = d.heartbeat_ms,
           py::arg("recovery_timeout_ms") = d.recovery_timeout_ms,
           py::arg("wire_dtype") = d.wire_dtype, py::arg("ssp_cache") = d.ssp_cache,
           py::arg("local_after_ms") = d.local_after_ms,
           py::arg("disconnect_probe_ms") = d.disconnect_probe_ms,
           py::arg("barrier_timeout_ms") = d.barrier_timeout_ms,
           py::arg("coordinator_timeout_ms") = d.coordinator_timeout_ms,
           py::arg("keys_dir") = d.curve.keys_dir, py::arg("curve_name") = d.curve.name,
           py::arg("max_message_bytes") = d.max_message_bytes,
           py::arg("update_log_bytes") = d.update_log_bytes, py::arg("events_file") = "",
           py::arg("source_address") = d.source_address,
           "Registers with the coordinator (see ClientOptions in relaxps/client.h for each "
           "option). keys_dir/curve_name: --security=curve (curve_name e.g. 'worker-0'). "
           "events_file: the client's structured events (docs/events.md: registration, a "
           "server lost, a request parked, a failover acknowledged...) are appended there as "
           "JSON Lines; '' writes none.")
      .def("close", &PyClient::Close, "Leaves the job; pending requests fail with Aborted.")
      .def_property_readonly("closed", &PyClient::closed)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& c, py::args) { c.Close(); })
      .def("create_table",
           [](PyClient& c, const std::string& name, uint64_t size, bool sparse,
              uint32_t row_width, const std::string& optimizer, float lr, float momentum,
              float beta1, float beta2, float eps, py::object init, uint64_t init_seed,
              const std::string& lr_schedule) {
             TableArgs a;
             a.name = name;
             a.size = size;
             a.sparse = sparse;
             a.row_width = row_width;
             a.optimizer.name = optimizer;
             a.optimizer.lr = lr;
             a.optimizer.momentum = momentum;
             a.optimizer.beta1 = beta1;
             a.optimizer.beta2 = beta2;
             a.optimizer.eps = eps;
             a.init = std::move(init);
             a.init_seed = init_seed;
             a.lr_schedule = lr_schedule;
             c.CreateTable(a);
           },
           py::arg("name"), py::arg("size") = 0, py::kw_only(), py::arg("sparse") = false,
           py::arg("row_width") = 0, py::arg("optimizer") = OptimizerOptions().name,
           py::arg("lr") = OptimizerOptions().lr, py::arg("momentum") = OptimizerOptions().momentum,
           py::arg("beta1") = OptimizerOptions().beta1, py::arg("beta2") = OptimizerOptions().beta2,
           py::arg("eps") = OptimizerOptions().eps, py::arg("init") = py::none(),
           py::arg("init_seed") = 0, py::arg("lr_schedule") = "constant",
           "Creates a table (or succeeds if an identical one exists, so every worker may call "
           "it). Dense: `size` floats; sparse=True: rows of `row_width` floats by uint64 id. "
           "optimizer: sgd, momentum, adam or adagrad. init: None (zeros), 'zeros', "
           "(kind, a, b) for the whole table, or [(begin, end, kind, a, b), ...]; kind zeros, "
           "constant (a), uniform U(a, b) or normal (mean a, stddev b), seeded by init_seed. "
           "lr_schedule: constant, step:every=N,gamma=G, cosine:clocks=N[,min=M] "
           "(each with ,warmup=W).")
      .def("get_table", &PyClient::GetTable, py::arg("name"))
      .def("list_tables", &PyClient::ListTables)
      .def("set_learning_rate", &PyClient::SetLearningRate, py::arg("table"), py::arg("lr"),
           "Sets the table's rate from this worker's current clock on, on every shard.")
      .def("pull_rows", &PyClient::PullRows, py::arg("table"), py::arg("ids"), py::arg("out"),
           "Sparse: fills `out` (len(ids) * row_width floats) with the rows `ids` "
           "(uint64 or non-negative int64).")
      .def("push_rows", &PyClient::PushRows, py::arg("table"), py::arg("ids"), py::arg("grads"))
      .def("push_async", &PyClient::PushAsync, py::arg("table"), py::arg("grads"),
           py::arg("offset") = 0)
      .def("pull_async", &PyClient::PullAsync, py::arg("table"), py::arg("out"),
           py::arg("offset") = 0)
      .def("push_pull_async", &PyClient::PushPullAsync, py::arg("table"), py::arg("grads"),
           py::arg("out"), py::arg("offset") = 0)
      .def("pull_rows_async", &PyClient::PullRowsAsync, py::arg("table"), py::arg("ids"),
           py::arg("out"))
      .def("push_rows_async", &PyClient::PushRowsAsync, py::arg("table"), py::arg("ids"),
           py::arg("grads"))
      .def("clock", &PyClient::Clock, "Ends this iteration: advances the worker's clock; "
                                      "returns the new clock.")
      .def("barrier", &PyClient::Barrier, "Waits until every live worker reached it.")
      .def("report_finished", &PyClient::ReportFinished, py::arg("error") = py::none(),
           py::arg("timeout_ms") = 5000,
           "Tells the coordinator this worker's run ended: cleanly (error=None) or with "
           "`error` (a relaxps.Error, or any exception: Internal). Call it before leaving: "
           "the job then ends as reported even if the goodbye of close() is lost. Raises "
           "relaxps.Error if the coordinator did not take the report within timeout_ms.")
      .def_property_readonly("worker_id", &PyClient::worker_id)
      .def_property_readonly("current_clock", &PyClient::current_clock)
      .def_property_readonly("last_params_clock", &PyClient::last_params_clock,
                             "The clock the last pulled parameters reflect (-1 before any).")
      .def_property_readonly("coordinator_healthy", &PyClient::coordinator_healthy)
      .def_property_readonly("job_done", &PyClient::job_done,
                             "True once the coordinator ended the job (relaxps-ctl shutdown).")
      .def_property_readonly(
          "job", &PyClient::job,
          "What the coordinator told this client at registration, as a dict: worker_id, "
          "consistency, staleness, recovery (the recovery policy's name), num_servers, "
          "expected_workers, staleness_bound, serves_cached_reads, and recovery_needs (the "
          "policy's declared needs: min_servers, experiment_servers, min_replicas, store_kind, "
          "restart, restart_flags, tolerates_server_loss, tolerates_chain_loss, "
          "tolerates_pause, rolls_back). Deprecated, kept for one release and computed from "
          "recovery_needs: resends_across_restarts (a request whose server died waits for it "
          "to come back: restart is neither 'never' nor 'same-id-reseeded') and "
          "trains_through_server_loss (workers train on their own copies while every replica "
          "of a range is lost: tolerates_chain_loss without a checkpoint restart).")
      .def("stats", &PyClient::stats,
           "Counters since connecting, as a dict (ClientStats in relaxps/client.h): bytes, "
           "requests, errors, cache hits, local_steps, acked_updates (push parts a server "
           "acknowledged), incarnation, and recovery_counters (the recovery policy's, by "
           "name).");
}

PYBIND11_MODULE(_relaxps, m) {
  m.doc() = "Bindings of the relaxps client library (librelaxps_client.so).";
  RegisterErrors(m);
  DefineClient(m);
  m.def("release_buffers", [] { Graves().Drain(); },
        "Releases the arrays the client no longer references (done by every call anyway).");
  m.def("pending_buffers", [] { return Graves().pending(); },
        "Arrays released by the client but not yet by Python (for tests).");
}

}  // namespace python
}  // namespace relaxps
