#!/usr/bin/env bash
# Issue 43's first acceptance run, by hand (docs/elastic.md, "Acceptance
# run"): per seed, a 1-server job that adds a second and a third server at
# 30 s and 60 s and drains the first at 90 s, and the same job with 3 fixed
# servers; prints each run's longest pause between training steps, the mean
# +- sd final accuracy of both and their difference, and each remaining
# server's pushes/s after the last move against an even share
# (scripts/experiment/elastic_check.py). About 6 x 2.5 minutes with the
# defaults; every figure comes from the runs' files, none from a log.
#
#   scripts/elastic_check.sh [--seeds=1,2,3] [--workers=2] [--model=cnn]
#       [--duration_s=130] [--add_at=30,60] [--drain_at=90] [--fixed_servers=3]
#       [--consistency=async] [--sample_s=1] [--jobs=elastic,fixed] [--out=DIR]
#
# Exit 0 when every run finished and every target held, 1 otherwise.
# Environment: RELAXPS_BIN (binaries, default build/bin).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "${1-}" in -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
BIN=${RELAXPS_BIN:-$ROOT/build/bin}
[ -x "$BIN/relaxps-launch" ] || { echo "elastic_check.sh: $BIN/relaxps-launch not found: run scripts/build.sh first" >&2; exit 2; }
OUT=$ROOT/runs/elastic-check-$(date +%Y%m%d-%H%M%S)
ARGS=()
for arg in "$@"; do
  case "$arg" in
    --out=*) OUT=${arg#*=} ;;
    *) ARGS+=("$arg") ;;
  esac
done
exec /usr/bin/python3 "$ROOT/scripts/experiment/elastic_check.py" --bin="$BIN" --out="$OUT" ${ARGS[@]+"${ARGS[@]}"}
