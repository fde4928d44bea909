#!/usr/bin/env bash
# Smoke test of scripts/slurm/relaxps.sbatch without Slurm: stand-ins for
# srun (runs its command once, here, dropping srun's options: one step per
# process, as relaxps-launch's slurm backend starts them) and scontrol (the
# allocation is one node, localhost). The job (coordinator, 2 servers, 2
# workers, curve keys, advertising 127.0.0.1) must end with exit 0, a trained
# model in summary.json and no process left. What it cannot check: real srun
# options, node placement, the shared filesystem (scripts/selftest/slurm.sh).
#   slurm_sbatch_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
SRC=$1 BIN=$2
SCALE=${RELAXPS_TEST_TIME_SCALE:-1}
OUT=$(mktemp -d /tmp/relaxps_sbatch_test_XXXXXX)
trap 'rm -rf "$OUT"' EXIT
fail() { echo "FAIL: $*"; tail -n 20 "$OUT/job.out"; exit 1; }
mkdir -p "$OUT/fake"
cat >"$OUT/fake/srun" <<'SRUN'
#!/usr/bin/env bash
# Stand-in for srun inside an allocation: one task, here (options ignored).
while [[ $1 == --* ]]; do shift; done
exec "$@"
SRUN
printf '#!/bin/sh\necho localhost\n' >"$OUT/fake/scontrol"
chmod +x "$OUT/fake/srun" "$OUT/fake/scontrol"
# Sanitized runs get twice the scaled time.
PATH="$OUT/fake:$PATH" SLURM_NTASKS=5 SLURM_JOB_NODELIST=localhost SLURM_JOB_ID=$$ \
  SLURM_SUBMIT_DIR="$OUT" RELAXPS_ROOT="$SRC" RELAXPS_BIN="$BIN" \
  RELAXPS_ADVERTISE_localhost=127.0.0.1 \
  timeout $((90 * SCALE)) bash "$SRC/scripts/slurm/relaxps.sbatch" --servers=2 --model=mlp \
  --duration_s=$((8 * SCALE * (SCALE > 1 ? 2 : 1))) --eval_every_s=0 >"$OUT/job.out" 2>&1
rc=$?
[ $rc = 0 ] || fail "relaxps.sbatch exited $rc"
RUN="$OUT/runs/slurm-$$"
/usr/bin/python3 - "$RUN/summary.json" <<'PY' || fail "summary.json checks"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["backend"] == "slurm" and s["verdict"] == "done" and s["exit_code"] == 0, s["reason"]
names = sorted(p["name"] for p in s["processes"])
assert names == ["coordinator", "server-0", "server-1", "worker-0", "worker-1"], names
assert all(p["exit_codes"] == [0] for p in s["processes"]), s["processes"]
assert s["final_accuracy"] is not None and s["final_accuracy"] >= 0.7, s["final_accuracy"]
assert s["left_running"] == [], s["left_running"]
print("accuracy", s["final_accuracy"])
PY
grep -q "coordinator tcp://127.0.0.1:" "$OUT/job.out" || fail "the coordinator did not advertise 127.0.0.1"
[ "$(stat -c %a "$RUN/keys")" = 700 ] || fail "the keys folder is not private"
! pgrep -f "$OUT/" >/dev/null || fail "processes left: $(pgrep -af "$OUT/")"
echo "PASS: relaxps.sbatch with stand-in srun/scontrol: 5 steps, exit 0, no process left"
