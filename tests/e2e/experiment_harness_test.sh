#!/usr/bin/env bash
# End to end: scripts/experiment.sh runs a tiny set (mlp, checkpoint without
# and with one kill, 16 s runs) and writes summary.csv with the documented
# columns, per-run events with the kill and its restart, a stall that spans
# the outage, report.md and (with gnuplot) PNGs; a second invocation resumes
# (skips both runs).
#   experiment_harness_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
SRC=$1 BIN=$2
# Sanitizer builds run slower (RELAXPS_TEST_TIME_SCALE, see tests/test_util.h).
SCALE=${RELAXPS_TEST_TIME_SCALE:-1}
OUT=$(mktemp -d /tmp/relaxps_experiment_test_XXXXXX)
trap 'rm -rf "$OUT"' EXIT
fail() { echo "FAIL: $*"; echo "--- progress.log"; cat "$OUT/progress.log" 2>/dev/null; exit 1; }
# Times stretch with SCALE: sanitized processes start and restore several
# times slower, and the kill must come once training runs and leave time for
# the worker to step again after the restart (for the stall to span it).
ARGS=(ttf --quick --model=mlp --policies=checkpoint --kills=0,1 --duration_s=$((16 * SCALE))
      --fault_at=$((6 * SCALE)),$((16 * SCALE)) --down_s=3 --out="$OUT")
RELAXPS_BIN=$BIN timeout $((150 * SCALE)) "$SRC/scripts/experiment.sh" "${ARGS[@]}" || fail "experiment.sh exited with $?"

/usr/bin/python3 - "$OUT" "$SCALE" <<'PY' || fail "summary checks"
import csv, os, sys
out, scale = sys.argv[1], int(sys.argv[2])
rows = list(csv.DictReader(open(os.path.join(out, "summary.csv"))))
need = ["policy", "kills", "fault", "workers", "repeats", "status", "final_acc_mean",
        "final_acc_sd", "t070_mean", "t085_mean", "stall_s_mean", "recovery_s_mean",
        "regain_s_mean", "lost_updates_mean", "idle_frac_mean", "grads_computed_mean",
        "grads_applied_mean", "ttf_final_acc", "ttf_t070"]
missing = [c for c in need if c not in rows[0]]
assert not missing, f"summary.csv lacks {missing}"
by = {(r["policy"], r["kills"]): r for r in rows}
k0, k1 = by[("checkpoint", "0")], by[("checkpoint", "1")]
for r in (k0, k1):
    assert r["status"] == "ok", r
    assert 0.1 < float(r["final_acc_mean"]) <= 1, r["final_acc_mean"]
    assert int(float(r["grads_computed_mean"])) > 100, r["grads_computed_mean"]
# The kill (at 6 s, server back 3 s after its death) stops training for >= 3 s.
assert float(k1["stall_s_mean"]) >= 3.0, ("stall", k1["stall_s_mean"])
assert float(k1["stall_s_mean"]) > float(k0["stall_s_mean"]) + 2, (k0["stall_s_mean"], k1["stall_s_mean"])
assert float(k1["recovery_s_mean"]) >= 3.0, ("recovery", k1["recovery_s_mean"])
# Lost updates are counted (acknowledged parts minus what the servers reflect):
# the restart rolled back to the last checkpoint, the run without a kill lost none.
assert k1["lost_method"] == "counted" and int(float(k1["lost_updates_mean"])) > 0, k1
assert k0["lost_method"] == "counted" and int(float(k0["lost_updates_mean"])) == 0, k0
assert float(k1["idle_frac_mean"]) > 0.5, k1["idle_frac_mean"]
assert "sync ckpt" in k1["ttf_final_acc"], k1["ttf_final_acc"]
ev = list(csv.DictReader(open(os.path.join(out, "runs", "checkpoint-k1-kill-async-w1-r1", "events.csv"))))
kinds = [e["event"] for e in ev]
assert "kill" in kinds and "restart" in kinds, kinds
kill = next(float(e["time_s"]) for e in ev if e["event"] == "kill")
assert 5 * scale <= kill <= 8 * scale, kill
merged = os.path.join(out, "runs", "checkpoint-k1-kill-async-w1-r1", "merged.csv")
sources = {r["source"] for r in csv.DictReader(open(merged))}
assert sources == {"worker", "evaluator"}, sources
report = open(os.path.join(out, "report.md")).read()
assert "| checkpoint | 1 | kill |" in report, "report.md lacks the kill row"
print("summary OK: stall", k0["stall_s_mean"], "->", k1["stall_s_mean"], "lost", k1["lost_updates_mean"])
PY
if command -v gnuplot >/dev/null 2>&1; then
  n=$(ls "$OUT"/plots/*.png 2>/dev/null | wc -l)
  [ "$n" -ge 3 ] || fail "expected >= 3 PNGs, found $n"
fi
# Resumable: nothing is run again.
RELAXPS_BIN=$BIN timeout $((60 * SCALE)) "$SRC/scripts/experiment.sh" "${ARGS[@]}" >"$OUT/second.log" 2>&1 ||
  fail "second invocation exited with $?: $(cat "$OUT/second.log")"
[ "$(grep -c 'results exist, skipped' "$OUT/second.log")" = 2 ] || fail "not resumed: $(cat "$OUT/second.log")"
grep -q 'starting' "$OUT/second.log" && fail "a run was started again"
echo "PASS"
