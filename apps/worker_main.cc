// relaxps-worker: trains a model on Fashion-MNIST, either alone (--local, the
// "no parameter server" baseline) or as one worker of a relaxps job
// (--coordinator=tcp://host:port).
//
// Exit status: 0 done (duration/epochs reached, or SIGTERM/SIGINT after the
// current step), 1 runtime error (data, diverged training, metrics file),
// 2 bad flags, an unavailable --device or a --coordinator whose host does not
// resolve, 3 the parameter server failed
// (Unavailable, DeadlineExceeded or Aborted). Errors are one line on stderr
// and an `error worker=... code=...` line on stdout.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "apps/internal/events_flags.h"
#include "apps/internal/main_util.h"
#include "apps/internal/metrics_flags.h"
#include "apps/internal/network_flags.h"
#include "common/buffer_pool.h"
#include "apps/trainer/mnist.h"
#include "apps/trainer/model.h"
#include "apps/trainer/param_source.h"
#include "apps/trainer/trainer.h"
#include "apps/worker_evaluator.h"
#include "kernels/device.h"
#include "kernels/optimizer.h"
#ifdef RELAXPS_TRAINER_WITH_CLIENT
#include "apps/trainer/ps_params.h"
#include "client/client.h"
#endif

// ---- Where parameters live ----
DEFINE_string(coordinator, "", "Coordinator endpoint (tcp://host:port) of the relaxps job, or every coordinator "
              "of a ZooKeeper-coordinated job, comma-separated");
DEFINE_bool(local, false, "Train without a parameter server (optimizer applied in-process)");
DEFINE_string(table, "model", "Name of the dense table holding the model (PS mode)");
DEFINE_bool(async_pipeline, true,
            "Async consistency: overlap each step's push-pull with the next step's "
            "computation (parameters one update older, communication hidden)");
DEFINE_string(wire_dtype, "fp32", "Payload encoding on the wire: fp32 or fp16 (PS mode)");
DEFINE_int32(request_timeout_ms, 10000, "Deadline of each parameter-server request");
DEFINE_string(security, "plain",
              "plain (no authentication: anyone who reaches an endpoint can read and change the "
              "model) or curve (CurveZMQ: only the job's keys, roles bound to keys)");
DEFINE_string(keys_dir, "", "--security=curve: the job's keys (relaxps-ctl keygen DIR)");
DEFINE_int32(coordinator_timeout_ms, 30000,
             "Fail (exit non-zero) after this long without an answer from the coordinator");
DEFINE_int32(recovery_timeout_ms, 120000,
             "Under a recovery policy that restarts lost servers (the coordinator's --recovery, "
             "e.g. checkpoint): how long a request whose server died waits for the restarted "
             "server before the worker gives up");
DEFINE_int64(replay_log_mb, 1024,
             "Under a recovery policy that replays this worker's acknowledged updates into a "
             "server restarted from a checkpoint (replay): the most MiB of updates kept; beyond "
             "it the oldest are dropped, and those no complete checkpoint holds are reported as "
             "lost when their server restarts. The default holds ~7 s of the cnn model's "
             "pushes at ~45 steps/s (3.2 MB each), more than the 2-5 s checkpoint intervals "
             "of run_local.sh and experiment.sh");

// ---- Model and optimizer ----
DEFINE_string(model, "cnn", "mlp (784-256-10), mlp-<w1>-<w2>... or cnn (the paper's)");
DEFINE_int32(batch, 32, "Mini-batch size per worker");
DEFINE_double(lr, 0.01, "Learning rate");
DEFINE_string(optimizer, "momentum", "sgd, momentum, adam or adagrad");
DEFINE_string(lr_schedule, "constant",
              "Learning rate by clock, applied by the servers (PS mode): constant, "
              "step:every=N,gamma=G or cosine:clocks=N[,min=M], each with an optional "
              ",warmup=W");
DEFINE_double(momentum, 0.9, "Momentum coefficient (--optimizer=momentum)");
DEFINE_double(dropout, 0.25, "Dropout probability after the CNN's fc512 (0 disables)");
DEFINE_uint64(seed, 1, "Seed of the initialization, data partition, shuffles and dropout");

// ---- Data ----
DEFINE_string(data_dir, "/usr/share/datasets/fashion-mnist",
              "Directory with {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz");
DEFINE_int32(worker_id, -1, "Worker id to request from the coordinator (PS mode; -1: next free)");
DEFINE_int32(worker_index, 0, "This worker's part of the training set (--local; PS mode uses "
                              "the id the coordinator assigns)");
DEFINE_int32(num_workers, 1, "Number of parts the training set is split into (--local; PS "
                             "mode uses the job's expected worker count when it is set)");

// ---- Run length, evaluation, metrics ----
DEFINE_double(duration_s, 0, "Stop after this many seconds of training (0: no limit)");
DEFINE_int64(epochs, 0, "Stop after this many passes over this worker's part (0: no limit)");
DEFINE_double(eval_every_s, 20, "Evaluate on the test set every this many seconds (0: only at "
                                "the end)");
DEFINE_uint64(eval_examples, 0, "Test examples used by periodic evaluations (0: all 10000)");
DEFINE_int32(eval_batch, 256, "Mini-batch size of evaluations");
DEFINE_bool(eval_all_workers, false, "Evaluate on every worker, not only worker 0");
DEFINE_bool(final_eval, true, "Evaluate on the full test set at the end");
DEFINE_double(log_every_s, 5, "Progress line and metrics row every this many seconds");
DEFINE_string(metrics_csv, "", "Write per-interval metrics to this CSV file");
DEFINE_int32(local_after_ms, 200,
             "Under --recovery=stateless (the coordinator's): a server that has not answered "
             "a request for this long counts as lost and the worker trains on its own copy");
DEFINE_string(steps_csv, "",
              "Write one row per step (staleness, gate wait, cache hit, loss) to this CSV file");
DEFINE_int32(straggle_ms, 0, "Sleep this long every step (straggler experiments)");

// ---- Device ----
DEFINE_string(device, "cpu", "cpu or cuda");
DEFINE_int32(cuda_device, 0, "CUDA device ordinal (--device=cuda)");
DEFINE_int32(cpu_threads, 1, "OpenBLAS threads (1 avoids oversubscribing small machines)");

namespace relaxps {
namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitPsFailed = 3;

constexpr char kName[] = "relaxps-worker";

std::atomic<bool> g_stop{false};

void Stop() { g_stop.store(true); }

// One line on stderr and an `error worker=... code=...` line on stdout (for
// scripts collecting per-worker outcomes); returns the exit status.
int FailWorker(int code, int worker, const std::string& what, const Status& status) {
  std::fprintf(stdout, "error worker=%d code=%s exit=%d\n", worker,
               StatusCodeName(status.code()), code);
  std::fflush(stdout);
  return Fail(kName, status.WithPrefix(what), code);
}

int UsageError(const std::string& message) {
  return Fail(kName, InvalidArgumentError(message + " (see --help)"), kExitUsage);
}

bool IsPsFailure(const Status& s) {
  return s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
         s.code() == StatusCode::kAborted;
}

// Range checks of flag values that gflags cannot express.
Status CheckFlagValues() {
  auto bad = [](const std::string& m) { return InvalidArgumentError(m); };
  if (FLAGS_local == !FLAGS_coordinator.empty()) {
    return bad("pass exactly one of --local and --coordinator=tcp://host:port");
  }
  if (FLAGS_batch <= 0) return bad("--batch must be positive");
  StatusOr<LrSchedule> schedule = ParseLrSchedule(FLAGS_lr_schedule);
  if (!schedule.ok()) return bad("--lr_schedule: " + schedule.status().message());
  if (FLAGS_local && FLAGS_lr_schedule != "constant") {
    return bad("--lr_schedule is applied by the parameter servers; --local trains at --lr");
  }
  if (!(FLAGS_lr > 0) || !std::isfinite(FLAGS_lr)) return bad("--lr must be positive");
  if (!(FLAGS_dropout >= 0 && FLAGS_dropout < 1)) return bad("--dropout must be in [0, 1)");
  if (FLAGS_num_workers <= 0 || FLAGS_worker_index < 0 ||
      FLAGS_worker_index >= FLAGS_num_workers) {
    return bad("need 0 <= --worker_index < --num_workers");
  }
  if (!(FLAGS_duration_s >= 0) || FLAGS_epochs < 0) {
    return bad("--duration_s and --epochs must be >= 0");
  }
  if (!(FLAGS_eval_every_s >= 0) || !(FLAGS_log_every_s >= 0) || FLAGS_eval_batch <= 0) {
    return bad("--eval_every_s and --log_every_s must be >= 0, --eval_batch > 0");
  }
  if (FLAGS_straggle_ms < 0) return bad("--straggle_ms must be >= 0");
  if (FLAGS_cpu_threads < 0) return bad("--cpu_threads must be >= 0");
  if (FLAGS_request_timeout_ms <= 0) return bad("--request_timeout_ms must be positive");
  if (FLAGS_recovery_timeout_ms <= 0) return bad("--recovery_timeout_ms must be positive");
  if (FLAGS_local_after_ms <= 0) return bad("--local_after_ms must be positive");
  if (FLAGS_replay_log_mb < 0) return bad("--replay_log_mb must not be negative");
  if (FLAGS_wire_dtype != "fp32" && FLAGS_wire_dtype != "fp16") {
    return bad("--wire_dtype must be fp32 or fp16");
  }
  return Status::OK();
}

#ifdef RELAXPS_TRAINER_WITH_CLIENT
// The client's counters, read at scrape time (Client is thread-safe).
void AddClientMetrics(const Client* client, metrics::Registry* registry) {
  registry->AddCollector([client](metrics::MetricSink* sink) {
    const ClientStats s = client->stats();
    const metrics::Labels none;
    const auto counter = [&](const char* name, const char* help, uint64_t v) {
      sink->Counter(name, help, none, static_cast<double>(v));
    };
    counter("relaxps_worker_bytes_sent_total", "Bytes sent to servers and the coordinator.",
            s.bytes_sent);
    counter("relaxps_worker_bytes_received_total", "Bytes received.", s.bytes_received);
    counter("relaxps_worker_requests_total", "Requests sent.", s.requests);
    counter("relaxps_worker_request_errors_total", "Requests that failed.", s.errors);
    counter("relaxps_worker_cache_hits_total", "SSP pulls answered from the parameter cache.",
            s.cache_hits);
    counter("relaxps_worker_cache_misses_total", "SSP pulls sent to the servers.",
            s.cache_misses);
    counter("relaxps_worker_local_steps_total",
            "Stateless recovery: pushes applied to the worker's own copy while their server "
            "was lost.",
            s.local_steps);
    sink->Gauge("relaxps_worker_clock", "This worker's clock (completed iterations).", none,
                static_cast<double>(client->clock()));
    sink->Gauge("relaxps_worker_id", "This worker's id.", none, client->worker_id());
    sink->Gauge("relaxps_worker_coordinator_healthy",
                "1 while heartbeats to the coordinator succeed.", none,
                client->coordinator_healthy() ? 1 : 0);
  });
}
#endif

OptimizerOptions OptimizerFromFlags() {
  OptimizerOptions o;
  o.name = FLAGS_optimizer;
  o.lr = static_cast<float>(FLAGS_lr);
  o.momentum = static_cast<float>(FLAGS_momentum);
  return o;
}

int Main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "relaxps-worker (--local | --coordinator=tcp://host:port) [--model=cnn|mlp] "
      "[--duration_s=N | --epochs=N] [--metrics_port=N] [flags]\n  A worker binds no "
      "ZeroMQ socket (it connects to the coordinator and servers); --metrics_bind picks the "
      "metrics interface.\n  Flags may also come from a file: --flagfile=FILE (one "
      "--flag=value per line, # comments).");
  if (Status s = CheckCommandLine(argc, argv); !s.ok()) return UsageError(s.message());
  ParseFlagsWithHelp(&argc, &argv, WorkerFlagGroups());
  InitLogging(argv[0]);
  TuneMallocForLargeMessages();
  ScaleTimeoutFlags(SanitizerTimeScale(),
                    {"request_timeout_ms", "coordinator_timeout_ms", "recovery_timeout_ms"});
  if (Status s = CheckFlagValues(); !s.ok()) return UsageError(s.message());
  StatusOr<bool> evaluator_role = IsEvaluatorRole();
  if (!evaluator_role.ok()) return UsageError(evaluator_role.status().message());
  // A second signal gets the default action: kills the worker at once.
  StopOnSignals(&Stop, /*second_signal_kills=*/true);

  // ---- Device and model ----
  StatusOr<kernels::DeviceType> type = kernels::ParseDeviceType(FLAGS_device);
  if (!type.ok()) return UsageError("--device: " + type.status().message());
  kernels::DeviceOptions device_options;
  device_options.type = *type;
  device_options.cuda_device = FLAGS_cuda_device;
  device_options.cpu_threads = FLAGS_cpu_threads;
  StatusOr<std::unique_ptr<kernels::Device>> device = kernels::NewDevice(device_options);
  if (!device.ok()) {
    return Fail(kName, device.status().WithPrefix("--device=" + FLAGS_device + " is not available"),
                kExitUsage);
  }

  trainer::ModelOptions model_options;
  model_options.name = FLAGS_model;
  model_options.batch_size = FLAGS_batch;
  model_options.dropout = static_cast<float>(FLAGS_dropout);
  StatusOr<std::unique_ptr<trainer::Model>> model = trainer::NewModel(model_options);
  if (!model.ok()) return UsageError("--model: " + model.status().message());
  {
    // Reject a bad optimizer name or rate before loading or connecting.
    StatusOr<std::unique_ptr<kernels::Optimizer>> probe =
        kernels::NewOptimizer(OptimizerFromFlags());
    if (!probe.ok()) return UsageError("--optimizer/--lr: " + probe.status().message());
  }

  // ---- Data ----
  StatusOr<trainer::FashionMnist> data = trainer::LoadFashionMnist(FLAGS_data_dir);
  if (!data.ok()) return FailWorker(kExitError, FLAGS_worker_index, "cannot load the data", data.status());

  // Named "worker-<id>" by the client once it registered ("worker-<index>"
  // with --local), "evaluator" for that role.
  StatusOr<std::shared_ptr<EventLog>> events =
      EventsFromFlags(*evaluator_role ? "evaluator"
                      : FLAGS_local   ? "worker-" + std::to_string(FLAGS_worker_index)
                                      : "");
  if (!events.ok()) return Fail(kName, events.status(), kExitUsage);

  // --role=evaluator: evaluations only, off the training path.
  if (*evaluator_role) {
    return RunEvaluatorRole(device->get(), model->get(), &*data, &g_stop, *events);
  }

  // ---- Parameters: local or through the parameter server ----
  trainer::TrainerOptions options;
  options.worker_index = FLAGS_worker_index;
  options.num_workers = FLAGS_num_workers;
  options.seed = FLAGS_seed;
  options.duration_s = FLAGS_duration_s;
  options.epochs = FLAGS_epochs;
  options.eval_every_s = FLAGS_eval_every_s;
  options.eval_examples = FLAGS_eval_examples;
  options.eval_all_workers = FLAGS_eval_all_workers;
  options.final_eval = FLAGS_final_eval;
  options.eval_batch = FLAGS_eval_batch;
  options.log_every_s = FLAGS_log_every_s;
  options.metrics_csv = FLAGS_metrics_csv;
  options.steps_csv = FLAGS_steps_csv;
  options.straggle_ms = FLAGS_straggle_ms;
  options.events = *events;

  const Initializer init = (*model)->MakeInitializer(FLAGS_seed);
  std::unique_ptr<trainer::ParamSource> source;
#ifdef RELAXPS_TRAINER_WITH_CLIENT
  std::unique_ptr<Client> client;
#endif
  // After the client: the exporter stops before the client it reads goes.
  metrics::Registry registry;
  StatusOr<std::unique_ptr<metrics::MetricsExporter>> exporter =
      StartMetricsFromFlags(kName, "", &registry);
  if (!exporter.ok()) {
    if (exporter.status().code() == StatusCode::kInvalidArgument) {
      return UsageError(exporter.status().message());
    }
    return Fail(kName, exporter.status(), kExitError);
  }
  if (MetricsEnabled()) options.metrics = &registry;
  if (FLAGS_local) {
    trainer::LocalParamsOptions local;
    local.size = (*model)->num_params();
    local.init = init;
    local.optimizer = OptimizerFromFlags();
    StatusOr<std::unique_ptr<trainer::ParamSource>> s =
        trainer::NewLocalParams(device->get(), local);
    if (!s.ok()) return UsageError(s.status().message());
    source = std::move(*s);
  } else {
#ifdef RELAXPS_TRAINER_WITH_CLIENT
    ClientOptions client_options;
    client_options.coordinator = FLAGS_coordinator;
    StatusOr<std::string> source_address = SourceAddressFromFlags();
    if (!source_address.ok()) return UsageError(source_address.status().message());
    client_options.source_address = *source_address;
    client_options.role = "worker";
    client_options.worker_id = FLAGS_worker_id;
    client_options.request_timeout_ms = FLAGS_request_timeout_ms;
    client_options.recovery_timeout_ms = FLAGS_recovery_timeout_ms;
    client_options.local_after_ms = FLAGS_local_after_ms;
    client_options.update_log_bytes = FLAGS_replay_log_mb << 20;
    client_options.wire_dtype = FLAGS_wire_dtype;
    client_options.coordinator_timeout_ms = FLAGS_coordinator_timeout_ms;
    client_options.events = *events;
    StatusOr<CurveOptions> curve = SecurityFromFlags(
        FLAGS_security, FLAGS_keys_dir, "worker-" + std::to_string(FLAGS_worker_id));
    if (!curve.ok()) return UsageError(curve.status().message());
    client_options.curve = *curve;
    // relaxps-ctl shutdown: finish the step and leave, as on SIGTERM.
    client_options.on_job_done = [] { Stop(); };
    StatusOr<std::unique_ptr<Client>> connected = Client::Connect(client_options);
    if (!connected.ok()) {
      // InvalidArgument: a malformed --coordinator or a host that does not
      // resolve, a usage error.
      const StatusCode code = connected.status().code();
      return FailWorker(IsPsFailure(connected.status())       ? kExitPsFailed
                        : code == StatusCode::kInvalidArgument ? kExitUsage
                                                               : kExitError,
                        -1, "cannot join the job at " + FLAGS_coordinator, connected.status());
    }
    client = std::move(*connected);
    AddClientMetrics(client.get(), &registry);
    const int id = client->worker_id();
    const int expected = client->job().expected_workers;
    options.num_workers = expected > 0 ? expected : FLAGS_num_workers;
    // A worker that replaces a lost one (a higher id) takes over a part.
    options.worker_index = id % options.num_workers;
    options.worker_id = id;
    LOG(INFO) << "worker " << id << " joined " << FLAGS_coordinator << " ("
              << client->consistency_policy().Name() << ", " << options.num_workers
              << " workers); training on data part " << options.worker_index;

    trainer::PsParamsOptions ps;
    ps.table.name = FLAGS_table;
    ps.table.type = TableType::kDense;
    ps.table.size = (*model)->num_params();
    ps.table.optimizer = OptimizerFromFlags();
    ps.table.lr_schedule = ParseLrSchedule(FLAGS_lr_schedule).value();  // Checked above.
    ps.table.init = init;
    // A request may wait out a dead server's restart (recovery_timeout_ms)
    // on top of its own deadline; PsParams' bound only catches a lost reply.
    // It waits whenever a lost server comes back by itself (restarted from a
    // checkpoint, or rejoining its chains while requests go to a new head),
    // not when the workers re-seed it (they train on their own copies then).
    ps.wait_timeout_ms = FLAGS_request_timeout_ms + 10000;
    const RestartRule restart = client->recovery_policy().needs().restart;
    if (restart != RestartRule::kNever && restart != RestartRule::kSameIdReseeded) {
      ps.wait_timeout_ms += FLAGS_recovery_timeout_ms;
    }
    ps.pipeline_async = FLAGS_async_pipeline;
    StatusOr<std::unique_ptr<trainer::ParamSource>> s =
        trainer::NewPsParams(client.get(), device->get(), ps);
    if (!s.ok()) {
      client->ReportFinished(s.status()).IgnoreError();
      return FailWorker(IsPsFailure(s.status()) ? kExitPsFailed : kExitError, id,
           "worker " + std::to_string(id) + ": parameter server", s.status());
    }
    source = std::move(*s);
#else
    return UsageError("this build has no parameter-server client; use --local");
#endif
  }

  StatusOr<std::unique_ptr<trainer::Trainer>> t = trainer::Trainer::Create(
      options, device->get(), model->get(), source.get(), &*data);
  if (!t.ok()) return UsageError(t.status().message());
  const int metrics_worker = options.worker_id >= 0 ? options.worker_id : options.worker_index;
  LOG(INFO) << "training " << (*model)->Name() << " (" << (*model)->num_params()
            << " parameters) on " << (*device)->Name() << ", " << source->Name()
            << " parameters, batch " << FLAGS_batch << ", " << FLAGS_optimizer << " lr "
            << FLAGS_lr;
  StatusOr<trainer::TrainResult> result = (*t)->Run(&g_stop);
#ifdef RELAXPS_TRAINER_WITH_CLIENT
  if (client != nullptr) {
    // The final report: the job ends cleanly even if the goodbye is lost,
    // and not cleanly if this worker failed.
    if (Status r = client->ReportFinished(result.status()); !r.ok()) {
      LOG(WARNING) << "worker " << client->worker_id() << ": " << r;
    }
  }
#endif
  if (!result.ok()) {
    const bool ps = IsPsFailure(result.status()) && !FLAGS_local;
    return FailWorker(ps ? kExitPsFailed : kExitError, metrics_worker,
         ps ? "parameter server failed" : "training failed", result.status());
  }
  return 0;
}

}  // namespace
}  // namespace relaxps

int main(int argc, char** argv) { return relaxps::Main(argc, argv); }
