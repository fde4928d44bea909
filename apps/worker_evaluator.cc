// The evaluator role of relaxps-worker (`--role=evaluator`, see
// apps/trainer/evaluator.h): joins the job as an observer and evaluates the
// model on the test set every --eval_every_s, off the training path.
//
// Reuses the worker's flags (--coordinator, --table, --eval_every_s,
// --eval_examples, --eval_batch, --duration_s, --metrics_csv,
// --request_timeout_ms, --wire_dtype); adds --time_origin_unix and
// --eval_pull_timeout_ms.
#include "apps/worker_evaluator.h"

#include "apps/internal/main_util.h"

#include <cstdio>
#include <string>

#include <gflags/gflags.h>
#include <glog/logging.h>

#ifdef RELAXPS_TRAINER_WITH_CLIENT
#include "apps/internal/network_flags.h"
#include "apps/trainer/evaluator.h"
#include "client/client.h"
#endif

DEFINE_string(role, "worker",
              "worker (trains) or evaluator (pulls the model every --eval_every_s and "
              "evaluates it on the test set; needs --coordinator)");
DEFINE_double(time_origin_unix, 0,
              "--role=evaluator: origin of the CSV's time_s in seconds since the epoch (0: the "
              "evaluator's start), e.g. the launcher's start time");

DEFINE_int32(eval_pull_timeout_ms, 1000,
             "--role=evaluator: a pull of the model that takes longer fails and is retried "
             "1 s after it started (an outage blinds the evaluator about as long as it lasts; "
             "its gaps are evaluator_gap events)");

DECLARE_string(security);
DECLARE_string(keys_dir);
DECLARE_string(coordinator);
DECLARE_string(table);
DECLARE_string(wire_dtype);
DECLARE_int32(request_timeout_ms);
DECLARE_double(duration_s);
DECLARE_double(eval_every_s);
DECLARE_uint64(eval_examples);
DECLARE_int32(eval_batch);
DECLARE_string(metrics_csv);

namespace relaxps {

StatusOr<bool> IsEvaluatorRole() {
  if (FLAGS_role == "worker") return false;
  if (FLAGS_role != "evaluator") {
    return InvalidArgumentError("--role must be worker or evaluator, not '" + FLAGS_role + "'");
  }
  if (FLAGS_coordinator.empty()) {
    return InvalidArgumentError("--role=evaluator needs --coordinator=tcp://host:port");
  }
  if (!(FLAGS_eval_every_s > 0)) {
    return InvalidArgumentError("--role=evaluator needs --eval_every_s > 0");
  }
  return true;
}

int RunEvaluatorRole(kernels::Device* device, trainer::Model* model,
                     const trainer::FashionMnist* data, const std::atomic<bool>* stop,
                     std::shared_ptr<EventLog> events) {
#ifdef RELAXPS_TRAINER_WITH_CLIENT
  ClientOptions client_options;
  client_options.events = events;
  client_options.coordinator = FLAGS_coordinator;
  client_options.role = "observer";
  client_options.request_timeout_ms = FLAGS_request_timeout_ms;
  client_options.wire_dtype = FLAGS_wire_dtype;
  StatusOr<CurveOptions> curve = SecurityFromFlags(FLAGS_security, FLAGS_keys_dir, "observer");
  if (!curve.ok()) {
    std::fprintf(stderr, "relaxps-worker: evaluator: %s\n", curve.status().ToString().c_str());
    return 2;
  }
  client_options.curve = *curve;
  StatusOr<std::string> source_address = SourceAddressFromFlags();
  if (!source_address.ok()) {
    std::fprintf(stderr, "relaxps-worker: evaluator: %s\n",
                 source_address.status().ToString().c_str());
    return 2;
  }
  client_options.source_address = *source_address;
  StatusOr<std::unique_ptr<Client>> client = Client::Connect(client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "relaxps-worker: evaluator: cannot join the job at %s: %s\n",
                 FLAGS_coordinator.c_str(), client.status().ToString().c_str());
    return 3;
  }
  trainer::EvaluatorOptions options;
  options.table = FLAGS_table;
  options.eval_every_s = FLAGS_eval_every_s;
  options.duration_s = FLAGS_duration_s;
  options.eval_examples = FLAGS_eval_examples;
  options.eval_batch = FLAGS_eval_batch;
  options.pull_timeout_ms = FLAGS_eval_pull_timeout_ms;
  options.time_origin_unix = FLAGS_time_origin_unix;
  options.metrics_csv = FLAGS_metrics_csv;
  options.events = events;
  StatusOr<std::unique_ptr<trainer::Evaluator>> evaluator =
      trainer::Evaluator::Create(options, client->get(), device, model, data);
  if (!evaluator.ok()) {
    std::fprintf(stderr, "relaxps-worker: evaluator: %s\n",
                 evaluator.status().ToString().c_str());
    return evaluator.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  StatusOr<trainer::EvaluatorResult> result = (*evaluator)->Run(stop);
  if (!result.ok()) {
    std::fprintf(stderr, "relaxps-worker: evaluator: %s\n", result.status().ToString().c_str());
    return 1;
  }
  LOG(INFO) << "evaluator: " << result->evaluations << " evaluations, " << result->failed_pulls
            << " failed pulls in " << result->gaps << " gap(s) of " << result->blind_s << " s";
  return 0;
#else
  (void)device, (void)model, (void)data, (void)stop, (void)events;
  std::fprintf(stderr, "relaxps-worker: this build has no parameter-server client\n");
  return 2;
#endif
}

}  // namespace relaxps
