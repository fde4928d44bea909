#include "py_client.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "arrays.h"
#include "errors.h"

namespace py = pybind11;

namespace relaxps {
namespace python {
namespace {

using Clock = std::chrono::steady_clock;

// How often a wait wakes up for Python's signal handlers.
constexpr auto kSignalCheck = std::chrono::milliseconds(100);

std::string Context(const char* op, const std::string& table) {
  return std::string(op) + " of table '" + table + "'";
}

// Waits for `f` with the GIL released, running Python's signal handlers
// every kSignalCheck (a handler that raises ends the wait with its
// exception). False if `timeout_s` passed first.
bool WaitReady(const std::shared_future<Status>& f, std::optional<double> timeout_s) {
  const auto deadline =
      timeout_s ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(*timeout_s))
                : Clock::time_point::max();
  for (;;) {
    bool ready;
    {
      py::gil_scoped_release nogil;
      const auto slice = std::min<Clock::duration>(kSignalCheck, deadline - Clock::now());
      ready = f.wait_for(std::max<Clock::duration>(slice, Clock::duration::zero())) ==
              std::future_status::ready;
    }
    Graves().Drain();
    if (ready) return true;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    if (Clock::now() >= deadline) return false;
  }
}

// The completion of one blocking call: set by the request's callback (on
// whichever thread completes it), read by the waiting thread.
struct SyncCall {
  std::atomic<bool> done{false};
  Status status;  // Written before `done` is set.
  std::mutex mu;  // Orders the callback's notify with a waiter that sleeps.
  std::condition_variable cv;
};

// A SyncCall for the calling thread: its own from the last call when nothing
// else holds it (the last call's callback ran and let go of it), a new one
// when a call that was interrupted (KeyboardInterrupt) still has a callback
// to come. Saves an allocation per call.
std::shared_ptr<SyncCall> NewSyncCall() {
  thread_local std::shared_ptr<SyncCall> last;
  if (last != nullptr && last.use_count() == 1) {
    // The callback's last access happened before it let go (the release in
    // shared_ptr's count), and nobody else can take a reference.
    std::atomic_thread_fence(std::memory_order_acquire);
    last->done.store(false, std::memory_order_relaxed);
    last->status = Status();
  } else {
    last = std::make_shared<SyncCall>();
  }
  return last;
}

Client::Callback Completer(std::shared_ptr<SyncCall> call) {
  return [call = std::move(call)](const Status& s) {
    call->status = s;
    std::lock_guard<std::mutex> l(call->mu);
    call->done.store(true, std::memory_order_release);
    call->cv.notify_all();
  };
}

// A blocking call's wait: the calling thread (GIL released) drives the
// client (Client::Drive), so the reply is read and the call completed here,
// without waking a second thread (most of a small request's latency on a
// busy machine). Where this thread cannot drive (another one does, or fault
// injection is on), sleeps until the callback runs. Runs Python's signal
// handlers every kSignalCheck (a handler that raises ends the wait with its
// exception; the request goes on). Raises the call's error.
void WaitBlocking(Client* client, SyncCall* call, const char* op, const std::string& table) {
  const auto ready = [call] { return call->done.load(std::memory_order_acquire); };
  for (;;) {
    bool done;
    {
      py::gil_scoped_release nogil;
      const auto start = Clock::now();
      done = client->Drive(ready, static_cast<int>(kSignalCheck.count()));
      if (!done) {
        // Drive() gave up at once (cannot drive) or after kSignalCheck.
        std::unique_lock<std::mutex> l(call->mu);
        done = call->cv.wait_until(l, start + kSignalCheck, ready);
      }
    }
    Graves().Drain();
    if (done) break;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  if (!call->status.ok()) ThrowStatus(call->status, Context(op, table));
}

// The starts of the data operations, shared by the blocking calls and the
// *_async ones: each takes the caller's arrays (arrays.h; raises for a bad
// one) and starts the request with `done`.
auto PushStart(const std::string& table, py::handle grads, uint64_t offset) {
  return [&table, grads, offset](Client* c, Client::Callback done) {
    c->Push(table, offset, FloatsOf(grads, false, {"push", "grads"}), std::move(done));
  };
}
auto PullStart(const std::string& table, py::handle out, uint64_t offset) {
  return [&table, out, offset](Client* c, Client::Callback done) {
    c->Pull(table, offset, FloatsOf(out, true, {"pull", "out"}), std::move(done));
  };
}
auto PushPullStart(const std::string& table, py::handle grads, py::handle out,
                   uint64_t offset) {
  return [&table, grads, out, offset](Client* c, Client::Callback done) {
    FloatBuffer g = FloatsOf(grads, false, {"push_pull", "grads"});
    FloatBuffer o = FloatsOf(out, true, {"push_pull", "out"});
    c->PushPull(table, offset, std::move(g), std::move(o), std::move(done));
  };
}
auto PullRowsStart(const std::string& table, py::handle ids, py::handle out) {
  return [&table, ids, out](Client* c, Client::Callback done) {
    KeyBuffer k = KeysOf(ids, {"pull_rows", "ids"});
    FloatBuffer o = FloatsOf(out, true, {"pull_rows", "out"});
    c->PullRows(table, std::move(k), std::move(o), std::move(done));
  };
}
auto PushRowsStart(const std::string& table, py::handle ids, py::handle grads) {
  return [&table, ids, grads](Client* c, Client::Callback done) {
    KeyBuffer k = KeysOf(ids, {"push_rows", "ids"});
    FloatBuffer g = FloatsOf(grads, false, {"push_rows", "grads"});
    c->PushRows(table, std::move(k), std::move(g), std::move(done));
  };
}

}  // namespace

bool Request::Wait(std::optional<double> timeout_s) {
  if (timeout_s && *timeout_s < 0) throw py::value_error("timeout must be >= 0");
  if (!WaitReady(future_, timeout_s)) return false;
  Check(future_.get(), context_);
  return true;
}

bool Request::done() const {
  return future_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

PyClient::PyClient(ClientOptions options) {
  std::shared_ptr<std::atomic<bool>> done = job_done_;
  options.on_job_done = [done] { done->store(true); };
  const std::string endpoint = options.coordinator;
  StatusOr<std::unique_ptr<Client>> c = [&] {
    py::gil_scoped_release nogil;
    return Client::Connect(options);
  }();
  if (!c.ok()) ThrowStatus(c.status(), "cannot join the job at " + endpoint);
  client_ = std::move(*c);
}

PyClient::~PyClient() {
  if (client_ == nullptr) return;
  if (_Py_IsFinalizing()) {  // Other threads may be gone: keep the GIL.
    client_.reset();
    return;
  }
  {
    py::gil_scoped_release nogil;
    client_.reset();
  }
  Graves().Drain();
}

void PyClient::Close() {
  if (client_ == nullptr) return;
  std::shared_ptr<Client> c = std::move(client_);
  {
    py::gil_scoped_release nogil;
    c.reset();
  }
  Graves().Drain();
}

std::shared_ptr<Client> PyClient::client(const char* op) {
  Graves().Drain();
  if (client_ == nullptr) ThrowStatus(AbortedError("the client is closed"), op);
  return client_;
}

void PyClient::CreateTable(const TableArgs& args) {
  std::shared_ptr<Client> c = client("create_table");
  const TableOptions options = MakeTableOptions(args);
  Status s;
  {
    py::gil_scoped_release nogil;
    s = c->CreateTable(options);
  }
  Check(s, "create_table '" + args.name + "'");
}

py::dict PyClient::GetTable(const std::string& name) {
  std::shared_ptr<Client> c = client("get_table");
  StatusOr<TableInfo> info = [&] {
    py::gil_scoped_release nogil;
    return c->GetTable(name);
  }();
  if (!info.ok()) ThrowStatus(info.status(), "get_table '" + name + "'");
  return TableDict(info->options);
}

py::list PyClient::ListTables() {
  std::shared_ptr<Client> c = client("list_tables");
  StatusOr<std::vector<TableInfo>> infos = [&] {
    py::gil_scoped_release nogil;
    return c->ListTables();
  }();
  if (!infos.ok()) ThrowStatus(infos.status(), "list_tables");
  py::list out;
  for (const TableInfo& t : *infos) out.append(TableDict(t.options));
  return out;
}

void PyClient::SetLearningRate(const std::string& table, float lr) {
  std::shared_ptr<Client> c = client("set_learning_rate");
  Status s;
  {
    py::gil_scoped_release nogil;
    s = c->SetLearningRate(table, lr);
  }
  Check(s, Context("set_learning_rate", table));
}

template <typename StartFn>
void PyClient::Blocking(const char* op, const std::string& table, StartFn start) {
  std::shared_ptr<Client> c = client(op);
  std::shared_ptr<SyncCall> call = NewSyncCall();
  start(c.get(), Completer(call));
  WaitBlocking(c.get(), call.get(), op, table);
}

template <typename StartFn>
std::unique_ptr<Request> PyClient::Async(const char* op, const std::string& table,
                                         StartFn start) {
  std::shared_ptr<Client> c = client(op);
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> future = promise->get_future();
  start(c.get(), [promise](const Status& s) { promise->set_value(s); });
  return std::make_unique<Request>(std::move(future), Context(op, table));
}

void PyClient::Push(const std::string& table, py::handle grads, uint64_t offset) {
  Blocking("push", table, PushStart(table, grads, offset));
}
void PyClient::Pull(const std::string& table, py::handle out, uint64_t offset) {
  Blocking("pull", table, PullStart(table, out, offset));
}
void PyClient::PushPull(const std::string& table, py::handle grads, py::handle out,
                        uint64_t offset) {
  Blocking("push_pull", table, PushPullStart(table, grads, out, offset));
}
void PyClient::PullRows(const std::string& table, py::handle ids, py::handle out) {
  Blocking("pull_rows", table, PullRowsStart(table, ids, out));
}
void PyClient::PushRows(const std::string& table, py::handle ids, py::handle grads) {
  Blocking("push_rows", table, PushRowsStart(table, ids, grads));
}

std::unique_ptr<Request> PyClient::PushAsync(const std::string& table, py::handle grads,
                                             uint64_t offset) {
  return Async("push", table, PushStart(table, grads, offset));
}
std::unique_ptr<Request> PyClient::PullAsync(const std::string& table, py::handle out,
                                             uint64_t offset) {
  return Async("pull", table, PullStart(table, out, offset));
}
std::unique_ptr<Request> PyClient::PushPullAsync(const std::string& table, py::handle grads,
                                                 py::handle out, uint64_t offset) {
  return Async("push_pull", table, PushPullStart(table, grads, out, offset));
}
std::unique_ptr<Request> PyClient::PullRowsAsync(const std::string& table, py::handle ids,
                                                 py::handle out) {
  return Async("pull_rows", table, PullRowsStart(table, ids, out));
}
std::unique_ptr<Request> PyClient::PushRowsAsync(const std::string& table, py::handle ids,
                                                 py::handle grads) {
  return Async("push_rows", table, PushRowsStart(table, ids, grads));
}

int64_t PyClient::Clock() {
  std::shared_ptr<Client> c = client("clock");
  Status s;
  {
    py::gil_scoped_release nogil;
    s = c->Clock();
  }
  Check(s, "clock of worker " + std::to_string(c->worker_id()));
  return c->clock();
}

void PyClient::Barrier() {
  std::shared_ptr<Client> c = client("barrier");
  Status s;
  {
    py::gil_scoped_release nogil;
    s = c->Barrier();
  }
  Check(s, "barrier");
}

void PyClient::ReportFinished(py::handle error, int timeout_ms) {
  std::shared_ptr<Client> c = client("report_finished");
  Status outcome;
  if (!error.is_none()) {
    outcome = InternalError(py::str(error));
    if (py::hasattr(error, "code") && py::hasattr(error, "message")) {
      const std::string code = py::str(error.attr("code"));
      for (int i = 1; i <= static_cast<int>(StatusCode::kMaxCode); ++i) {
        if (code == StatusCodeName(static_cast<StatusCode>(i))) {
          outcome = Status(static_cast<StatusCode>(i), py::str(error.attr("message")));
        }
      }
    }
  }
  Status s;
  {
    py::gil_scoped_release nogil;
    s = c->ReportFinished(outcome, timeout_ms);
  }
  Check(s, "report_finished");
}

int PyClient::worker_id() { return client("worker_id")->worker_id(); }
int64_t PyClient::current_clock() { return client("current_clock")->clock(); }
int64_t PyClient::last_params_clock() { return client("last_params_clock")->last_params_clock(); }
bool PyClient::coordinator_healthy() {
  return client("coordinator_healthy")->coordinator_healthy();
}

py::dict PyClient::job() {
  std::shared_ptr<Client> c = client("job");
  const JobInfo& j = c->job();
  py::dict d;
  d["worker_id"] = j.worker_id;
  d["consistency"] = c->consistency_policy().Name();
  d["staleness"] = j.staleness;
  d["recovery"] = j.recovery;
  d["num_servers"] = j.num_servers;
  d["expected_workers"] = j.expected_workers;
  // What a trainer adapts to (as apps/trainer/ps_params.cc does).
  d["staleness_bound"] = c->consistency_policy().staleness_bound();
  d["serves_cached_reads"] = c->consistency_policy().ServesCachedReads();
  const RecoveryNeeds& needs = c->recovery_policy().needs();
  py::dict n;
  n["min_servers"] = needs.min_servers;
  n["experiment_servers"] = needs.experiment_servers;
  n["min_replicas"] = needs.min_replicas;
  n["store_kind"] = needs.store_kind;
  n["restart"] = RestartRuleName(needs.restart);
  n["restart_flags"] = needs.restart_flags;
  n["tolerates_server_loss"] = needs.tolerates_server_loss;
  n["tolerates_chain_loss"] = needs.tolerates_chain_loss;
  n["tolerates_pause"] = needs.tolerates_pause;
  n["rolls_back"] = needs.rolls_back;
  d["recovery_needs"] = n;
  // Deprecated (one release): the booleans job() reported before
  // recovery_needs, derived from it. A request whose server died waits for
  // it when the server comes back by itself (not re-seeded by the workers);
  // the workers train on their own copies when a whole chain may be lost and
  // no checkpoint restores it.
  d["resends_across_restarts"] =
      needs.restart != RestartRule::kNever && needs.restart != RestartRule::kSameIdReseeded;
  d["trains_through_server_loss"] =
      needs.tolerates_chain_loss && needs.restart != RestartRule::kSameIdFromCheckpoint;
  return d;
}

py::dict PyClient::stats() {
  const ClientStats s = client("stats")->stats();
  py::dict d;
  d["bytes_sent"] = s.bytes_sent;
  d["bytes_received"] = s.bytes_received;
  d["requests"] = s.requests;
  d["errors"] = s.errors;
  d["cache_hits"] = s.cache_hits;
  d["cache_misses"] = s.cache_misses;
  d["local_steps"] = s.local_steps;
  d["acked_updates"] = s.acked_updates;
  d["incarnation"] = s.incarnation;
  py::dict counters;
  for (const auto& [name, value] : s.recovery_counters) counters[name.c_str()] = value;
  d["recovery_counters"] = counters;
  return d;
}

}  // namespace python
}  // namespace relaxps
