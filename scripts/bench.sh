#!/usr/bin/env bash
# Runs the relaxps benchmark suite and prints ONE JSON document with every
# figure, its unit and its ratio to the yardstick measured in the same run
# (see docs/benchmarks.md). The document is also written to
# bench/results/bench-<timestamp>.json.
#
#   scripts/bench.sh [--quick] [--skip_build] [--only=zmq,ps,client,optimizer,checkpoint,store,wal,overhead,consistency,chain,curve,instructions,durability,range_move]
#
# --quick: short time boxes, under 3 minutes on 2 cores: every figure with a
# target but the 64 MiB ones; no consistency-model comparison (no target)
# and no instruction counts (callgrind). The default (full) run takes under
# 15.
# Environment: BUILD_DIR (default build; built with scripts/build.sh unless
# --skip_build), JOBS (build parallelism, default 2).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
QUICK=0
SKIP_BUILD=0
ONLY=zmq,ps,client,optimizer,checkpoint,store,wal,overhead,consistency,chain,curve,instructions,durability,range_move
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK=1 ;;
    --skip_build) SKIP_BUILD=1 ;;
    --only=*) ONLY=${arg#*=} ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }

export BUILD_DIR=${BUILD_DIR:-build}
BIN="$ROOT/$BUILD_DIR/bin"
case "$BUILD_DIR" in /*) BIN="$BUILD_DIR/bin" ;; esac
export BIN

if [ "$SKIP_BUILD" != 1 ]; then
  echo "bench.sh: building in $BUILD_DIR" >&2
  JOBS=${JOBS:-2} "$ROOT/scripts/build.sh" >"${TMPDIR:-/tmp}/relaxps-bench-build.log" 2>&1 || {
    tail -n 30 "${TMPDIR:-/tmp}/relaxps-bench-build.log" >&2
    echo "bench.sh: build failed (log: ${TMPDIR:-/tmp}/relaxps-bench-build.log)" >&2
    exit 1
  }
fi

STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$ROOT/bench/results"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/relaxps-bench-$STAMP.XXXXXX")
INPUTS=()
START=$(date +%s)

run() {  # run NAME CMD... : stdout -> $WORK/NAME.json, stderr -> $WORK/NAME.log
  local name=$1; shift
  local t0; t0=$(date +%s)
  echo "bench.sh: [$(( t0 - START ))s] $name: $*" >&2
  "$@" >"$WORK/$name.json" 2>"$WORK/$name.log"
  local rc=$?
  [ $rc = 0 ] || echo "bench.sh: $name exited with $rc; last lines of $WORK/$name.log:
$(tail -n 5 "$WORK/$name.log")" >&2
  INPUTS+=("$name=$WORK/$name.json")
}

have() { [ -x "$BIN/$1" ]; }

if [ "$QUICK" = 1 ]; then
  Q=(--quick --sizes=4096,1048576,16777216)
  # The ps bench measures its own zero-copy echo yardsticks at every size;
  # the standalone table is cut to the small sizes here.
  ZMQ_ARGS=(--quick --sizes=4096,1048576)
  OPT_ARGS=(--iters=3 --reps=3)
  OVERHEAD_S=5
  OVERHEAD_ARGS=(--duration_s=$OVERHEAD_S --reps=1)
  STORE_ARGS=(--mb=16 --seconds=1 --reps=2 --only=rocksdb/flush1)
  STORE_DIRTY_ARGS=(--seconds=1 --reps=2)
  WAL_ARGS=(--seconds=1 --reps=1)
  CONSISTENCY_S=0
  CHAIN_ARGS=(--duration_s=5 --quick)
else
  # Sized to finish in under 15 minutes on 2 cores: every configuration and
  # size, shorter time boxes, and 8 in flight only up to 16 MiB (64 MiB x 8
  # in flight alone took minutes and adds nothing the 1-in-flight figure
  # does not show).
  Q=(--seconds=0.5 --reps=2 --deep_max_bytes=16777216)
  ZMQ_ARGS=()
  OPT_ARGS=()
  OVERHEAD_S=15
  OVERHEAD_ARGS=(--duration_s=$OVERHEAD_S --curve_models=cnn --wal_durable_models=mlp)
  STORE_ARGS=(--mb=16 --seconds=2 --reps=5)
  STORE_DIRTY_ARGS=(--seconds=2 --reps=5)
  WAL_ARGS=(--seconds=2 --reps=5)
  CONSISTENCY_S=40
  CHAIN_ARGS=(--duration_s=20)
fi

if want zmq; then
  if have relaxps-bench-zmq; then run zmq "$BIN/relaxps-bench-zmq" "${ZMQ_ARGS[@]}";
  else echo "bench.sh: relaxps-bench-zmq not built; skipped" >&2; fi
fi
if want ps; then
  if have relaxps-bench-ps; then run ps "$BIN/relaxps-bench-ps" "${Q[@]}";
  else echo "bench.sh: relaxps-bench-ps not built; skipped" >&2; fi
fi
if want client; then
  # The public client library and the Python module, every process separate
  # (bench/client_bench.py): the issue-41 figures, the w2s2 ones included,
  # with each process's page faults and CPU per GB.
  if have relaxps-bench-client; then
    PYDIR="$(dirname "$BIN")/python"
    [ -d "$PYDIR/relaxps" ] || PYDIR=""
    CLIENT_ARGS=(--bin="$BIN" --pythonpath="$PYDIR")
    [ "$QUICK" = 1 ] && CLIENT_ARGS+=(--quick)
    run client /usr/bin/python3 "$ROOT/bench/client_bench.py" "${CLIENT_ARGS[@]}"
  else echo "bench.sh: relaxps-bench-client not built; skipped" >&2; fi
fi
if want optimizer && have relaxps-bench-optimizer; then
  run optimizer "$BIN/relaxps-bench-optimizer" "${OPT_ARGS[@]}"
fi
if want checkpoint && have relaxps-bench-checkpoint; then
  # Its flags are the storage engineer's; try --quick and fall back to defaults.
  if [ "$QUICK" = 1 ] && "$BIN/relaxps-bench-checkpoint" --helpshort 2>&1 | grep -q -- '-quick'; then
    run checkpoint "$BIN/relaxps-bench-checkpoint" --quick
  else
    run checkpoint "$BIN/relaxps-bench-checkpoint"
  fi
fi
if want store && have relaxps-bench-store; then
  run store "$BIN/relaxps-bench-store" "${STORE_ARGS[@]}"
  # Dirty-chunk flushes: 4 MiB of a 64 MiB table trained per clock, flushed
  # every 10 clocks, against the same store never flushing.
  run store_dirty "$BIN/relaxps-bench-store" --mb=64 --push_mb=4 --only=rocksdb/flush10 \
    "${STORE_DIRTY_ARGS[@]}"
  if [ "$QUICK" = 0 ]; then
    run store_1MiB "$BIN/relaxps-bench-store" --mb=1 --seconds=2 --reps=5
    # One 1 MiB flush alone, against a plain write + fdatasync of 1 MiB.
    run store_flush_cost "$BIN/relaxps-bench-store" --mb=1 --flush_cost=200
  fi
fi
if want wal && have relaxps-bench-wal; then
  # --wal_per_update: group commit against one WAL sync per push (wal/...).
  run wal "$BIN/relaxps-bench-wal" "${WAL_ARGS[@]}"
fi
if want overhead; then
  run overhead "$ROOT/bench/training_overhead.sh" "${OVERHEAD_ARGS[@]}" \
    --out_dir="$WORK/overhead"
fi
if want overhead && [ "$QUICK" = 0 ]; then
  # Issue 41 point 3: the PyTorch trainer through the Python module against
  # the same model in plain PyTorch (its --local run), same threads.
  if [ -d "$(dirname "$BIN")/python/relaxps" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    RELAXPS_PYTHONPATH="$(dirname "$BIN")/python" run pytorch "$ROOT/bench/training_overhead.sh" \
      --trainer="$ROOT/examples/pytorch_cnn.py" --models=cnn --duration_s="$OVERHEAD_S" \
      --out_dir="$WORK/pytorch"
  else
    echo "bench.sh: the Python module or torch is missing; the PyTorch figure is skipped" >&2
  fi
fi
if want consistency && [ "$CONSISTENCY_S" -gt 0 ]; then
  run consistency "$ROOT/bench/consistency_bench.sh" --duration_s="$CONSISTENCY_S" \
    --out_dir="$WORK/consistency"
fi

if want chain; then
  # Chain replication R=2 against R=1 on the same 3 servers (ratios inside).
  run chain "$ROOT/bench/chain_bench.sh" "${CHAIN_ARGS[@]}" --out_dir="$WORK/chain"
fi

if want curve && have relaxps-bench-ps; then
  # --security=curve against plain TCP, same process layout (ratios inside).
  if [ "$QUICK" = 1 ]; then run curve "$ROOT/bench/curve_bench.sh" --seconds=0.3 --reps=2;
  else run curve "$ROOT/bench/curve_bench.sh" --seconds=1 --reps=3; fi
fi

if want instructions && [ "$QUICK" = 0 ] && have relaxps-bench-ps; then
  # Instructions per 4 KiB PushPull on the application threads against the
  # echo's, counted under callgrind: steady where the timed 4 KiB figures
  # swing by tens of percent (skipped without valgrind).
  run instructions /usr/bin/python3 "$ROOT/bench/instructions_per_op.py" --bin="$BIN"
  # The same count for a 4 KiB push_pull through the Python module against
  # the public C++ API (issue 41: what the 4 KiB python_vs_cpp figure is made of).
  if [ -d "$(dirname "$BIN")/python/relaxps" ]; then
    run python_instructions /usr/bin/python3 "$ROOT/bench/python_instructions.py" \
      --bin="$BIN" --pythonpath="$(dirname "$BIN")/python"
  fi
fi

# Issue 41 point 5, durability at a reasonable price (kept apart from the
# figures above): an incremental checkpoint (10% of the chunks changed)
# against a full one, bytes and time; and mlp training through a
# --wal_per_update server against the same server without it (measured by
# the overhead bench when it runs, else here).
durability_figures() {
  if have relaxps-bench-incremental-checkpoint; then
    if [ "$QUICK" = 1 ]; then
      run durability_checkpoint "$BIN/relaxps-bench-incremental-checkpoint" --mb=64 --rounds=3
    else
      run durability_checkpoint "$BIN/relaxps-bench-incremental-checkpoint" --mb=64 --rounds=5
    fi
  fi
  if ! want overhead; then
    run durability_wal "$ROOT/bench/training_overhead.sh" --models=mlp --wal_models=mlp \
      --reps=$([ "$QUICK" = 1 ] && echo 1 || echo 2) --duration_s="$OVERHEAD_S" \
      --out_dir="$WORK/durability_wal"
  fi
}
if want durability; then durability_figures; fi

if want range_move && have relaxps-bench-range-move; then
  # Issue 43: a dense range moved to a joined server, against the one-way
  # ZeroMQ echo of its pieces (same size, same window) in the same run.
  if [ "$QUICK" = 1 ]; then run range_move "$BIN/relaxps-bench-range-move" --quick;
  else run range_move "$BIN/relaxps-bench-range-move"; fi
fi

OUT="$ROOT/bench/results/bench-$STAMP.json"
python3 "$ROOT/bench/merge_results.py" --quick="$QUICK" --wall_s="$(( $(date +%s) - START ))" \
  --out="$OUT" "${INPUTS[@]}"
echo "bench.sh: done in $(( $(date +%s) - START ))s; wrote $OUT (raw outputs and logs in $WORK)" >&2
python3 - "$OUT" >&2 <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for t in doc["targets"]:
    v = t["value"]
    mark = {True: "MET ", False: "MISS", None: "n/a "}[t["met"]]
    vs = "n/a" if v is None else f"{v:.3f}"
    note = f" ({t['note']})" if t.get("note") else ""
    print(f"  {mark} {t['target']}: {t['measure']} {vs} {t['op']} {t['bound']}{note}")
print("  load average at the end (1, 5, 15 min): " +
      ", ".join(f"{x:.1f}" for x in doc["host"]["load_avg_at_end"]) +
      f" on {doc['host']['nproc']} cores; wall {doc.get('wall_s', 0):.0f} s")
for k, e in doc["errors"].items():
    print(f"  ERROR {k}: {e}")
PY
