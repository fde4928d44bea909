#!/usr/bin/env bash
# Runs a complete relaxps job on this machine: relaxps-launch (docs/launch.md)
# runs the spec that `relaxps-launch make-spec run_local FLAGS` makes of this
# script's flags (`scripts/run_local.sh --help` lists them: servers, workers,
# model, recovery, faults, evaluator, metrics, security, HA coordinators).
# This wrapper only builds relaxps first (unless --skip_build or
# RELAXPS_SKIP_BUILD=1) and keeps a local ZooKeeper for --coordination=zk.
# Output: a progress line every 5 s, the final accuracy; logs, CSVs,
# events.jsonl and summary.json in runs/<timestamp>/ (--out_dir).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAUNCH=$ROOT/launcher/relaxps-launch
export RELAXPS_SCRIPT=run_local.sh
SKIP_BUILD=${RELAXPS_SKIP_BUILD:-0}
OUT_DIR="$ROOT/runs/$(date +%Y%m%d-%H%M%S)"
ZK=""
ARGS=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) exec "$LAUNCH" make-spec run_local --help ;;
    --skip_build) SKIP_BUILD=1 ;;
    --out_dir=*) OUT_DIR=${arg#*=} ;;
    --coordination=zk) ZK=1 ;;
    *) ARGS+=("$arg") ;;
  esac
done
# Bad flags fail before the build (ZooKeeper's address comes once it runs).
"$LAUNCH" make-spec run_local "${ARGS[@]}" ${ZK/#1/--zk=check:0} >/dev/null || exit 2
if [ "$SKIP_BUILD" != 1 ]; then
  "$ROOT/scripts/install_deps.sh" || exit 1
  "$ROOT/scripts/build.sh" >"${TMPDIR:-/tmp}/relaxps-build.log" 2>&1 || {
    tail -n 40 "${TMPDIR:-/tmp}/relaxps-build.log"; echo "run_local.sh: build failed" >&2; exit 1; }
fi
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd) || exit 1
if [ -n "$ZK" ]; then
  ZK_ADDR=$("$ROOT/scripts/zk.sh" start "$OUT_DIR/zk") ||
    { echo "run_local.sh: could not start ZooKeeper (scripts/zk.sh)" >&2; exit 5; }
  ARGS+=(--zk="$ZK_ADDR")
fi
"$LAUNCH" make-spec run_local "${ARGS[@]}" --out_dir="$OUT_DIR" >"$OUT_DIR/job.json" || exit 2
RUN=("$LAUNCH" "$OUT_DIR/job.json" --bin="${RELAXPS_BIN:-$ROOT/${BUILD_DIR:-build}/bin}"
     --name=run_local.sh)
[ -n "$ZK" ] || exec "${RUN[@]}"
# With ZooKeeper: relaxps-launch in the background, signals passed on to it.
"${RUN[@]}" &
PID=$!
trap 'kill -TERM $PID 2>/dev/null' TERM
trap 'kill -INT $PID 2>/dev/null' INT
while kill -0 $PID 2>/dev/null; do wait $PID; RC=$?; done
"$ROOT/scripts/zk.sh" stop "$OUT_DIR/zk"
exit "$RC"
