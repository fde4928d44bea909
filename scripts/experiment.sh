#!/usr/bin/env bash
# Failure-injection experiments in one command: runs a matrix of relaxps jobs
# through scripts/run_local.sh, kills / pauses servers on a schedule, and
# writes per-run merged CSVs, a per-set summary.csv, report.md and PNG plots.
#
#   scripts/experiment.sh SET [flags]
#
# Sets:
#   ttf    "Training Through Failure" (arXiv 2406.05546): 1 worker, cnn, sgd
#          lr 0.01 batch 32, evaluator every 2 s, kills at 30 s and 80 s, each
#          server back 20 s later, 210 s runs; every registered recovery
#          policy (relaxps-ctl policies) x kills 0,1,2.
#   ttf4   the same with 4 workers.
# Flags (override the set's values):
#   --policies=P1,P2,... (default: every registered policy)   --kills=0,1,2
#   --consistency=async,bsp   --workers=1,4   --repeats=N   --duration_s=S
#   --schedule=ttf|random --seed=S   (random: seeded fault times and targets)
#   --faults=kill,stop,partition   (SIGKILL, restarted --down_s later;
#          SIGSTOP, SIGCONT --down_s later; iptables DROP on the server's ports
#          for --down_s, the job in its own network namespace; coordinator:
#          two coordinators on a local ZooKeeper, the leader SIGKILLed at each
#          fault time, alternating 0, 1, ..., restarted --down_s later as a
#          standby; needs java and zookeeper)
#   --model=cnn|mlp   --quick (a compressed schedule: 30 s runs, faults at 6 s
#   and 16 s, back 5 s later)   --fault_at=T1,T2 (the ttf schedule's fault
#   times, seconds from the start of each run)   --out=DIR (default
#   runs/experiments/SET)
#   --no_plots   --down_s=S (outage length)   --eval_every_s=S
#   --keep_data (keep each run's RocksDB data and checkpoints; default: deleted
#   once the run is analyzed)   --reanalyze (analyze existing runs again)
#
# Policies come from the registry (relaxps-ctl policies --json, saved as
# OUT/policies.json): each runs with the servers, replicas and store its
# needs name, restarted servers get its restart flags, and a policy that
# does not tolerate a server loss runs only without faults. A policy that
# relaxps-coordinator refuses (exit 2) is skipped with a line in the
# progress output and in report.md.
#
# Resumable: a run whose DIR/runs/<id>/metrics.json exists is skipped; the
# summary and plots are rebuilt from every finished run each time.
# Environment: RELAXPS_BIN (binaries, default build/bin), RELAXPS_TTF_CSV (TTF's
# logged curves, default ../shared/ttf/ttf_accuracy.csv next to the checkout).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
EXP_PY="$ROOT/scripts/experiment"

usage() { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "experiment.sh: $*" >&2; exit 2; }

[ $# -ge 1 ] || { usage; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac
SET=$1; shift
POLICIES=""
KILLS=0,1,2
CONSISTENCY=async
WORKERS=1
REPEATS=1
DURATION_S=210
SCHEDULE=ttf
SEED=1
FAULTS=kill
MODEL=cnn
QUICK=0
OUT=""
PLOTS=1
KEEP_DATA=0
REANALYZE=0
DOWN_S=20
EVAL_EVERY_S=2
FAULT_AT=(30 80)
case "$SET" in
  ttf) ;;
  ttf4) WORKERS=4 ;;
  *) die "unknown set '$SET' (ttf, ttf4; see --help)" ;;
esac
USER_DURATION=""
USER_FAULT_AT=""
for arg in "$@"; do
  v=${arg#*=}
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --policies=*) POLICIES=$v ;;
    --kills=*) KILLS=$v ;;
    --consistency=*) CONSISTENCY=$v ;;
    --workers=*) WORKERS=$v ;;
    --repeats=*) REPEATS=$v ;;
    --duration_s=*) USER_DURATION=$v ;;
    --fault_at=*) USER_FAULT_AT=$v ;;
    --schedule=*) SCHEDULE=$v ;;
    --seed=*) SEED=$v ;;
    --faults=*) FAULTS=$v ;;
    --model=*) MODEL=$v ;;
    --quick) QUICK=1 ;;
    --out=*) OUT=$v ;;
    --no_plots) PLOTS=0 ;;
    --keep_data) KEEP_DATA=1 ;;
    --reanalyze) REANALYZE=1 ;;
    --down_s=*) DOWN_S=$v ;;
    --eval_every_s=*) EVAL_EVERY_S=$v ;;
    *) die "unexpected argument '$arg' (see --help)" ;;
  esac
done
if [ "$QUICK" = 1 ]; then DURATION_S=30; FAULT_AT=(6 16); DOWN_S=5; fi
[ -n "$USER_DURATION" ] && DURATION_S=$USER_DURATION
if [ -n "$USER_FAULT_AT" ]; then
  [[ $USER_FAULT_AT =~ ^[0-9]+(,[0-9]+)*$ ]] ||
    die "--fault_at=$USER_FAULT_AT: expected whole seconds, e.g. --fault_at=30,80"
  IFS=, read -r -a FAULT_AT <<<"$USER_FAULT_AT"
fi

# ---- Validation ----------------------------------------------------------------
for v in REPEATS DURATION_S SEED DOWN_S; do
  [[ ${!v} =~ ^[0-9]+$ ]] && [ "${!v}" -gt 0 -o "$v" = SEED ] || die "--${v,,} must be a positive integer"
done
[[ $EVAL_EVERY_S =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--eval_every_s must be a number"
BIN=${RELAXPS_BIN:-$ROOT/build/bin}
source "$ROOT/scripts/policies.sh"
load_policies "$BIN" || exit 2
[ -n "$POLICIES" ] || POLICIES=$(IFS=,; echo "${POLICY_NAMES[*]}")
IFS=, read -ra POLICY_LIST <<<"$POLICIES"
IFS=, read -ra KILL_LIST <<<"$KILLS"
IFS=, read -ra CONS_LIST <<<"$CONSISTENCY"
IFS=, read -ra WORKER_LIST <<<"$WORKERS"
IFS=, read -ra FAULT_LIST <<<"$FAULTS"
for p in "${POLICY_LIST[@]}"; do
  is_policy "$p" || die "unknown policy '$p' (registered: ${POLICY_NAMES[*]})"
done
for k in "${KILL_LIST[@]}"; do [[ $k =~ ^[0-9]$ ]] || die "--kills: '$k' is not a count 0-9"; done
for c in "${CONS_LIST[@]}"; do
  case "$c" in async|bsp|ssp) ;; *) die "unknown consistency '$c'" ;; esac
done
for w in "${WORKER_LIST[@]}"; do [[ $w =~ ^[1-9][0-9]*$ ]] || die "--workers: '$w'"; done
for f in "${FAULT_LIST[@]}"; do
  case "$f" in kill|stop|partition|coordinator) ;; *) die "unknown fault '$f' (kill, stop, partition, coordinator)" ;; esac
done
case "$SCHEDULE" in ttf|random) ;; *) die "--schedule must be ttf or random" ;; esac
case "$MODEL" in cnn|mlp|mlp-*) ;; *) die "--model must be cnn or mlp" ;; esac

TTF_CSV=${RELAXPS_TTF_CSV:-$ROOT/../shared/ttf/ttf_accuracy.csv}
for b in relaxps-coordinator relaxps-server relaxps-worker; do
  [ -x "$BIN/$b" ] || die "$BIN/$b not found: run scripts/build.sh first"
done
[ -n "$OUT" ] || OUT="$ROOT/runs/experiments/$SET"
mkdir -p "$OUT/runs" || exit 1
OUT=$(cd "$OUT" && pwd)
echo "$POLICIES_JSON" >"$OUT/policies.json"
LOG="$OUT/progress.log"
say() { echo "$*" | tee -a "$LOG"; }

source "$ROOT/scripts/experiment/matrix.sh"

say "experiment.sh $SET: $(date -u +%FT%TZ) out=$OUT duration=${DURATION_S}s faults=${FAULTS}" \
    "schedule=${SCHEDULE} (seed ${SEED}) model=${MODEL} repeats=${REPEATS}"
probe_policies
build_matrix
run_matrix
"$PY" "$EXP_PY/summarize.py" --out="$OUT" --set="$SET" --ttf_csv="$TTF_CSV" \
    --fault_at="${FAULT_AT[*]}" --down_s="$DOWN_S" --duration_s="$DURATION_S" \
    --skipped="$OUT/skipped.txt" --kills="$KILLS" \
    --schedule="$([ "$SCHEDULE" = ttf ] && echo ttf || echo "random, seed $SEED")" || { echo "experiment.sh: summary failed" >&2; exit 1; }
if [ "$PLOTS" = 1 ]; then
  if command -v gnuplot >/dev/null 2>&1; then
    (cd "$OUT/plots" && gnuplot plots.gp) || { echo "experiment.sh: gnuplot failed" >&2; exit 1; }
  else
    echo "experiment.sh: gnuplot not found (scripts/install_deps.sh); no plots" >&2
  fi
fi
say "experiment.sh: $SET done at $(date -u +%T) in $(( $(date +%s) - T_START )) s: $OUT/summary.csv," \
    "$OUT/report.md, $(ls "$OUT"/plots/*.png 2>/dev/null | wc -l) PNGs in $OUT/plots"
[ "$FAILED" = 0 ] || { echo "experiment.sh: $FAILED run(s) failed (see report.md)" >&2; exit 1; }
exit 0
