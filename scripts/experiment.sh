#!/usr/bin/env bash
# Failure-injection experiments in one command (docs/experiments.md): a
# resumable matrix of relaxps-launch jobs, then summary.csv, report.md and
# plots. Every figure comes from the runs' summary.json / events.jsonl /
# counters.json, none from a log.
#
#   scripts/experiment.sh SET [flags]
#
# Sets (scripts/experiment/cells.py): ttf (TTF's protocol: 1 worker, cnn,
# plain SGD lr 0.01 batch 32, evaluator every 2 s, kills at 30 s and 80 s,
# each server back 20 s later, 210 s), ttf4 (4 workers, 120 s: kill2, stop,
# partition, double_kill, coordinator), full (both worker counts, every fault).
# Flags:
#   --policies=V1,V2   policy variants (every registered policy and cells.py's
#                      flag variants; default all; one the
#                      binaries refuse is skipped with its reason)
#   --faults=F1,F2     nofault,kill1,kill2,stop,partition,coordinator,double_kill
#   --kills=0,1,2      shorthand for nofault,kill1,kill2
#   --workers=1,4  --seeds=1,2,3 | --repeats=N  --model=cnn|mlp  --consistency=C
#   --quick            30 s runs, faults at 6 s and 16 s, back 5 s later (CI
#                      only; never shown beside TTF's figures)
#   --duration_s=S  --fault_at=T1,T2  --down_s=S  --eval_every_s=S
#   --out=DIR          default runs/experiments/SET[-quick]
#   --no_logs          every process's output to /dev/null
#   --no_plots  --keep_data  --reanalyze  --cooldown_s=120  --dry_run
#   --pack             pack every finished cell for committing (docs/results):
#                      analysis and gzipped series kept, logs and per-step files
#                      removed (scripts/experiment/pack.py)
#   --finished_only    run no cell; --reanalyze / --pack the finished ones
# Resumable: a cell (config + seed) whose cell.json says finished is
# skipped; Ctrl-C keeps finished cells. Each cell first waits for the load
# average to drop under 1 per core (at most --cooldown_s) and records the
# commit, the machine and the load before and after.
# Environment: RELAXPS_BIN (binaries, default build/bin).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
usage() { sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; }
[ $# -ge 1 ] || { usage; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac
SET=$1; shift
OUT="" PLOTS=() ARGS=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --out=*) OUT=${arg#*=} ;;
    --no_plots) PLOTS=(--no_plots) ;;
    *) ARGS+=("$arg") ;;
  esac
done
QUICK=""; [[ " ${ARGS[*]-} " == *" --quick "* ]] && QUICK=-quick
OUT=${OUT:-$ROOT/runs/experiments/$SET$QUICK}
BIN=${RELAXPS_BIN:-$ROOT/build/bin}
[ -x "$BIN/relaxps-ctl" ] || { echo "experiment.sh: $BIN/relaxps-ctl not found: run scripts/build.sh first" >&2; exit 2; }
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 1
"$PY" "$ROOT/scripts/experiment/matrix.py" "$SET" --out="$OUT" --bin="$BIN" ${ARGS[@]+"${ARGS[@]}"}
RC=$?
[ "$RC" = 2 ] || [ "$RC" = 130 ] && exit "$RC"
[[ " ${ARGS[*]-} " == *" --dry_run "* ]] && exit "$RC"
"$PY" "$ROOT/scripts/experiment/summarize.py" --out="$OUT" ${PLOTS[@]+"${PLOTS[@]}"} || exit 1
exit "$RC"
