#!/usr/bin/env bash
# End to end across three "hosts": three network namespaces, each with its own
# 10.x address on a veth pair joined to one bridge. scripts/launch.sh
# (relaxps-launch's ssh backend) --exec='ip netns exec {host}' starts the coordinator on host 1, servers on
# hosts 1 and 2 and workers on hosts 2 and 3 (all bound on 0.0.0.0 and
# advertising their namespace's address, CurveZMQ keys); the job must train
# (mlp, test accuracy >= 0.75), every process must exit 0 and none may be left
# in the namespaces afterwards. A second, short run is interrupted (SIGTERM to
# launch.sh) mid-training and must leave no process behind either.
# Needs root and `ip netns`; exits 77 (skipped) where namespaces cannot be made.
#   netns_launch_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
SRC=$1 BIN=$2
SCALE=${RELAXPS_TEST_TIME_SCALE:-1}
TAG="rx$$"                         # Unique per run: namespaces, links, bridge.
NET="10.$((100 + $$ % 100)).$(( ($$ / 100) % 250 ))"
OUT=$(mktemp -d /tmp/relaxps_netns_test_XXXXXX)
NS=("${TAG}h1" "${TAG}h2" "${TAG}h3")

cleanup() {
  local ns
  for ns in "${NS[@]}"; do
    # Anything left in our own namespaces (a failed run) is killed with them.
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  for i in 1 2 3; do ip link del "${TAG}v$i" 2>/dev/null; done
  ip link del "${TAG}br" 2>/dev/null
  rm -rf "$OUT"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$OUT"/run*/*.log; do echo "--- $f"; tail -n 15 "$f"; done; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "needs ip (iproute2)"
ip netns add "${NS[0]}" 2>"$OUT/err" || skip "ip netns add failed: $(cat "$OUT/err")"
ip link add "${TAG}br" type bridge 2>"$OUT/err" || skip "cannot create a bridge: $(cat "$OUT/err")"
ip link set "${TAG}br" up || fail "bridge up"
for i in 1 2 3; do
  ns=${NS[$((i - 1))]}
  [ "$i" = 1 ] || ip netns add "$ns" || fail "ip netns add $ns"
  ip link add "${TAG}v$i" type veth peer name "${TAG}p$i" || fail "veth $i"
  ip link set "${TAG}v$i" master "${TAG}br" up || fail "veth $i to the bridge"
  ip link set "${TAG}p$i" netns "$ns" || fail "veth $i into $ns"
  ip -n "$ns" addr add "$NET.$i/24" dev "${TAG}p$i" || fail "address of $ns"
  ip -n "$ns" link set "${TAG}p$i" up || fail "link up in $ns"
  ip -n "$ns" link set lo up || fail "lo up in $ns"
done
# The namespaces reach each other through the bridge (and not otherwise).
ok=0
for _ in $(seq 1 50); do
  # "Connection refused" from host 1's closed port 9: the packets got there.
  reach=$(ip netns exec "${NS[2]}" timeout 2 bash -c "echo >/dev/tcp/$NET.1/9" 2>&1)
  [[ $reach == *refused* ]] && { ok=1; break; }
  sleep 0.1
done
[ $ok = 1 ] || fail "host 3 cannot reach host 1 over the bridge: $reach"

cat >"$OUT/hosts" <<EOF
# host        roles               keys
${NS[0]}  coordinator,server  addr=$NET.1 metrics_port=9100
${NS[1]}  server,worker       addr=$NET.2
${NS[2]}  worker              addr=$NET.3 workdir=$OUT/h3 metrics_port=9100
EOF

no_process_left() {
  local ns left=()
  for ns in "${NS[@]}"; do
    while read -r p; do [ -n "$p" ] && left+=("$p"); done < <(ip netns pids "$ns")
  done
  [ ${#left[@]} = 0 ] ||
    fail "processes left in the namespaces: $(ps -o pid=,args= -p "$(IFS=,; echo "${left[*]}")")"
}

start=$SECONDS
timeout $((120 * SCALE)) "$SRC/scripts/launch.sh" --hostfile="$OUT/hosts" \
  --exec='ip netns exec {host}' --bin="$BIN" --out_dir="$OUT/run1" --model=mlp \
  --duration_s=$((12 * SCALE)) --eval_every_s=0 --consistency=ssp >"$OUT/launch1.out" 2>&1
rc=$?
grep -v '\] progress' "$OUT/launch1.out" | tail -n 25
[ $rc = 0 ] || fail "launch.sh exited with $rc"
no_process_left
grep -q "coordinator tcp://$NET.1:" "$OUT/launch1.out" || fail "the coordinator did not advertise $NET.1"
grep -q "relaxps-server 1 listening on tcp://$NET.2:" "$OUT"/run1/server-1.log ||
  fail "server 1 did not advertise host 2's address"
grep -q "progress worker=1 " "$OUT/launch1.out" || fail "no progress from host 3's worker"
[ -s "$OUT/run1/prometheus.yml" ] || fail "no prometheus.yml"
acc=$(/usr/bin/python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
assert s["verdict"] == "done" and all(p["exit_codes"] == [0] for p in s["processes"]), s
print(s["final_accuracy"])' "$OUT/run1/summary.json") || fail "summary.json: not done, or a process failed"
awk -v a="${acc:-0}" 'BEGIN {exit !(a >= 0.75)}' || fail "test accuracy ${acc:-none} < 0.75"
echo "run 1: test accuracy $acc across 3 namespaces in $((SECONDS - start)) s, no process left"

# Interrupted: SIGTERM to launch.sh (alone) while the workers train.
"$SRC/scripts/launch.sh" --hostfile="$OUT/hosts" \
  --exec='ip netns exec {host}' --bin="$BIN" --out_dir="$OUT/run2" --model=mlp \
  --duration_s=600 --eval_every_s=0 --log_every_s=1 >"$OUT/launch2.out" 2>&1 &
LAUNCH=$!
for _ in $(seq 1 $((300 * SCALE))); do
  grep -q 'progress worker=1 ' "$OUT/launch2.out" 2>/dev/null && break
  sleep 0.1
done
grep -q 'progress worker=1 ' "$OUT/launch2.out" || { kill -KILL "$LAUNCH"; fail "run 2: no progress line"; }
# Metrics across hosts: host 3 scrapes server 0 on host 1 (its second port),
# host 1 scrapes the worker on host 3.
if command -v curl >/dev/null; then
  pushes=$(ip netns exec "${NS[2]}" curl -s "http://$NET.1:9101/metrics" |
           sed -n 's/^relaxps_server_pushes_total //p')
  sent=$(ip netns exec "${NS[0]}" curl -s "http://$NET.3:9100/metrics" |
         sed -n 's/^relaxps_worker_bytes_sent_total //p')
  echo "scraped across namespaces: server 0 pushes=${pushes:-none}, worker 1 bytes_sent=${sent:-none}"
  awk -v p="${pushes:-0}" -v s="${sent:-0}" 'BEGIN {exit !(p > 0 && s > 0)}' ||
    { kill -TERM "$LAUNCH"; wait "$LAUNCH"; fail "metrics not reachable across namespaces"; }
fi
kill -TERM "$LAUNCH"
stopped=$SECONDS
for _ in $(seq 1 $((400 * SCALE))); do
  kill -0 "$LAUNCH" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$LAUNCH" 2>/dev/null && { kill -KILL "$LAUNCH"; fail "launch.sh still runs 40 s after SIGTERM"; }
wait "$LAUNCH"
rc=$?
[ $rc != 0 ] || fail "an interrupted launch.sh exited 0"
no_process_left
echo "PASS: run 2 interrupted: launch.sh exited $rc after $((SECONDS - stopped)) s and every remote process stopped"
