#!/usr/bin/env bash
# End to end: every relaxps-ctl subcommand with --json prints one JSON
# document that /usr/bin/python3's json module parses, with the fields a
# script needs (a live job from run_local.sh: mlp, 2 servers, 1 worker,
# --recovery=checkpoint), and an error is still a non-zero exit with nothing
# on stdout.
#   ctl_json_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
SRC=$1 BIN=$2
SCALE=${RELAXPS_TEST_TIME_SCALE:-1}
PY=/usr/bin/python3
OUT=$(mktemp -d /tmp/relaxps_ctl_json_test_XXXXXX)
# shellcheck source=run_local_bg.sh
. "$(dirname "$0")/run_local_bg.sh"

RELAXPS_BIN=$BIN RELAXPS_SKIP_BUILD=1 "$SRC/scripts/run_local.sh" --model=mlp \
  --duration_s=$((60 * SCALE)) --servers=2 --workers=1 --recovery=checkpoint \
  --eval_every_s=0 --final_eval=false --out_dir="$OUT/run" >"$OUT/run.log" 2>&1 &
RUN_PID=$!
for _ in $(seq 1 $((300 * SCALE))); do
  grep -q '^progress' "$OUT/run/worker-0.log" 2>/dev/null && break
  kill -0 "$RUN_PID" 2>/dev/null || fail "run_local.sh exited early"
  sleep 0.1
done
EP=$(cat "$OUT/run/coordinator.endpoint") || fail "no coordinator endpoint"
ctl() { "$BIN/relaxps-ctl" --coordinator="$EP" --json "$@"; }

# check NAME PYTHON_EXPR: the JSON in $OUT/NAME.json parsed as `d` makes EXPR true.
check() {
  "$PY" -c "import json, sys
d = json.load(open(sys.argv[1]))
assert $2, d" "$OUT/$1.json" || fail "$1: $2"
  echo "ok $1: $(head -c 160 "$OUT/$1.json")..."
}
ctl status >"$OUT/status.json" || fail "status --json exited $?"
check status "d['job']['recovery'] == 'checkpoint' and len(d['servers']) == 2 and \
all(s['info']['alive'] for s in d['servers']) and len(d['workers']) == 1 and \
int(d['workers'][0]['clock']) > 0 and d['shard_map']['tables'][0]['table']['name'] == 'model'"
ctl tables >"$OUT/tables.json" || fail "tables --json exited $?"
check tables "[t['table']['name'] for t in d['tables']] == ['model'] and int(d['tables'][0]['table']['size']) > 0"
ctl stats >"$OUT/stats.json" || fail "stats --json exited $?"
check stats "sorted(s['id'] for s in d['servers']) == [0, 1] and \
all(int(s['stats']['requests']) > 0 and int(s['stats']['bytes_in']) > 0 for s in d['servers'])"
ctl checkpoint >"$OUT/checkpoint.json" || fail "checkpoint --json exited $?"
check checkpoint "len(d['shards']) == 2 and int(d['clock']) > 0 and d['seconds'] >= 0"
ctl checkpoints >"$OUT/checkpoints.json" || fail "checkpoints --json exited $?"
check checkpoints "len(d['complete']) >= 1 and len(d['servers']) == 2 and \
all(len(s['held']['checkpoints']) >= 1 for s in d['servers'])"
ctl pull model "$OUT/model.bin" >"$OUT/pull.json" || fail "pull --json exited $?"
check pull "d['table'] == 'model' and d['floats'] > 0 and d['bytes'] == 4 * d['floats'] and \
d['l2'] > 0"
"$BIN/relaxps-ctl" --json keygen "$OUT/keys" --servers=2 --workers=3 >"$OUT/keygen.json" ||
  fail "keygen --json exited $?"
check keygen "d['servers'] == 2 and d['workers'] == 3 and d['dir'].endswith('keys')"
# An error: non-zero exit, the reason on stderr, nothing on stdout.
if ctl pull no_such_table "$OUT/x.bin" >"$OUT/err.json" 2>"$OUT/err.txt"; then
  fail "pull of an unknown table exited 0"
fi
[ ! -s "$OUT/err.json" ] || fail "an error printed on stdout: $(cat "$OUT/err.json")"
ctl shutdown >"$OUT/shutdown.json" || fail "shutdown --json exited $?"
check shutdown "d == {'shutdown': 'requested'}"
echo "PASS: relaxps-ctl --json: status tables stats checkpoint checkpoints pull keygen shutdown"
