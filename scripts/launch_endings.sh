#!/usr/bin/env bash
# By hand (issue 38): N clean jobs in a row (default 20) must each exit 0 with
# the coordinator's exit code 0, and each failing ending must give its
# documented code (docs/launch.md, docs/events.md): every server lost under
# none -> 3, the coordinator killed without a standby -> 4, a BSP worker lost
# for good (killed at 8 s, once both passed the start barrier) -> 3 or 4 with
# the reason. Reads summary.json only. N=0 runs the failing endings only.
#   scripts/launch_endings.sh [N]     (RELAXPS_BIN: binaries, default build/bin)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-20}
BIN=${RELAXPS_BIN:-$ROOT/build/bin}
TMP=$(mktemp -d /tmp/relaxps_endings_XXXXXX)
trap 'rm -rf "$TMP"' EXIT
BASE=(--model=mlp --duration_s=4 --servers=1 --workers=1 --no_logs --progress_s=60)
FAILED=0
# job NAME EXPECTED_CODES FIX_PY [make-spec flags...]: FIX_PY edits the spec `s`.
job() {
  local name=$1 want=$2 fix=$3 d="$TMP/$1"; shift 3
  RELAXPS_SCRIPT=launch_endings.sh "$ROOT/launcher/relaxps-launch" make-spec run_local \
    "$@" --out_dir="$d" >"$TMP/spec.json" || { echo "$name: make-spec failed"; FAILED=1; return; }
  /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); $fix
json.dump(s, open(sys.argv[1], 'w'))" "$TMP/spec.json"
  "$ROOT/launcher/relaxps-launch" "$TMP/spec.json" --bin="$BIN" >/dev/null 2>&1
  local rc=$? line
  line=$(/usr/bin/python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
c = [p["exit_codes"] for p in s["processes"] if p["role"] == "coordinator"]
print("verdict=%s coordinator_exits=%s reason=%s" % (s["verdict"], c, s["reason"]))' \
    "$d/summary.json" 2>/dev/null || echo "no summary.json")
  if [[ ",$want," == *",$rc,"* ]]; then echo "$name: exit $rc (expected $want) ok; $line"
  else echo "$name: exit $rc (expected $want) WRONG; $line"; FAILED=1; fi
}
for i in $(seq 1 "$N"); do
  job "clean-$i" 0 "s['coordinator']['flags'] = s['coordinator'].get('flags', [])" "${BASE[@]}" --seed="$i"
done
job none-server-lost 3 "pass" "${BASE[@]}" --duration_s=8 --recovery=none --kill_server=0@3
job coordinator-killed-no-standby 4 "s['coordinator']['restart'] = False" "${BASE[@]}" \
  --duration_s=8 --kill_coordinator=0@3
job bsp-worker-lost 3,4 "s['faults'].append({'at_s': 8, 'action': 'kill', 'target': 'worker-1'}); s['workers']['restart'] = False" \
  "${BASE[@]}" --duration_s=16 --workers=2 --consistency=bsp
exit "$FAILED"
