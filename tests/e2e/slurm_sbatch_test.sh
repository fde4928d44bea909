#!/usr/bin/env bash
# Smoke test of scripts/slurm/relaxps.sbatch without Slurm: a stand-in srun
# runs SLURM_NTASKS copies of the task locally, each with its SLURM_PROCID
# (0 coordinator, 1-2 servers, 3-4 workers, curve keys, advertising
# 127.0.0.1). The job must end by itself with exit 0, a trained model and no
# process left. What it cannot check: real srun options, node placement,
# the shared filesystem.
#   slurm_sbatch_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
SRC=$1 BIN=$2
SCALE=${RELAXPS_TEST_TIME_SCALE:-1}
OUT=$(mktemp -d /tmp/relaxps_sbatch_test_XXXXXX)
# On a hang, timeout signals its whole process group: every task.
trap 'rm -rf "$OUT"' EXIT
fail() { echo "FAIL: $*"; tail -n 20 "$OUT/job.out"; exit 1; }
mkdir -p "$OUT/fake"
cat >"$OUT/fake/srun" <<'SRUN'
#!/usr/bin/env bash
# Stand-in for srun: SLURM_NTASKS local copies of the command (options ignored).
while [[ $1 == --* ]]; do shift; done
pids=()
for i in $(seq 0 $((SLURM_NTASKS - 1))); do
  SLURM_PROCID=$i "$@" 2>&1 | sed -u "s/^/$i: /" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
SRUN
chmod +x "$OUT/fake/srun"
# Sanitized runs get twice the scaled time: under TSan 8 s x 5 trained 261
# steps to 0.674, short of the bar.
PATH="$OUT/fake:$PATH" SLURM_NTASKS=5 SLURM_JOB_ID=$$ SLURM_SUBMIT_DIR="$OUT" RELAXPS_ROOT="$SRC" \
  RELAXPS_BIN="$BIN" RELAXPS_ADVERTISE=127.0.0.1 RELAXPS_DATA_DIR="$OUT/data" \
  timeout $((90 * SCALE)) bash "$SRC/scripts/slurm/relaxps.sbatch" --servers=2 --model=mlp \
  --duration_s=$((8 * SCALE * (SCALE > 1 ? 2 : 1))) --eval_every_s=0 >"$OUT/job.out" 2>&1
rc=$?
[ $rc = 0 ] || fail "relaxps.sbatch exited $rc"
for role in "0: relaxps-coordinator listening on tcp://127.0.0.1:" "1: relaxps-server 0 listening" \
            "2: relaxps-server 1 listening" "3: final worker=0" "4: final worker=1"; do
  grep -q "^$role" "$OUT/job.out" || fail "no '$role' line"
done
acc=$(sed -n 's/^relaxps.sbatch: srun exited 0; final test accuracy \([0-9.]*\);.*/\1/p' "$OUT/job.out")
awk -v a="${acc:-0}" 'BEGIN {exit !(a >= 0.7)}' || fail "test accuracy ${acc:-none} < 0.7"
[ "$(stat -c %a "$OUT/runs/slurm-$$/keys")" = 700 ] || fail "the keys folder is not private"
! pgrep -f "$OUT/" >/dev/null || fail "processes left: $(pgrep -af "$OUT/")"
echo "PASS: relaxps.sbatch with a stand-in srun: 5 tasks by SLURM_PROCID, test accuracy $acc, exit 0"
