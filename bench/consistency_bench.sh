#!/usr/bin/env bash
# Consistency models under a straggler: 2 workers, worker 1 sleeping
# --straggle_ms every step, for bsp, ssp (--staleness) and async and for each
# model, each run for the same fixed time budget. Reports the total training
# samples/s of both workers and worker 0's final test accuracy. The async run
# of each model is the yardstick of its row (ratio = this / async).
#
#   bench/consistency_bench.sh [--duration_s=60] [--models=mlp,cnn] [--servers=1]
#                              [--staleness=2] [--straggle_ms=50] [--heartbeat_timeout_ms=5000]
#                              [--out_dir=DIR]
#
# Environment: BIN (default build/bin). Prints one JSON object on stdout.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/${BUILD_DIR:-build}/bin}
DURATION_S=60
MODELS=mlp,cnn
SERVERS=1
STALENESS=2
STRAGGLE_MS=50
# Generous failure detection: on a loaded 2-core machine a busy worker can
# miss 1 s of heartbeats, be declared dead and stall the BSP/SSP barriers.
HEARTBEAT_TIMEOUT_MS=5000
OUT_DIR=""
for arg in "$@"; do
  case "$arg" in
    --duration_s=*) DURATION_S=${arg#*=} ;;
    --models=*) MODELS=${arg#*=} ;;
    --servers=*) SERVERS=${arg#*=} ;;
    --staleness=*) STALENESS=${arg#*=} ;;
    --straggle_ms=*) STRAGGLE_MS=${arg#*=} ;;
    --heartbeat_timeout_ms=*) HEARTBEAT_TIMEOUT_MS=${arg#*=} ;;
    --out_dir=*) OUT_DIR=${arg#*=} ;;
    *) echo "consistency_bench.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
[ -n "$OUT_DIR" ] || OUT_DIR=$(mktemp -d "${TMPDIR:-/tmp}/relaxps-consistency.XXXXXX")
source "$ROOT/bench/cluster_lib.sh"
trap 'cluster_stop' EXIT
trap 'cluster_stop; exit 130' INT TERM

COMMON=(--num_workers=2 --duration_s="$DURATION_S" --eval_every_s=0 --log_every_s=5 --seed=1)

rows=()
for model in ${MODELS//,/ }; do
  for mode in bsp ssp async; do
    dir="$OUT_DIR/$model-$mode"
    cluster_start "$dir" "$SERVERS" 2 --consistency="$mode" --staleness="$STALENESS" \
      --heartbeat_timeout_ms="$HEARTBEAT_TIMEOUT_MS" || exit 1
    cluster_worker "$dir" 0 --model="$model" "${COMMON[@]}"
    # Worker ids follow registration order: let the fast worker take id 0
    # (the one that evaluates) before the straggler registers.
    for _ in $(seq 1 100); do
      grep -q ' joined ' "$dir/worker-0.log" 2>/dev/null && break
      sleep 0.1
    done
    cluster_worker "$dir" 1 --model="$model" "${COMMON[@]}" --straggle_ms="$STRAGGLE_MS" \
      --final_eval=false
    cluster_wait_workers
    cluster_stop
    s0=$(final_field "$dir/worker-0.log" samples_per_s)
    s1=$(final_field "$dir/worker-1.log" samples_per_s)
    acc=$(final_field "$dir/worker-0.log" test_acc)
    [ -n "$acc" ] && [ "$acc" != nan ] || acc=$(final_field "$dir/worker-1.log" test_acc)
    echo "consistency_bench: $model $mode samples/s ${s0:-?} + ${s1:-?}, test_acc ${acc:-?}" >&2
    rows+=("$model $mode ${s0:-0} ${s1:-0} ${acc:-nan}")
  done
done

python3 - "$DURATION_S" "$STALENESS" "$STRAGGLE_MS" "$SERVERS" "$OUT_DIR" "${rows[@]}" <<'PY'
import json, math, sys
duration, staleness, straggle, servers, out_dir = sys.argv[1:6]
table = {}
for r in sys.argv[6:]:
    model, mode, s0, s1, acc = r.split()
    acc = float(acc)
    table[(model, mode)] = (float(s0) + float(s1), float(s0), float(s1),
                            None if math.isnan(acc) else acc)
results, summary = [], []
for (model, mode), (total, s0, s1, acc) in table.items():
    base = table.get((model, "async"))
    label = f"ssp{staleness}" if mode == "ssp" else mode
    results.append({
        "name": f"consistency/{model}/{label}/total_samples_per_s", "value": total,
        "unit": "samples/s", "yardstick": f"consistency/{model}/async/total_samples_per_s",
        "yardstick_value": base[0] if base else None,
        "ratio": total / base[0] if base and base[0] > 0 else None, "better": "higher",
        "worker_samples_per_s": [s0, s1]})
    results.append({
        "name": f"consistency/{model}/{label}/test_acc", "value": acc, "unit": "fraction",
        "yardstick": f"consistency/{model}/async/test_acc",
        "yardstick_value": base[3] if base else None,
        "ratio": acc / base[3] if base and acc is not None and base[3] else None,
        "better": "higher"})
    summary.append({"model": model, "consistency": label, "total_samples_per_s": total,
                    "test_acc": acc})
print(json.dumps({"bench": "consistency", "duration_s": float(duration), "workers": 2,
                  "servers": int(servers), "straggler": f"worker 1, --straggle_ms={straggle}",
                  "table": summary, "results": results, "logs": out_dir}))
PY
