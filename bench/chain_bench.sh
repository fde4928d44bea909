#!/usr/bin/env bash
# Cost of chain replication: the same 3 servers with --recovery=chain
# --replicas=2 against no replication (R=1), measured one after the other in
# this invocation. The R=1 run is the yardstick (ratio = R2 / R1):
#  - dense 16 MiB push-pull throughput, 1 worker, 1 in flight
#    (relaxps-bench-ps --replicas; target >= 0.5x: each update moves three
#    payloads instead of two on the same 2 cores);
#  - dense 4 KiB push-pull p50 latency (target <= 2x);
#  - cnn training samples/s of one worker, async (target >= 0.9x).
#
#   bench/chain_bench.sh [--duration_s=20] [--quick] [--out_dir=DIR]
#
# --quick: the push-pull figures with 0.3 s time boxes, best of 2 (default:
# 1 s, best of 3).
#
# Environment: BIN (default build/bin). Prints one JSON object on stdout.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/${BUILD_DIR:-build}/bin}
DURATION_S=20
OUT_DIR=""
PS_BOX=(--seconds=1 --reps=3)
for arg in "$@"; do
  case "$arg" in
    --duration_s=*) DURATION_S=${arg#*=} ;;
    --out_dir=*) OUT_DIR=${arg#*=} ;;
    --quick) PS_BOX=(--seconds=0.3 --reps=2) ;;
    *) echo "chain_bench.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
[ -n "$OUT_DIR" ] || OUT_DIR=$(mktemp -d "${TMPDIR:-/tmp}/relaxps-chain-bench.XXXXXX")
mkdir -p "$OUT_DIR"
source "$ROOT/bench/cluster_lib.sh"
trap 'cluster_stop' EXIT
trap 'cluster_stop; exit 130' INT TERM

figure() {  # figure LOG NAME: the value of a relaxps-bench-ps figure
  awk -v n="$2" '$1 == n {print $2; exit}' "$1"
}
declare -A PP16 LAT4 SPS
for r in 1 2; do
  "$BIN/relaxps-bench-ps" --configs=1x3 --sizes=4096,16777216 --in_flight=1 --sparse=false \
    "${PS_BOX[@]}" --replicas=$r >"$OUT_DIR/ps-r$r.json" 2>"$OUT_DIR/ps-r$r.log"
  PP16[$r]=$(figure "$OUT_DIR/ps-r$r.log" dense/pushpull/w1s3/16MiB/if1/gbps)
  LAT4[$r]=$(figure "$OUT_DIR/ps-r$r.log" dense/pushpull/w1s3/4KiB/if1/p50_us)
  echo "chain_bench: R=$r 16 MiB push-pull ${PP16[$r]:-?} GB/s, 4 KiB p50 ${LAT4[$r]:-?} us" >&2
done
for r in 1 2; do
  dir="$OUT_DIR/cnn-r$r"
  flags=(--consistency=async)
  [ "$r" -gt 1 ] && flags+=(--recovery=chain --replicas="$r")
  cluster_start "$dir" 3 1 "${flags[@]}" || exit 1
  cluster_worker "$dir" 0 --model=cnn --num_workers=1 --duration_s="$DURATION_S" \
    --eval_every_s=0 --final_eval=false --log_every_s=5 --seed=1
  cluster_wait_workers
  cluster_stop
  SPS[$r]=$(final_field "$dir/worker-0.log" samples_per_s)
  echo "chain_bench: R=$r cnn ${SPS[$r]:-?} samples/s" >&2
done

python3 - "${PP16[1]:-0}" "${PP16[2]:-0}" "${LAT4[1]:-0}" "${LAT4[2]:-0}" "${SPS[1]:-0}" \
  "${SPS[2]:-0}" <<'PY'
import json, sys
pp1, pp2, l1, l2, s1, s2 = map(float, sys.argv[1:])
ratio = lambda a, b: a / b if b else 0.0
rows = [
    ("chain/r2/dense_16MiB_pushpull_w1s3/gbps", "GB/s", "higher", pp2, pp1, ">= 0.5"),
    ("chain/r2/dense_4KiB_pushpull_w1s3/p50_us", "us", "lower", l2, l1, "<= 2"),
    ("chain/r2/cnn_async_w1s3/samples_per_s", "samples/s", "higher", s2, s1, ">= 0.9"),
]
results = []
for name, unit, better, v, y, target in rows:
    r = ratio(v, y)
    print(f"{name:42s} R=2 {v:10.4g}  R=1 {y:10.4g} {unit:9s} ratio {r:.3f} (target {target})",
          file=sys.stderr)
    results.append({"name": name, "value": v, "unit": unit,
                    "yardstick": name.replace("chain/r2/", "chain/r1/"), "yardstick_value": y,
                    "ratio": r, "better": better, "target": target})
print(json.dumps({"bench": "chain", "results": results}))
PY
