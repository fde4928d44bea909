#!/usr/bin/env bash
# End to end: scripts/experiment.sh runs a tiny matrix (mlp, checkpoint
# without and with one kill, 16 s runs, every process's log to /dev/null)
# through relaxps-launch and writes summary.csv with the documented columns,
# true counts (the kill lost acknowledged updates, the run without none), a
# recovery from the workers' events, cell.json with its provenance, report.md
# and (with gnuplot) the PNG. The first invocation is killed with SIGKILL
# (its whole process group: experiment.sh, relaxps-launch and the job) in the
# middle of its second cell; a second one is interrupted with Ctrl-C in the
# middle of its rerun of that cell (exit 130, nothing left behind); a third
# skips the finished cell, reruns the killed one from scratch and finishes;
# a fourth runs nothing.
#   experiment_harness_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
SRC=$1 BIN=$2
# Sanitizer builds run slower (RELAXPS_TEST_TIME_SCALE, see tests/test_util.h).
SCALE=${RELAXPS_TEST_TIME_SCALE:-1}
OUT=$(mktemp -d /tmp/relaxps_experiment_test_XXXXXX)
trap 'rm -rf "$OUT"' EXIT
fail() { echo "FAIL: $*"; echo "--- progress.log"; cat "$OUT/progress.log" 2>/dev/null; exit 1; }
no_processes_left() {
  local left=""
  for _ in $(seq 1 50); do
    left=$(pgrep -f -- "$OUT/" | tr '\n' ' ')
    [ -z "$left" ] && return 0
    sleep 0.2
  done
  fail "processes of the $1 run left: $left"
}
# Starts experiment.sh in its own process group (PID), output to OUT/NAME.log,
# and returns once it has started its second cell.
start_until_second_cell() {
  RELAXPS_BIN=$BIN setsid "$SRC/scripts/experiment.sh" "${ARGS[@]}" >"$OUT/$1.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 $((600 * SCALE))); do
    grep -q '^\[2/2\].*: starting' "$OUT/$1.log" && return 0
    kill -0 $PID 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL -- -$PID
  fail "no second cell: $(cat "$OUT/$1.log")"
}
ARGS=(ttf --quick --model=mlp --policies=checkpoint --kills=0,1 --duration_s=$((16 * SCALE))
      --fault_at=$((6 * SCALE)) --down_s=3 --cooldown_s=0 --no_logs --out="$OUT")
# Killed mid-cell: once the second cell has run for 3 s.
start_until_second_cell killed
FIRST=$PID
sleep $((3 * SCALE))
kill -KILL -- -$FIRST
wait $FIRST 2>/dev/null
# The job's processes go with it (relaxps-launch starts them with a parent-death signal).
no_processes_left "killed"
# Ctrl-C (SIGINT to the whole process group) in the middle of the rerun of
# the killed cell: it stops the cell's job and exits 130 at once, leaving the
# cell unfinished.
start_until_second_cell interrupted
SECOND=$PID
sleep 2
kill -INT -- -$SECOND
for _ in $(seq 1 $((100 * SCALE))); do kill -0 $SECOND 2>/dev/null || break; sleep 0.2; done
if kill -0 $SECOND 2>/dev/null; then
  kill -KILL -- -$SECOND
  fail "Ctrl-C mid-cell: still running 20 s later: $(cat "$OUT/interrupted.log")"
fi
wait $SECOND
rc=$?
[ "$rc" = 130 ] || fail "Ctrl-C mid-cell: exit $rc, not 130: $(cat "$OUT/interrupted.log")"
grep -q 'interrupted; finished cells are kept' "$OUT/interrupted.log" || fail "no interrupt message"
[ "$(ls "$OUT"/cells/*/cell.json | wc -l)" = 1 ] || fail "the interrupted cell was recorded as finished"
no_processes_left "interrupted"
RELAXPS_BIN=$BIN timeout $((150 * SCALE)) "$SRC/scripts/experiment.sh" "${ARGS[@]}" >"$OUT/resumed.log" 2>&1 ||
  fail "resumed invocation exited with $?: $(cat "$OUT/resumed.log")"
[ "$(grep -c 'finished, skipped' "$OUT/resumed.log")" = 1 ] || fail "not resumed: $(cat "$OUT/resumed.log")"
[ "$(grep -c ': starting' "$OUT/resumed.log")" = 1 ] || fail "the killed cell not rerun alone: $(cat "$OUT/resumed.log")"
echo "killed mid-cell, resumed: $(grep -E '^\[[0-9]/2\]' "$OUT/resumed.log" | cut -c1-60 | tr '\n' ';')"

/usr/bin/python3 - "$OUT" "$SCALE" <<'PY' || fail "summary checks"
import csv, glob, json, os, sys
out, scale = sys.argv[1], int(sys.argv[2])
rows = list(csv.DictReader(open(os.path.join(out, "summary.csv"))))
need = ["variant", "fault", "workers", "runs", "as_expected", "final_acc_values",
        "recovery_s_values", "dip_values", "regain_s_values", "acked_lost_values",
        "dropped_values", "applied_late_values", "idle_frac_values", "throughput_vs_none",
        "late_staleness_hist"]
missing = [c for c in need if c not in rows[0]]
assert not missing, f"summary.csv lacks {missing}"
by = {r["fault"]: r for r in rows}
k0, k1 = by["nofault"], by["kill1"]
for r in (k0, k1):
    assert r["runs"] == "1" and r["as_expected"] == "1", r
    assert 0.1 < float(r["final_acc_values"]) <= 1, r["final_acc_values"]
    assert r["final_acc_mean"] == "", "a mean of one run"
# Counted, not estimated: the restart rolled back to the last checkpoint.
assert int(float(k1["acked_lost_values"])) > 0, k1
assert int(float(k0["acked_lost_values"])) == 0, k0
# ... and exactly what the restore had to lose: the pushes acknowledged before
# the kill that the restored checkpoint does not hold (one worker: within one).
lost, rolled = int(float(k1["acked_lost_values"])), int(float(k1["rolled_back_values"]))
assert abs(lost - rolled) <= 1, (lost, rolled)
# The worker's first acknowledged push came after the server was back (3 s).
assert float(k1["recovery_s_values"]) >= 2.5, k1["recovery_s_values"]
# Idle is measured (steps.csv's compute_ms, waits on the servers excluded):
# at least the 3 s outage of the 16 s run is idle (an mlp step computes for
# well under a millisecond, so most of the rest is too).
idle0, idle1 = float(k0["idle_frac_values"]), float(k1["idle_frac_values"])
assert 0 < idle0 < 1 and 2.5 / (16 * scale) <= idle1 < 1, (idle0, idle1)
cells = [json.load(open(p)) for p in glob.glob(os.path.join(out, "cells", "*", "cell.json"))]
assert len(cells) == 2 and all(c["finished"] and c["exit_code"] == 0 for c in cells), cells
assert all(c["commit"] and c["machine"]["cpus"] and len(c["load_after"]) == 3 for c in cells)
kill = next(c for c in cells if c["fault"] == "kill1")
m = json.load(open(os.path.join(out, "cells", kill["key"], "metrics.json")))
assert m["faults"][0]["kind"] == "kill" and m["faults"][0]["back_s"] > m["faults"][0]["time_s"]
assert not glob.glob(os.path.join(out, "cells", "*", "*.log")), "logs were written"
report = open(os.path.join(out, "report.md")).read()
assert "| checkpoint | kill1 | 1 |" in report, "report.md lacks the kill row"
assert "TTF final acc" not in report, "quick runs beside TTF's figures"
print("summary OK: acked lost", k1["acked_lost_values"], "of", k1["rolled_back_values"],
      "since the restored checkpoint; recovery", k1["recovery_s_values"])
PY
if command -v gnuplot >/dev/null 2>&1; then
  n=$(ls "$OUT"/plots/*.png 2>/dev/null | wc -l)
  [ "$n" -ge 2 ] || fail "expected 2 PNGs, found $n"
fi
# Finished: nothing is run again.
RELAXPS_BIN=$BIN timeout $((60 * SCALE)) "$SRC/scripts/experiment.sh" "${ARGS[@]}" >"$OUT/second.log" 2>&1 ||
  fail "second invocation exited with $?: $(cat "$OUT/second.log")"
[ "$(grep -c 'finished, skipped' "$OUT/second.log")" = 2 ] || fail "not resumed: $(cat "$OUT/second.log")"
grep -q 'starting' "$OUT/second.log" && fail "a cell was started again"
echo "PASS"
