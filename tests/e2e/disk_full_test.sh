#!/usr/bin/env bash
# End to end, on a real small filesystem (issue 40 point 4): a server whose
# data_dir and checkpoints live on a 48 MiB tmpfs (mounted here; needs root,
# exit 77 otherwise) trains an mlp with checkpoints every second; the test
# fills the tmpfs while it trains.
#  1. --on_disk_error=continue: the server emits one disk_error event,
#     `relaxps-ctl stats` says durable=false since <time>, the worker trains
#     on and finishes; its log has few lines about the failures (throttled);
#     freeing the space brings durable_again.
#  2. --on_disk_error=stop: the server exits 1 naming the failed write.
#   disk_full_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
SRC=$1 BIN=$2
SCALE=${RELAXPS_TEST_TIME_SCALE:-1}
if [ "$(id -u)" != 0 ]; then echo "SKIP: mounting a tmpfs needs root"; exit 77; fi
OUT=$(mktemp -d /tmp/relaxps_disk_full_XXXXXX)
MNT="$OUT/mnt"
mkdir -p "$MNT"
if ! mount -t tmpfs -o size=48m relaxps-disk-full "$MNT"; then
  echo "SKIP: cannot mount a tmpfs here"
  rm -rf "$OUT"
  exit 77
fi
# shellcheck source=../../bench/cluster_lib.sh
. "$SRC/bench/cluster_lib.sh"
cleanup() {
  cluster_stop
  umount "$MNT" 2>/dev/null
  rm -rf "$OUT"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$OUT"/*/server-0.log "$OUT"/*/worker-0.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }
  done
  exit 1
}
wait_for() {  # SECONDS CMD...: until CMD succeeds
  local n=$(( $1 * 10 * SCALE )); shift
  for _ in $(seq 1 "$n"); do "$@" && return 0; sleep 0.1; done
  return 1
}
fill() { dd if=/dev/zero of="$MNT/filler" bs=1M 2>/dev/null; sync; }
events_of() { local n; n=$(grep -c "\"kind\":\"$2\"" "$1" 2>/dev/null); echo "${n:-0}"; }
has_event() { [ "$(events_of "$1" "$2")" -ge 1 ]; }

# ---- 1. continue -----------------------------------------------------------
run=$OUT/continue
mkdir -p "$run"
CLUSTER_SERVER_ARGS=(--store=rocksdb --data_dir="$MNT/continue/data-{i}"
                     --on_disk_error=continue --events_file="$run/events.jsonl")
cluster_start "$run" 1 1 --consistency=async --checkpoint_every_s=1 || fail "cluster did not start"
cluster_worker "$run" 0 --model=mlp --num_workers=1 --duration_s=$((14 * SCALE)) \
  --eval_every_s=0 --final_eval=false --log_every_s=2 --seed=1
wait_for 20 has_event "$run/events.jsonl" checkpoint_written || fail "no checkpoint before the disk filled"
fill
wait_for 20 has_event "$run/events.jsonl" disk_error || fail "no disk_error event on a full disk"
stats=$("$BIN/relaxps-ctl" --coordinator="$CLUSTER_COORD" stats 2>&1)
echo "$stats" | grep '^server 0'
echo "$stats" | grep -q '^server 0 .*durable=false since 20[0-9-]*T[0-9:]*Z disk_errors=[1-9]' ||
  fail "relaxps-ctl stats does not say durable=false since <time>: $stats"
json=$("$BIN/relaxps-ctl" --coordinator="$CLUSTER_COORD" --json stats 2>&1)
echo "$json" | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)["servers"][0]["stats"]
assert s.get("durable", False) is False, s
assert int(s["not_durable_since_unix_ms"]) > 0, s
print("json: durable=false since", s["not_durable_since_unix_ms"], "disk_errors", s["disk_errors"])
' || fail "relaxps-ctl --json stats: $json"
sleep $((3 * SCALE))  # A few more failed checkpoints and flushes.
rm -f "$MNT/filler"
wait_for 20 has_event "$run/events.jsonl" durable_again || fail "no durable_again after freeing space"
cluster_wait_workers || fail "the worker failed while the disk was full"
samples=$(final_field "$run/worker-0.log" samples_per_s)
[ -n "$samples" ] || fail "the worker did not finish"
[ "$(events_of "$run/events.jsonl" disk_error)" -le 3 ] || fail "more than one disk_error per kind of write"
failures=$(grep -c "write failed" "$run/server-0.log")
echo "continue: worker finished at $samples samples/s; $(events_of "$run/events.jsonl" disk_error) disk_error event(s), $failures log line(s) about failed writes"
[ "$failures" -le 12 ] || fail "$failures log lines about failed writes in a few seconds (not throttled)"
cluster_stop

# ---- 2. stop ---------------------------------------------------------------
run=$OUT/stop
mkdir -p "$run"
CLUSTER_SERVER_ARGS=(--store=rocksdb --data_dir="$MNT/stop/data-{i}"
                     --on_disk_error=stop --events_file="$run/events.jsonl")
cluster_start "$run" 1 1 --consistency=async --checkpoint_every_s=1 || fail "cluster did not start"
server_pid=${CLUSTER_PIDS[1]}
cluster_worker "$run" 0 --model=mlp --num_workers=1 --duration_s=$((30 * SCALE)) \
  --eval_every_s=0 --final_eval=false --log_every_s=2 --seed=1
wait_for 20 has_event "$run/events.jsonl" checkpoint_written || fail "no checkpoint before the disk filled"
fill
server_gone() { ! kill -0 "$server_pid" 2>/dev/null; }
wait_for 20 server_gone || fail "--on_disk_error=stop: the server still runs on a full disk"
wait "$server_pid"
rc=$?
[ $rc = 1 ] || fail "--on_disk_error=stop: server exit status $rc, expected 1"
grep -q "write failed (--on_disk_error=stop)" "$run/server-0.log" ||
  fail "--on_disk_error=stop: the server's last words do not name the write"
grep "on_disk_error=stop" "$run/server-0.log" | tail -n 1
rm -f "$MNT/filler"
echo "PASS"
