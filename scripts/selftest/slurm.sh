#!/usr/bin/env bash
# relaxps under real Slurm, on one machine (issue 38): Debian's slurmctld,
# slurmd and munge, configured here in a temporary directory (its own
# slurm.conf, ports, state and spool dirs, a munge key made for it, one node
# with this machine's CPUs; scripts/selftest/slurm_cluster.sh). The same job
# (2 servers, 2 workers, mlp, async, checkpoint recovery; 5 tasks on the
# machine's CPUs with --overcommit) runs
#   1. through `sbatch scripts/slurm/relaxps.sbatch`,
#   2. through `salloc` running the same script (each process an srun step),
# and must finish with exit 0 and its accuracy in summary.json; then
#   3. a third run is cancelled with `scancel` mid-training and no relaxps
#      process may be left behind.
#   scripts/selftest/slurm.sh [BIN_DIR]     (root; exits 77 = skipped without)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# ctest passes SOURCE_DIR BIN_DIR; by hand: [BIN_DIR].
if [ $# -ge 2 ]; then BIN=$2; else BIN=${1:-${RELAXPS_BIN:-$ROOT/build/bin}}; fi
BIN=$(cd "$BIN" 2>/dev/null && pwd) || { echo "FAIL: no binaries in ${BIN}"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (slurmd, munged)"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq slurmctld slurmd slurm-client munge) >/dev/null ||
    skip "cannot install slurmctld, slurmd and munge"
fi
# shellcheck source=scripts/selftest/slurm_cluster.sh
source "$ROOT/scripts/selftest/slurm_cluster.sh"
DIR=$(mktemp -d /tmp/relaxps_slurm_selftest_XXXXXX)
chmod 755 "$DIR"  # munged wants its socket reachable by every user.
cleanup() {
  scancel --user=root >/dev/null 2>&1
  slurm_down
  if [ -n "${KEEP:-}" ]; then echo "kept $DIR"; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -n 15 "$DIR"/*.out 2>/dev/null; exit 1; }
slurm_up "$DIR/slurm" || fail "the Slurm cluster did not start"
echo "cluster: $(sinfo -h -o '%P %D node(s) %c CPUs %t')"

export RELAXPS_ROOT=$ROOT RELAXPS_BIN=$BIN
JOB_FLAGS=(--servers=2 --workers=2 --security=plain --recovery=checkpoint --consistency=async
           --model=mlp --duration_s=20)
check_summary() {  # check_summary RUN_DIR WHAT
  /usr/bin/python3 - "$1/summary.json" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
acc = s.get("final_accuracy")
print(f"{sys.argv[2]}: verdict={s.get('verdict')} exit={s.get('exit_code')} final_accuracy={acc} "
      f"backend={s.get('backend')}")
assert s.get("verdict") == "done" and s.get("exit_code") == 0, s.get("reason")
assert acc is not None and acc > 0.5, acc
PY
}
relaxps_left() {  # pids of this test's relaxps processes (binaries or the launcher) still running
  local p
  # Only this test's: its files or its working folder are under $DIR (other
  # relaxps jobs may run on the machine meanwhile).
  for p in $(pgrep -f "$BIN/relaxps-|launcher/relaxps-launch"); do
    [ "$p" = $$ ] && continue
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "$DIR/" ||
       [[ "$(readlink "/proc/$p/cwd" 2>/dev/null)" == "$DIR"* ]]; then
      echo "$p"
    fi
  done
}

# 1. sbatch.
id=$(sbatch --parsable --nodes=1 --ntasks=5 --overcommit --chdir="$DIR" --output="$DIR/sbatch-%j.out" \
  "$ROOT/scripts/slurm/relaxps.sbatch" --out_dir="$DIR/run-sbatch" "${JOB_FLAGS[@]}") ||
  fail "sbatch refused the job"
# Every wait is bounded, so the script ends (and cleans up) before ctest's limit.
for _ in $(seq 1 240); do
  [ -z "$(timeout 5 squeue -h -j "$id" 2>/dev/null)" ] && break
  sleep 0.5
done
[ -z "$(squeue -h -j "$id" 2>/dev/null)" ] && [ -f "$DIR/run-sbatch/summary.json" ] ||
  fail "the sbatch job did not finish with a summary.json"
check_summary "$DIR/run-sbatch" sbatch || fail "sbatch run"

# 2. salloc, the script's srun steps inside the allocation.
timeout 150 salloc --nodes=1 --ntasks=5 --overcommit "$ROOT/scripts/slurm/relaxps.sbatch" --out_dir="$DIR/run-salloc" \
  "${JOB_FLAGS[@]}" >"$DIR/salloc.out" 2>&1 || fail "salloc run exited $?"
check_summary "$DIR/run-salloc" salloc || fail "salloc run"

# 3. scancel mid-run.
id=$(sbatch --parsable --nodes=1 --ntasks=5 --overcommit --chdir="$DIR" --output="$DIR/cancel-%j.out" \
  "$ROOT/scripts/slurm/relaxps.sbatch" --out_dir="$DIR/run-cancel" "${JOB_FLAGS[@]}" \
  --duration_s=120) || fail "sbatch refused the job to cancel"
for _ in $(seq 1 120); do
  grep -q '"kind": *"progress"' "$DIR/run-cancel/events.jsonl" 2>/dev/null && break
  sleep 0.5
done
grep -q '"kind": *"progress"' "$DIR/run-cancel/events.jsonl" 2>/dev/null || fail "no progress to cancel"
scancel "$id"
left=""
for _ in $(seq 1 60); do
  left=$(relaxps_left)
  [ -z "$left" ] && [ -z "$(timeout 5 squeue -h -j "$id" 2>/dev/null)" ] && break
  sleep 0.5
done
[ -z "$left" ] || fail "scancel left relaxps processes: $(ps -o pid,args -p "$(echo $left | tr ' ' ,)")"
echo "scancel: job $id cancelled mid-training; no relaxps process left"
echo "PASS: sbatch and salloc runs finished under real Slurm; scancel left nothing"
