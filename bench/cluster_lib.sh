# Shell helpers for the end-to-end benches (sourced, not run): start a local
# relaxps job, wait for its workers, stop everything it started.
#
#   source bench/cluster_lib.sh
#   cluster_start OUT_DIR NUM_SERVERS NUM_WORKERS [coordinator flags...]
#   cluster_worker OUT_DIR INDEX [worker flags...]     # background
#   cluster_wait_workers; cluster_stop
#   final_field LOG KEY                                # from the "final" line
#
# Requires BIN (the directory holding relaxps-coordinator, -server, -worker).
# Every process started here is tracked by pid and stopped by cluster_stop
# (TERM, then KILL after 3 s); nothing else is touched.

CLUSTER_PIDS=()
CLUSTER_WORKER_PIDS=()
# Extra flags for every server cluster_start starts (after --store=memory, so
# e.g. --store=rocksdb --data_dir=D overrides it); {i} becomes the server index.
CLUSTER_SERVER_ARGS=()
CLUSTER_COORD=""
# The worker command cluster_worker runs (flags appended); e.g. a Python
# trainer: (env PYTHONPATH=build/python /usr/bin/python3 examples/pytorch_cnn.py).
CLUSTER_WORKER_CMD=()

cluster_start() {  # OUT_DIR SERVERS WORKERS [coordinator flags...]
  local out=$1 servers=$2 workers=$3; shift 3
  mkdir -p "$out"
  CLUSTER_PIDS=(); CLUSTER_WORKER_PIDS=(); CLUSTER_COORD=""
  rm -f "$out/coordinator.endpoint"
  "$BIN/relaxps-coordinator" --bind='tcp://127.0.0.1:*' --endpoint_file="$out/coordinator.endpoint" \
    --num_servers="$servers" --num_workers="$workers" --exit_when_done=false "$@" >"$out/coordinator.log" 2>&1 &
  CLUSTER_PIDS+=($!)
  local i
  for i in $(seq 1 100); do
    [ -s "$out/coordinator.endpoint" ] && break
    sleep 0.1
  done
  if [ ! -s "$out/coordinator.endpoint" ]; then
    echo "cluster_lib: coordinator did not start; see $out/coordinator.log" >&2
    return 1
  fi
  CLUSTER_COORD=$(cat "$out/coordinator.endpoint")
  for i in $(seq 0 $((servers - 1))); do
    "$BIN/relaxps-server" --coordinator="$CLUSTER_COORD" --server_id="$i" --store=memory \
      "${CLUSTER_SERVER_ARGS[@]//\{i\}/$i}" >"$out/server-$i.log" 2>&1 &
    CLUSTER_PIDS+=($!)
  done
}

cluster_worker() {  # OUT_DIR INDEX [worker flags...]
  local out=$1 idx=$2; shift 2
  local cmd=("${CLUSTER_WORKER_CMD[@]}")
  [ ${#cmd[@]} -gt 0 ] || cmd=("$BIN/relaxps-worker")
  "${cmd[@]}" --coordinator="$CLUSTER_COORD" --metrics_csv="$out/worker-$idx.csv" \
    "$@" >"$out/worker-$idx.log" 2>&1 &
  CLUSTER_WORKER_PIDS+=($!)
}

cluster_wait_workers() {
  local p rc=0
  for p in "${CLUSTER_WORKER_PIDS[@]}"; do wait "$p" || rc=$?; done
  return $rc
}

cluster_stop() {
  local p
  for p in "${CLUSTER_WORKER_PIDS[@]}" "${CLUSTER_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 1 30); do
    local alive=0
    for p in "${CLUSTER_WORKER_PIDS[@]}" "${CLUSTER_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${CLUSTER_WORKER_PIDS[@]}" "${CLUSTER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in "${CLUSTER_WORKER_PIDS[@]}" "${CLUSTER_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  CLUSTER_PIDS=(); CLUSTER_WORKER_PIDS=()
}

final_field() {  # LOG KEY -> value of KEY=... on the log's "final" line (empty if none)
  grep -a '^final ' "$1" 2>/dev/null | tail -n 1 | grep -o " $2=[^ ]*" | head -n 1 | cut -d= -f2
}
