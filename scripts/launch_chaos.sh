#!/usr/bin/env bash
# By hand (minutes): relaxps-launch --chaos=SEED for every registered recovery
# policy and SEEDS seeds each, through run_local.sh (mlp, the policy's
# experiment servers and replicas, an evaluator). A policy that tolerates no
# fault (none) gets one server kill instead. Prints one line per run from its
# summary.json (verdict, exit code, faults, restarts, accuracy) and checks
# that no process carrying the run's job tag is left. Exits 1 if a run of a
# policy that tolerates its faults did not exit 0, a run of a policy that
# does not tolerate them did not exit 3, or anything was left.
#   scripts/launch_chaos.sh [SEEDS=5] [DURATION_S=30] [POLICY,POLICY...=all]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${RELAXPS_BIN:-$ROOT/${BUILD_DIR:-build}/bin}
SEEDS=${1:-5} DURATION=${2:-30} ONLY=${3:-}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/relaxps-launch-chaos-XXXXXX")}
mkdir -p "$OUT" || exit 1
bad=0
while read -r p servers replicas restart tolerant; do
  [ -z "$ONLY" ] || [[ ",$ONLY," == *",$p,"* ]] || continue
  flags=(--servers="$servers" --recovery="$p" --restart_after_s=2 --checkpoint_every_s=2)
  [ "$replicas" -gt 1 ] && flags+=(--replicas="$replicas")
  for seed in $(seq 1 "$SEEDS"); do
    dir="$OUT/$p-$seed"
    fault=(--chaos="$seed")
    [ "$tolerant" = 1 ] || fault=(--kill_server=0@8)
    RELAXPS_BIN=$BIN "$ROOT/scripts/run_local.sh" --skip_build --model=mlp --duration_s="$DURATION" \
      --eval_every_s=0 --evaluator_every_s=3 --no_logs --out_dir="$dir" "${flags[@]}" "${fault[@]}" \
      >"$dir.out" 2>&1
    rc=$?
    /usr/bin/python3 - "$dir/summary.json" "$rc" "$tolerant" "$ROOT/launcher" <<'PY' || bad=1
import json, os, sys
s, rc, tolerant = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3] == "1"
faults = " ".join(f"{f['action']}:{f['target']}@{f['time_s']:.0f}" for f in s["faults"]) or "-"
sys.path.insert(0, sys.argv[4])
from relaxps_launch import proctools  # /proc/<pid>/environ holding the run's tag
left = proctools.tagged(s["job_tag"])
ok = (rc == 0 if tolerant else rc == 3) and not left and not s["left_running"]
print(f"{'ok ' if ok else 'BAD'} {s['recovery']:10} {os.path.basename(s['out_dir']):14} exit={rc} "
      f"verdict={s['verdict']} faults=[{faults}] restarts={len(s['restarts'])} "
      f"acc={s['final_accuracy']} left={len(left)}" + ("" if rc == 0 else f" reason: {s['reason']}"))
sys.exit(0 if ok else 1)
PY
  done
done < <("$BIN/relaxps-ctl" policies --json | /usr/bin/python3 -c '
import json, sys
for p in json.load(sys.stdin):
    n = p["needs"]
    tolerant = n["tolerates_server_loss"] or n["tolerates_pause"] or n["tolerates_chain_loss"]
    print(p["name"], n["experiment_servers"], n["min_replicas"], n["restart"], int(tolerant))')
echo "runs in $OUT"
exit $bad
