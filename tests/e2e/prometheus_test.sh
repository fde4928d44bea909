#!/usr/bin/env bash
# End to end with a real Prometheus: a small job from scripts/run_local.sh
# --metrics (mlp, BSP, 2 servers, 2 workers, --recovery=checkpoint with a
# checkpoint every 2 s) is scraped every second by Debian's prometheus,
# started here on 127.0.0.1 with a free port, a scrape config generated from
# the job's metrics.txt, and its data in the test's temporary folder. Then,
# through Prometheus' HTTP API: every target is up, the relaxps series and
# the process_* series of every process are there, the pre-registered
# series hold zeros, and every query of the Grafana dashboard
# docs/grafana/relaxps.json returns data (tests/e2e/promql_check.py).
# Exit 77 (skipped) without prometheus (Debian package prometheus).
#   prometheus_test.sh SOURCE_DIR BIN_DIR
set -uo pipefail
SRC=$1 BIN=$2
SCALE=${RELAXPS_TEST_TIME_SCALE:-1}
PY=/usr/bin/python3
PROMETHEUS=${PROMETHEUS:-$(command -v prometheus || echo /usr/bin/prometheus)}
if [ ! -x "$PROMETHEUS" ]; then
  echo "SKIP: needs the prometheus binary (Debian package prometheus; scripts/install_deps.sh)"
  exit 77
fi
HERE=$(cd "$(dirname "$0")" && pwd)
check() { "$PY" "$HERE/promql_check.py" "$@"; }
DASHBOARD=$SRC/docs/grafana/relaxps.json
OUT=$(mktemp -d /tmp/relaxps_prometheus_test_XXXXXX)
# shellcheck source=run_local_bg.sh
. "$HERE/run_local_bg.sh"
PROM_PID=""
stop_all() {
  if [ -n "$PROM_PID" ] && kill -0 "$PROM_PID" 2>/dev/null; then
    kill -TERM "$PROM_PID"
    wait "$PROM_PID" 2>/dev/null
  fi
  cleanup
}
trap stop_all EXIT
prom_fail() { echo "--- prometheus log"; tail -n 30 "$OUT/prometheus.log"; fail "$@"; }

RELAXPS_BIN=$BIN RELAXPS_SKIP_BUILD=1 "$SRC/scripts/run_local.sh" --metrics --model=mlp \
  --duration_s=$((90 * SCALE)) --servers=2 --workers=2 --consistency=bsp \
  --recovery=checkpoint --checkpoint_every_s=2 --eval_every_s=0 --final_eval=false \
  --out_dir="$OUT/run" >"$OUT/run.log" 2>&1 &
RUN_PID=$!
TARGETS=5  # The coordinator, 2 servers, 2 workers: one line each in metrics.txt.
lines() { { wc -l <"$OUT/run/metrics.txt"; } 2>/dev/null || echo 0; }
for _ in $(seq 1 $((300 * SCALE))); do
  [ "$(lines)" -ge $TARGETS ] && break
  kill -0 "$RUN_PID" 2>/dev/null || fail "run_local.sh exited early"
  sleep 0.1
done
[ "$(lines)" -ge $TARGETS ] || fail "metrics.txt does not list $TARGETS processes"

# The scrape config: one target per line of metrics.txt ("server-1
# http://127.0.0.1:PORT/metrics"), labelled like run_local.sh's own.
{
  echo "global:"
  echo "  scrape_interval: 1s"
  echo "  scrape_timeout: 1s"
  echo "scrape_configs:"
  echo "  - job_name: relaxps"
  echo "    static_configs:"
  while read -r name url; do
    hostport=${url#http://}
    hostport=${hostport%/metrics}
    role=${name%%-*}
    id=0
    [ "$name" != "$role" ] && id=${name#*-}
    echo "      - targets: ['$hostport']"
    echo "        labels: {role: '$role', id: '$id', run: 'prometheus_test'}"
  done <"$OUT/run/metrics.txt"
} >"$OUT/prometheus.yml"

PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
"$PROMETHEUS" --config.file="$OUT/prometheus.yml" --storage.tsdb.path="$OUT/tsdb" \
  --web.listen-address="127.0.0.1:$PORT" --log.level=warn >"$OUT/prometheus.log" 2>&1 &
PROM_PID=$!
ready=0
for _ in $(seq 1 $((200 * SCALE))); do
  kill -0 "$PROM_PID" 2>/dev/null || prom_fail "prometheus exited"
  if "$PY" -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=1)" \
       "$URL/-/ready" 2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.1
done
[ $ready = 1 ] || prom_fail "prometheus not ready on $URL"
echo "prometheus $("$PROMETHEUS" --version 2>&1 | head -n 1) on $URL, $TARGETS targets"

# Scrapes until every target is up and a rate window holds samples of
# training and checkpoints; then every dashboard query must return data.
ok=0
for _ in $(seq 1 $((60 * SCALE))); do
  sleep 1
  check "$URL" query -q "count(up == 1) == $TARGETS" \
    'sum(increase(relaxps_worker_steps_total[10s])) > 0' \
    'sum(increase(relaxps_coordinator_checkpoints_total{result="ok"}[10s])) > 0' \
    2>/dev/null || continue
  if check "$URL" dashboard -q "$DASHBOARD" 2>"$OUT/dashboard.err"; then
    ok=1
    break
  fi
done
[ $ok = 1 ] || { cat "$OUT/dashboard.err"; prom_fail "dashboard queries without data"; }

echo "--- the relaxps series, through the HTTP API"
check "$URL" query \
  'count by (role) (count by (role, id, __name__) ({__name__=~"relaxps_.+"}))' \
  'count by (role) (process_start_time_seconds)' \
  'process_resident_memory_bytes{role="server"}' \
  'relaxps_coordinator_staleness_bound' \
  'relaxps_server_rejected_total{reason="InvalidArgument"}' \
  'relaxps_coordinator_declared_dead_total' \
  'sum by (role) (rate(process_cpu_seconds_total[10s]))' ||
  prom_fail "API queries"
# Every process exports process_*; pre-registered series are 0, not absent.
check "$URL" query -q "count(process_start_time_seconds) == $TARGETS" \
  "count(process_open_fds > 0) == $TARGETS" "count(process_cpu_seconds_total) == $TARGETS" \
  'count(relaxps_server_rejected_total == 0) >= 2 * 11' \
  'count(relaxps_coordinator_recovery_events_total == 0) == 3' \
  'relaxps_coordinator_staleness_bound{consistency="bsp"} == 0' \
  'count(relaxps_coordinator_declared_dead_total{member=~"server|worker"} == 0) == 2' ||
  prom_fail "process_* on every target, zeros of the pre-registered series, the staleness bound"
# No metric label collides with the targets' labels (Prometheus would
# rename it exported_<label>, and a dashboard's "by (role)" would be wrong).
for label in role id run job instance; do
  check "$URL" query -q "absent({__name__=~\"relaxps_.+|process_.+\", exported_$label=~\".+\"})" ||
    prom_fail "a metric label named $label collides with the scrape target's"
done
echo "--- every query of $DASHBOARD"
check "$URL" dashboard "$DASHBOARD" || prom_fail "dashboard queries"
echo "PASS: prometheus scraped $TARGETS processes; every dashboard query returned data"
