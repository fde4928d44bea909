#include "apps/internal/flag_groups.h"

namespace relaxps {
namespace {

// Flags of apps/internal/metrics_flags.cc (coordinator, server, worker).
FlagGroup MetricsGroup() { return {"Prometheus metrics", {"metrics_port", "metrics_bind"}}; }

}  // namespace

std::vector<FlagGroup> CoordinatorFlagGroups() {
  return {
      {"Job", {"num_servers", "num_workers", "start_barrier_timeout_ms", "consistency",
               "staleness", "sparse_buckets", "exit_when_done", "failed_exit_ms"}},
      {"Failure detection and recovery",
       {"recovery", "replicas", "heartbeat_timeout_ms", "probe_timeout_ms", "takeover_probe_ms",
        "spare_takeover_ms", "seed_rule", "merge_rule", "reseed_timeout_ms"}},
      {"Recovery policy options (--recovery=help)",
       {"checkpoint_mode", "replication", "replication_max_lag"}},
      {"Checkpoints", {"checkpoint_every_clocks", "checkpoint_every_s"}},
      {"Elastic servers (docs/elastic.md)", {"move_timeout_ms"}},
      {"Coordinator state and standbys", {"data_dir", "coordination", "zk_session_timeout_ms"}},
      {"Network and security",
       {"bind", "advertise", "endpoint_file", "security", "keys_dir", "insecure_bind_public"}},
      {"Limits", {"max_workers", "max_members", "max_tables", "max_control_per_min",
                  "max_control_per_min_per_peer", "max_table_mb", "max_message_mb"}},
      MetricsGroup(),
  };
}

std::vector<FlagGroup> ServerFlagGroups() {
  return {
      {"Joining the job", {"coordinator", "coordination", "zk_session_timeout_ms", "server_id",
                           "heartbeat_ms", "coordinator_timeout_ms"}},
      {"Elastic servers (docs/elastic.md)", {"join", "move_drain_timeout_ms", "move_copy_first", "move_catchup_rounds",
        "move_catchup_kb", "move_forward_updates", "move_forward_window_mb", "move_piece_timeout_ms"}},
      {"Storage", {"store", "data_dir", "cache_mb", "wal_per_update", "wal_group_commit", "wal_reply", "dense_log_mb",
                   "flush_every_clocks"}},
      {"Checkpoints and recovery",
       {"checkpoint_dir", "keep_checkpoints", "restore_from", "state_transfer_chunk_kb"}},
      {"Network and security",
       {"bind", "advertise", "endpoint_file", "security", "keys_dir", "insecure_bind_public"}},
      {"Limits", {"max_server_mb", "max_clocks_ahead", "max_queued_replies", "max_unread_reply_mb",
                  "max_unread_reply_mb_per_peer", "max_parked_mb", "max_parked_mb_per_peer",
                  "reply_pool_trim_ms", "max_message_mb"}},
      {"Device", {"device"}},
      MetricsGroup(),
  };
}

std::vector<FlagGroup> WorkerFlagGroups() {
  return {
      {"Where parameters live",
       {"coordinator", "local", "worker_id", "table", "async_pipeline", "wire_dtype",
        "security", "keys_dir"}},
      {"Timeouts and recovery",
       {"request_timeout_ms", "coordinator_timeout_ms", "recovery_timeout_ms", "local_after_ms",
        "replay_log_mb"}},
      {"Model and optimizer",
       {"model", "batch", "lr", "optimizer", "lr_schedule", "momentum", "dropout", "seed"}},
      {"Data", {"data_dir", "worker_index", "num_workers"}},
      {"Run length", {"duration_s", "epochs", "straggle_ms"}},
      {"Evaluation", {"role", "eval_every_s", "eval_examples", "eval_batch", "eval_all_workers",
                      "final_eval", "time_origin_unix", "eval_pull_timeout_ms"}},
      {"Progress and metrics files", {"log_every_s", "metrics_csv", "steps_csv"}},
      {"Device", {"device", "cuda_device", "cpu_threads"}},
      MetricsGroup(),
  };
}

std::vector<FlagGroup> CtlFlagGroups() {
  return {
      {"Connection", {"coordinator", "timeout_ms", "checkpoint_timeout_ms", "security",
                      "keys_dir", "key"}},
      {"Output", {"json"}},
      {"keygen", {"servers", "workers", "principals"}},
  };
}

}  // namespace relaxps
