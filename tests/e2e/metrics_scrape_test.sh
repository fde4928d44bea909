#!/usr/bin/env bash
# End to end: scripts/run_local.sh --metrics (mlp, BSP, 2 servers, 2 workers,
# checkpoints every 2 s) and, while the workers train, scrapes the
# coordinator, a server and a worker: the server's push and pull counters,
# gate waits and store checkpoint durations, the coordinator's live members
# and checkpoints, the worker's bytes are non-zero, and `promtool check
# metrics` accepts every scrape; `promtool check config` accepts the
# prometheus.yml run_local.sh wrote. Exit 77 (skipped) without promtool/curl.
#   metrics_scrape_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
SRC=$1 BIN=$2
SCALE=${RELAXPS_TEST_TIME_SCALE:-1}
PROMTOOL=${PROMTOOL:-$(command -v promtool || echo /usr/bin/promtool)}
if [ ! -x "$PROMTOOL" ] || ! command -v curl >/dev/null; then
  echo "SKIP: needs promtool (Debian package prometheus) and curl"
  exit 77
fi
OUT=$(mktemp -d /tmp/relaxps_metrics_test_XXXXXX)
# shellcheck source=run_local_bg.sh
. "$(dirname "$0")/run_local_bg.sh"

RELAXPS_BIN=$BIN RELAXPS_SKIP_BUILD=1 "$SRC/scripts/run_local.sh" --metrics --model=mlp \
  --duration_s=$((25 * SCALE)) --servers=2 --workers=2 --consistency=bsp \
  --recovery=checkpoint --checkpoint_every_s=2 --eval_every_s=0 --final_eval=false \
  --out_dir="$OUT/run" >"$OUT/run.log" 2>&1 &
RUN_PID=$!
for _ in $(seq 1 $((300 * SCALE))); do
  [ -s "$OUT/run/metrics.txt" ] && break
  kill -0 "$RUN_PID" 2>/dev/null || fail "run_local.sh exited early"
  sleep 0.1
done
[ -s "$OUT/run/metrics.txt" ] || fail "no metrics.txt"
url() { awk -v n="$1" '$1 == n {print $2}' "$OUT/run/metrics.txt"; }
# A sample's value ("name{labels} value"); empty if absent.
value() { grep -E "^$2( |\{)" "$1" | head -n 1 | awk '{print $NF}'; }
positive() { awk -v v="$1" 'BEGIN {exit !(v + 0 > 0)}'; }

# Scrape until the workers trained a while and a checkpoint completed.
ok=0
for _ in $(seq 1 $((40 * SCALE))); do
  sleep 0.5
  curl -sf "$(url server-0)" >"$OUT/server.prom" || continue
  curl -sf "$(url coordinator)" >"$OUT/coordinator.prom" || continue
  curl -sf "$(url worker-1)" >"$OUT/worker.prom" || continue
  pushes=$(value "$OUT/server.prom" relaxps_server_pushes_total)
  ckpt=$(value "$OUT/server.prom" relaxps_store_checkpoint_seconds_count)
  cok=$(value "$OUT/coordinator.prom" 'relaxps_coordinator_checkpoints_total\{result="ok"\}')
  if positive "${pushes:-0}" && positive "${ckpt:-0}" && positive "${cok:-0}" &&
     [ "${pushes:-0}" -gt 50 ]; then
    ok=1
    break
  fi
done
[ $ok = 1 ] || fail "counters stayed at zero: pushes=${pushes:-} store checkpoints=${ckpt:-} coordinator checkpoints=${cok:-}"

echo "server-0 $(url server-0):"
grep -E '^relaxps_server_(pushes|pulls|gate_waits)_total|^relaxps_server_requests_total\{type="PUSH|^relaxps_server_bytes_in_total|^relaxps_store_checkpoint_seconds_count' "$OUT/server.prom"
echo "coordinator:"
grep -E '^relaxps_coordinator_(live_workers|live_servers|min_worker_clock|max_worker_clock|checkpoints_total)' "$OUT/coordinator.prom"
echo "worker-1:"
grep -E '^relaxps_worker_(bytes_sent_total|clock|steps_total|staleness_count|staleness_sum) ' "$OUT/worker.prom"

for v in relaxps_server_pulls_total relaxps_server_bytes_in_total \
         relaxps_server_gate_waits_total 'relaxps_server_request_seconds_count\{type="PUSH_PULL"\}'; do
  positive "$(value "$OUT/server.prom" "$v")" || fail "server: $v is not positive"
done
[ "$(value "$OUT/coordinator.prom" relaxps_coordinator_live_workers)" = 2 ] || fail "coordinator: live workers != 2"
[ "$(value "$OUT/coordinator.prom" relaxps_coordinator_live_servers)" = 2 ] || fail "coordinator: live servers != 2"
for v in relaxps_worker_bytes_sent_total relaxps_worker_steps_total relaxps_worker_staleness_count; do
  positive "$(value "$OUT/worker.prom" "$v")" || fail "worker: $v is not positive"
done
# Histogram buckets are cumulative: +Inf equals _count.
inf=$(value "$OUT/server.prom" 'relaxps_server_request_seconds_bucket\{type="PUSH_PULL",le="\+Inf"\}')
cnt=$(value "$OUT/server.prom" 'relaxps_server_request_seconds_count\{type="PUSH_PULL"\}')
if [ -z "$inf" ] || [ "$inf" != "$cnt" ]; then fail "+Inf bucket $inf != count $cnt"; fi

for f in server coordinator worker; do
  "$PROMTOOL" check metrics <"$OUT/$f.prom" || fail "promtool check metrics rejected the $f's metrics"
done
"$PROMTOOL" check config "$OUT/run/prometheus.yml" >/dev/null || fail "promtool check config rejected prometheus.yml"
echo "PASS: promtool check metrics accepted $(wc -l <"$OUT/server.prom") server, $(wc -l <"$OUT/coordinator.prom") coordinator and $(wc -l <"$OUT/worker.prom") worker lines; prometheus.yml valid"
