#!/usr/bin/env bash
# Seeded chaos runs of chain replication: random SIGKILL / SIGSTOP / restart
# of servers under load (3 servers, --replicas=2, heartbeat timeout 1000 ms),
# checking after every trial that no acknowledged push was lost and none was
# applied twice on any live replica (tests/recovery/chain_chaos_test.cc).
#
#   scripts/chaos.sh [--trials=30] [--seed=1]
#
# Prints the summary line: counts (trials, kills, stops, acknowledged pushes,
# lost, doubled) and the failover times (p50, max) of kills and of pauses.
# Exits non-zero if anything was lost, doubled, or a trial failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TRIALS=30
SEED=1
for arg in "$@"; do
  case "$arg" in
    --trials=*) TRIALS=${arg#*=} ;;
    --seed=*) SEED=${arg#*=} ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "chaos.sh: unexpected argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
for v in TRIALS SEED; do
  if ! [[ ${!v} =~ ^[0-9]+$ ]]; then echo "chaos.sh: --${v,,} must be a number" >&2; exit 2; fi
done
BIN=${RELAXPS_BIN:-$ROOT/${BUILD_DIR:-build}/bin}
[ -x "$BIN/chain_chaos_test" ] || { echo "chaos.sh: $BIN/chain_chaos_test not found (run scripts/build.sh)" >&2; exit 1; }
LOG=$(mktemp "${TMPDIR:-/tmp}/relaxps-chaos.XXXXXX")
RELAXPS_CHAOS_TRIALS=$TRIALS RELAXPS_CHAOS_SEED=$SEED "$BIN/chain_chaos_test" >"$LOG" 2>&1
code=$?
grep -a "^chaos summary:" "$LOG" || { tail -n 30 "$LOG"; }
grep -a "Failure\|FAILED" "$LOG" | head -n 5
[ $code = 0 ] && rm -f "$LOG" || echo "chaos.sh: failed (exit $code); log in $LOG" >&2
exit $code
