#!/usr/bin/env bash
# Starts a relaxps job on several hosts named in a hostfile, over ssh (or any
# command prefix, --exec, e.g. 'ip netns exec {host}'): relaxps-launch's ssh
# backend (docs/launch.md) runs the spec that `relaxps-launch make-spec
# hostfile FLAGS` makes of this script's flags; `scripts/launch.sh --help`
# lists them and the hostfile format.
#
#   scripts/launch.sh --hostfile=FILE [--exec=CMD] [--out_dir=runs/launch-<time>]
#                     [--bin=DIR] [--security=curve|plain] [--model=mlp]
#                     [--duration_s=60] [--coordinator.X=Y] [--server.X=Y] [worker flags...]
#
# Every process binds its host's bind= address and advertises its addr=, runs
# under a watchdog that stops it when the launcher's ssh session ends (also
# when the launcher is killed with -9) and carries RELAXPS_JOB_TAG. Output:
# progress lines, the final accuracy; <out_dir>/summary.json for programs.
# Exit codes: relaxps-launch's (0 done, 2 bad flags, 3 job failed,
# 4 coordinator lost, 5 launch failed, 130 interrupted).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# A checkout's launcher/, or (installed by relaxps-server into
# /usr/share/relaxps/scripts) the relaxps-launch on PATH.
LAUNCH=${RELAXPS_LAUNCH:-$ROOT/launcher/relaxps-launch}
[ -x "$LAUNCH" ] || LAUNCH=$(command -v relaxps-launch) ||
  { echo "launch.sh: relaxps-launch not found (no checkout around this script, none on PATH)" >&2; exit 5; }
export RELAXPS_SCRIPT=launch.sh
for arg in "$@"; do
  case "$arg" in -h|--help) exec "$LAUNCH" make-spec hostfile --help ;; esac
done
SPEC=$(mktemp "${TMPDIR:-/tmp}/relaxps-launch-spec-XXXXXX") || exit 1
"$LAUNCH" make-spec hostfile "$@" >"$SPEC" || { rm -f "$SPEC"; exit 2; }
# relaxps-launch reads the spec from the open descriptor (and keeps a copy,
# <out_dir>/job.json); the temporary file is gone before the job starts.
exec 3<"$SPEC"
rm -f "$SPEC"
exec "$LAUNCH" /dev/fd/3 --name=launch.sh
