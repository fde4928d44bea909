#!/usr/bin/env bash
# Training overhead of the parameter server: training samples/s of one
# relaxps-worker --local (optimizer applied in-process) against the same
# worker through a job with 1 server, async consistency, for each model, same
# duration, run one after the other in this invocation. The local run is the
# yardstick: ratio = ps / local (1.0 = no overhead). Runs alternate local, ps,
# local, ps... (--reps pairs) and the best of each is kept, so that a burst of
# load from other processes does not land on one side only.
# For the --wal_models (default mlp) a third run goes through a RocksDB server
# with --wal_per_update (WAL group commit, answers before the background
# sync: --wal_reply=applied, the default): its figure has the plain ps run
# as yardstick (what per-update durability costs training); for the
# --wal_durable_models (default none) one more with --wal_reply=durable
# (every answer waits for the sync), same yardstick. For the
# --curve_models (default none) a run goes through the same job under
# --security=curve (keys from relaxps-ctl keygen), again against the plain ps
# run (what encryption costs training).
#
#   bench/training_overhead.sh [--duration_s=30] [--reps=2] [--models=mlp,cnn]
#                              [--wal_models=mlp] [--wal_durable_models=mlp]
#                              [--curve_models=cnn]
#                              [--out_dir=DIR] [--trainer=FILE.py]
#
# --trainer=FILE.py measures a Python trainer with relaxps-worker's flags
# (examples/pytorch_cnn.py, run by /usr/bin/python3 with PYTHONPATH=
# build/python) instead of relaxps-worker: its --local run against its run
# through the server; results are named training_<file name>/<model>/...
# (no WAL run unless --wal_models is given).
#
# Environment: BIN (default build/bin). Prints one JSON object on stdout.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/${BUILD_DIR:-build}/bin}
DURATION_S=30
MODELS=mlp,cnn
WAL_MODELS=mlp
WAL_DURABLE_MODELS=""
CURVE_MODELS=""
REPS=2
OUT_DIR=""
TRAINER=""
for arg in "$@"; do
  case "$arg" in
    --duration_s=*) DURATION_S=${arg#*=} ;;
    --models=*) MODELS=${arg#*=} ;;
    --wal_models=*) WAL_MODELS=${arg#*=} ;;
    --wal_durable_models=*) WAL_DURABLE_MODELS=${arg#*=} ;;
    --curve_models=*) CURVE_MODELS=${arg#*=} ;;
    --reps=*) REPS=${arg#*=} ;;
    --out_dir=*) OUT_DIR=${arg#*=} ;;
    --trainer=*) TRAINER=${arg#*=}; [[ " $* " == *" --wal_models="* ]] || WAL_MODELS="" ;;
    *) echo "training_overhead.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
[ -n "$OUT_DIR" ] || OUT_DIR=$(mktemp -d "${TMPDIR:-/tmp}/relaxps-overhead.XXXXXX")
source "$ROOT/bench/cluster_lib.sh"
WORKER_CMD=("$BIN/relaxps-worker")
NAME=training
if [ -n "$TRAINER" ]; then
  WORKER_CMD=(env "PYTHONPATH=${RELAXPS_PYTHONPATH:-$ROOT/${BUILD_DIR:-build}/python}" /usr/bin/python3 "$TRAINER")
  CLUSTER_WORKER_CMD=("${WORKER_CMD[@]}")
  NAME=training_$(basename "$TRAINER" .py)
fi
trap 'cluster_stop' EXIT
trap 'cluster_stop; exit 130' INT TERM

# Same training flags for both runs; no periodic or final evaluation, so the
# figure is pure training throughput.
COMMON=(--duration_s="$DURATION_S" --eval_every_s=0 --final_eval=false --log_every_s=5 --seed=1)

best() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { print (a > b ? a : b) }'; }

rows=()
for model in ${MODELS//,/ }; do
  local_best=0
  ps_best=0
  wal_best=0
  durable_best=0
  curve_best=0
  wal=0
  durable=0
  curve=0
  [[ ",$WAL_MODELS," == *",$model,"* ]] && wal=1
  [[ ",$WAL_DURABLE_MODELS," == *",$model,"* ]] && durable=1
  [[ ",$CURVE_MODELS," == *",$model,"* ]] && curve=1
  for rep in $(seq 1 "$REPS"); do
    dir="$OUT_DIR/$model/rep$rep"
    mkdir -p "$dir"
    "${WORKER_CMD[@]}" --local --model="$model" --num_workers=1 --worker_index=0 \
      --metrics_csv="$dir/local.csv" "${COMMON[@]}" >"$dir/local.log" 2>&1
    local_sps=$(final_field "$dir/local.log" samples_per_s)

    cluster_start "$dir/ps" 1 1 --consistency=async || exit 1
    cluster_worker "$dir/ps" 0 --model="$model" --num_workers=1 "${COMMON[@]}"
    cluster_wait_workers
    cluster_stop
    ps_sps=$(final_field "$dir/ps/worker-0.log" samples_per_s)
    # wal_run NAME [server flags...]: prints the worker's samples/s through a
    # --wal_per_update server (run in a subshell: exits it on failure).
    wal_run() {
      local run_dir=$dir/$1
      shift
      CLUSTER_SERVER_ARGS=(--store=rocksdb --data_dir="$run_dir/data-{i}" --wal_per_update
                           --flush_every_clocks=0 "$@")
      cluster_start "$run_dir" 1 1 --consistency=async || exit 1
      CLUSTER_SERVER_ARGS=()
      cluster_worker "$run_dir" 0 --model="$model" --num_workers=1 "${COMMON[@]}"
      cluster_wait_workers
      cluster_stop
      final_field "$run_dir/worker-0.log" samples_per_s
      rm -rf "$run_dir"/data-*
    }
    wal_sps=0
    if [ "$wal" = 1 ]; then wal_sps=$(wal_run wal) || exit 1; fi
    durable_sps=0
    if [ "$durable" = 1 ]; then durable_sps=$(wal_run wal_durable --wal_reply=durable) || exit 1; fi
    curve_sps=0
    if [ "$curve" = 1 ]; then
      keys="$dir/curve/keys"
      mkdir -p "$dir/curve"
      "$BIN/relaxps-ctl" keygen "$keys" --servers=1 --workers=1 >"$dir/curve/keygen.log" 2>&1 ||
        { echo "training_overhead: relaxps-ctl keygen failed; see $dir/curve/keygen.log" >&2; exit 1; }
      secure=(--security=curve --keys_dir="$keys")
      CLUSTER_SERVER_ARGS=("${secure[@]}")
      cluster_start "$dir/curve" 1 1 --consistency=async "${secure[@]}" || exit 1
      CLUSTER_SERVER_ARGS=()
      cluster_worker "$dir/curve" 0 --model="$model" --num_workers=1 --worker_id=0 "${secure[@]}" "${COMMON[@]}"
      cluster_wait_workers
      cluster_stop
      curve_sps=$(final_field "$dir/curve/worker-0.log" samples_per_s)
    fi
    echo "training_overhead: $model rep $rep: local ${local_sps:-?} samples/s, ps ${ps_sps:-?} samples/s, ps+wal ${wal_sps:-?} samples/s, ps+wal durable ${durable_sps:-?} samples/s, ps+curve ${curve_sps:-?} samples/s" >&2
    local_best=$(best "$local_best" "$local_sps")
    ps_best=$(best "$ps_best" "$ps_sps")
    wal_best=$(best "$wal_best" "$wal_sps")
    durable_best=$(best "$durable_best" "$durable_sps")
    curve_best=$(best "$curve_best" "$curve_sps")
  done
  rows+=("$model $local_best $ps_best $wal $wal_best $durable $durable_best $curve $curve_best")
done

python3 - "$NAME" "$DURATION_S" "$OUT_DIR" "${rows[@]}" <<'PY'
import json, sys
name, duration, out_dir, rows = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:]
results = []
for r in rows:
    model, local, ps, wal, wal_ps, durable, durable_ps, curve, curve_ps = r.split()
    local, ps = float(local), float(ps)
    wal_ps, durable_ps, curve_ps = float(wal_ps), float(durable_ps), float(curve_ps)
    results.append({
        "name": f"{name}/{model}/ps_async_w1s1/samples_per_s",
        "value": ps, "unit": "samples/s",
        "yardstick": f"{name}/{model}/local/samples_per_s", "yardstick_value": local,
        "ratio": ps / local if local > 0 else 0.0, "better": "higher",
        "overhead_pct": 100.0 * (1 - ps / local) if local > 0 else None,
    })
    # The WAL and CURVE runs have the plain ps run as their yardstick.
    for on, suffix, value in ((wal, "wal_per_update", wal_ps),
                              (durable, "wal_per_update_durable", durable_ps),
                              (curve, "curve", curve_ps)):
        if on == "1":
            results.append({
                "name": f"{name}/{model}/ps_async_w1s1_{suffix}/samples_per_s",
                "value": value, "unit": "samples/s",
                "yardstick": f"{name}/{model}/ps_async_w1s1/samples_per_s", "yardstick_value": ps,
                "ratio": value / ps if ps > 0 else 0.0, "better": "higher",
            })
print(json.dumps({"bench": name + "_overhead", "duration_s": duration, "logs": out_dir,
                  "results": results}))
PY
