#!/usr/bin/env bash
# End to end: the structured events of a whole job (docs/events.md) validate
# against docs/events.schema.json. A checkpoint job (2 servers, 1 mlp worker,
# an evaluator, checkpoints every second) loses server 1 to SIGKILL after
# its first complete checkpoint and gets it back restored from it; every
# process appends to one events.jsonl while `relaxps-ctl events --follow`
# streams the coordinator's. Checks: every line validates (python3-jsonschema),
# the kinds such a job must produce occur, every kind the C++ sources emit
# is in the schema and in docs/events.md, the follower saw the coordinator's
# events up to job_end, and the coordinator exits 0 with verdict done.
#   events_schema_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
SRC=$1 BIN=$2
SCALE=${RELAXPS_TEST_TIME_SCALE:-1}
PY=/usr/bin/python3
OUT=$(mktemp -d /tmp/relaxps_events_test_XXXXXX)
EV=$OUT/events.jsonl
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$OUT"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$OUT"/*.log; do echo "--- $f"; tail -n 15 "$f"; done
  echo "--- events"; tail -n 40 "$EV" 2>/dev/null
  exit 1
}
"$PY" -c "import jsonschema" 2>/dev/null || fail "python3-jsonschema is missing (scripts/install_deps.sh)"
# wait_event KIND [PYTHON_CONDITION on e] [TIMEOUT_S]: until an event matches.
wait_event() {
  local kind=$1 cond=${2:-True} t=${3:-60}
  for _ in $(seq 1 $((t * 10 * SCALE))); do
    "$PY" - "$EV" "$kind" "$cond" <<'PYEOF' && return 0
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["kind"] == sys.argv[2] and eval(sys.argv[3], {"e": e}):
        sys.exit(0)
sys.exit(1)
PYEOF
    sleep 0.1
  done
  fail "no $kind event with $cond within ${t}s"
}

"$BIN/relaxps-coordinator" --recovery=checkpoint --num_servers=2 --num_workers=1 \
  --checkpoint_every_s=1 --heartbeat_timeout_ms=1000 --events_file="$EV" \
  --endpoint_file="$OUT/coordinator.endpoint" >"$OUT/coordinator.log" 2>&1 &
COORD_PID=$!
PIDS+=("$COORD_PID")
for _ in $(seq 1 $((100 * SCALE))); do [ -s "$OUT/coordinator.endpoint" ] && break; sleep 0.1; done
EP=$(cat "$OUT/coordinator.endpoint") || fail "no coordinator endpoint"
"$BIN/relaxps-ctl" --coordinator="$EP" events --follow >"$OUT/follow.jsonl" 2>"$OUT/follow.log" &
FOLLOW_PID=$!
PIDS+=("$FOLLOW_PID")
server() {  # server I EXTRA...
  local i=$1; shift
  "$BIN/relaxps-server" --coordinator="$EP" --server_id="$i" --store=rocksdb \
    --data_dir="$OUT/data/server-$i" --events_file="$EV" "$@" >>"$OUT/server-$i.log" 2>&1 &
  PIDS+=($!)
  SERVER_PID[$i]=$!
}
declare -a SERVER_PID
server 0
server 1
"$BIN/relaxps-worker" --coordinator="$EP" --model=mlp --duration_s=$((14 * SCALE)) \
  --log_every_s=1 --eval_every_s=0 --eval_examples=1000 --events_file="$EV" \
  >"$OUT/worker.log" 2>&1 &
WORKER_PID=$!
PIDS+=("$WORKER_PID")
"$BIN/relaxps-worker" --coordinator="$EP" --role=evaluator --model=mlp --eval_every_s=2 \
  --eval_examples=500 --duration_s=$((8 * SCALE)) --events_file="$EV" >"$OUT/evaluator.log" 2>&1 &
EVAL_PID=$!
PIDS+=("$EVAL_PID")

# The evaluator's first evaluation before the kill (a pull in flight to the
# killed server waits out its deadline).
wait_event evaluator_progress
wait_event checkpoint_complete
kill -KILL "${SERVER_PID[1]}"
wait_event member_dead "e['role'] == 'server' and e['id'] == 1" 20
server 1 --restore_from=latest
wait_event server_started "e['server'] == 1 and e['restored'] and e['restored_seq'] > 0" 30

wait "$WORKER_PID"; code=$?
[ "$code" = 0 ] || fail "the worker exited $code"
wait "$COORD_PID"; code=$?
[ "$code" = 0 ] || fail "the coordinator exited $code: $(tail -n 2 "$OUT/coordinator.log")"
wait "$EVAL_PID" 2>/dev/null
for _ in $(seq 1 $((50 * SCALE))); do kill -0 "$FOLLOW_PID" 2>/dev/null || break; sleep 0.1; done
wait "$FOLLOW_PID"; code=$?
[ "$code" = 0 ] || fail "relaxps-ctl events --follow exited $code: $(cat "$OUT/follow.log")"

"$PY" "$(dirname "$0")/check_events.py" --schema "$SRC/docs/events.schema.json" \
  --docs "$SRC/docs/events.md" --sources "$SRC" \
  --expect coordinator_started,leader_elected,member_joined,member_dead,member_finished,\
shard_map_installed,checkpoint_started,checkpoint_complete,checkpoint_written,server_started,\
client_registered,client_server_lost,client_server_back,progress,final,evaluator_progress,\
evaluator_final,job_end "$EV" "$OUT/follow.jsonl" || fail "events do not match the schema"

"$PY" - "$EV" "$OUT/follow.jsonl" <<'PYEOF' || fail "the events do not tell the job's story"
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
follow = [l.rstrip("\n") for l in open(sys.argv[2])]
end = [e for e in events if e["kind"] == "job_end"]
assert len(end) == 1 and end[0]["verdict"] == "done" and end[0]["exit_code"] == 0, end
assert events[-1]["kind"] != "job_end" or events[-1]["process"] == "coordinator"
# The follower saw exactly the coordinator's events, in order, ending with job_end.
coord = [l.rstrip("\n") for l in open(sys.argv[1]) if json.loads(l)["process"] == "coordinator"]
assert follow == coord, (len(follow), len(coord), follow[-3:], coord[-3:])
assert json.loads(follow[-1])["kind"] == "job_end"
procs = {e["process"] for e in events}
assert {"coordinator", "server-0", "server-1", "worker-0", "evaluator"} <= procs, procs
final = [e for e in events if e["kind"] == "final"]
assert len(final) == 1 and final[0]["acked_updates"] > 0 and final[0]["test_acc"] > 0.5, final
restarted = [e for e in events if e["kind"] == "server_started" and e["server"] == 1]
assert len(restarted) == 2 and restarted[1]["restored"], restarted
lost = [e for e in events if e["kind"] == "client_server_lost" and e["server"] == 1]
assert lost, "the worker never saw server 1 lost"
print(f"ok: {len(events)} events from {sorted(procs)}; follower got {len(follow)}; "
      f"final test_acc {final[0]['test_acc']:.3f}")
PYEOF
echo "PASS: events of a checkpoint job with a server kill validate against docs/events.schema.json"
