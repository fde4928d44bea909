#!/usr/bin/env bash
# Runs a complete relaxps job on this machine: a coordinator, --servers
# parameter servers and --workers training workers on 127.0.0.1.
#
#   scripts/run_local.sh [--servers=2] [--workers=2] [--model=cnn] [--duration_s=120]
#                        [--epochs=N] [--consistency=async|ssp|bsp] [--staleness=2]
#                        [--out_dir=runs/<time>] [--port=0] [worker flags...]
#
# Flags for the coordinator (--consistency, --staleness, --recovery,
# --heartbeat_timeout_ms, --checkpoint_every_clocks, --checkpoint_every_s) and
# the servers (--store, --cache_mb, --wal_per_update, --flush_every_clocks,
# --keep_checkpoints, --restore_from=latest; RocksDB data goes
# under <out_dir>/data/server-<i>, checkpoints under
# <out_dir>/data/checkpoints/server-<i>) are routed to them; --server.X=Y and
# --coordinator.X=Y pass any other flag; everything else goes to the workers
# (--lr, --batch, --optimizer, --seed, --wire_dtype, --device, ...).
#
# --security=curve generates CurveZMQ keys for the run under <out_dir>/keys
# and starts every process with them (README, Security); relaxps-ctl then
# needs --security=curve --keys_dir=<out_dir>/keys.
#
# Failure injection: --kill_server=ID@S (repeatable) SIGKILLs server ID S
# seconds after the workers start (--kill_server=0,1@S kills several servers
# at once, back to back in one step); --stop_server=ID@S+D (repeatable) SIGSTOPs
# it at S and SIGCONTs it D seconds later (a hung server);
# --partition_server=ID@S+D (repeatable) cuts server ID off the network at S
# for D seconds while it keeps running: iptables DROP rules on its TCP ports
# (its listening port and its connections), which is why a job with a
# partition runs in its own network namespace (unshare -n; the rules vanish
# with it; needs root and iptables). Every fault and
# restart is logged to <out_dir>/events.csv (time_s,event,server,detail;
# time_s in seconds since the workers were started, whose wall-clock time is
# in <out_dir>/start_unix) for plotting. Under --recovery=stateless (servers
# keep their state in memory: --store=memory unless --store is given) each
# re-seed of a restarted server is a "reseed" event whose detail is the
# coordinator's RESEED line: seconds from the new server's registration to
# its seed, the seed's source, and per worker id:local_steps:weight of its
# merged change (--coordinator.seed_rule, --coordinator.merge_rule).
#
# --trainer=FILE.py runs each worker as `/usr/bin/python3 FILE.py` with the
# same flags instead of relaxps-worker (e.g. examples/pytorch_cnn.py), with
# PYTHONPATH=<build>/python for the relaxps package (RELAXPS_PYTHONPATH
# overrides it).
#
# --metrics gives every process a Prometheus endpoint (--metrics_port, free
# ports chosen at start; a restarted server keeps its port; not the
# --trainer workers), writes <out_dir>/prometheus.yml (a scrape config with
# a job per role and role/id labels: prometheus
# --config.file=<out_dir>/prometheus.yml) and prints the URLs;
# <out_dir>/metrics.txt lists them too.
#
# --evaluator_every_s=S starts `relaxps-worker --role=evaluator`, which pulls
# the model every S seconds and evaluates it on the whole test set into
# <out_dir>/evaluator.csv; the workers then do not evaluate themselves.
#
# Prints a progress line every few seconds, stops every process it started on
# any exit (Ctrl-C included), and exits non-zero naming what died if the
# coordinator dies, or a server under --recovery=none (the default). Under
# any other --recovery a dead server is restarted --restart_after_s seconds
# later (default 1), from its latest checkpoint if it has one (else its last
# flush), and the workers wait for it. A server paused (--stop_server) long
# enough to be declared dead restarts itself in place when it resumes.
# Under --recovery=chain (--replicas=R, default 2) a dead server is routed
# around at once and rejoins its chains after a state transfer when it is
# restarted; a server paused (--stop_server) long enough to be declared dead
# is fenced when it resumes and rejoins in process (it is not restarted).
# events.csv then also gets failover_ms=N rows: kill -> the first push a
# worker resent and the new head acknowledged.
# Under --recovery=hybrid (chains, --replicas=R) the same; when every replica
# of a range is lost the coordinator falls back to re-seeding it from the
# workers' copies (or, without any, to the latest checkpoint: a restarted
# server loads it with --restore_from=latest when one exists): each fallback
# is a "fallback" event (detail: the coordinator's FALLBACK line, with its
# cause) and each re-seed a "reseed" event as under stateless. A server that
# registers with another id than the stranded holder's takes its place (after
# the coordinator's --spare_takeover_ms, 0 by default): a "takeover" event.
#
# Coordinator high availability: --coordinators=N --coordination=zk starts a
# local ZooKeeper (scripts/zk.sh, its data and port under <out_dir>/zk) and N
# coordinators that elect a leader there; servers and workers get every
# coordinator endpoint. --kill_coordinator=ID@S (repeatable) SIGKILLs
# coordinator ID at S seconds and restarts it --restart_after_s later (as a
# standby under zk; without zk it restarts from its own --data_dir under
# <out_dir>/data/coordinator-ID on the same endpoint). events.csv gets
# kill_coordinator, restart_coordinator and leader rows; a leader row's
# detail is takeover_ms=N, from the kill to the new leader's LEADER line.
# Servers' and workers' --coordinator_timeout_ms (default 30000) must exceed
# the takeover time: about 2x --coordinator.zk_session_timeout_ms (4000) at most.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

SERVERS=2
WORKERS=2
DURATION_S=""
EPOCHS=""
MODEL=cnn
PORT=0
OUT_DIR=""
PROGRESS_S=5
COORD_ARGS=()
SERVER_ARGS=()
WORKER_ARGS=()
SKIP_BUILD=${RELAXPS_SKIP_BUILD:-0}
RECOVERY=none
RESTART_AFTER_S=1
KILLS=()  # "ID@S"
STOPS=()  # "ID@S+D"
PARTS=()  # "ID@S+D"
EVAL_EVERY_S=0
SECURITY=plain
COORDINATORS=1
COORDINATION=none
CKILLS=()  # "ID@S"
TRAINER=""
METRICS=0

# The comment block at the top of this file (up to the first non-comment line).
usage() { awk '/^# shellcheck/ {next} NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }

for arg in "$@"; do
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --servers=*) SERVERS=${arg#*=} ;;
    --workers=*) WORKERS=${arg#*=} ;;
    --duration_s=*) DURATION_S=${arg#*=} ;;
    --epochs=*) EPOCHS=${arg#*=} ;;
    --model=*) MODEL=${arg#*=} ;;
    --port=*) PORT=${arg#*=} ;;
    --out_dir=*) OUT_DIR=${arg#*=} ;;
    --progress_s=*) PROGRESS_S=${arg#*=} ;;
    --skip_build) SKIP_BUILD=1 ;;
    --recovery=*) RECOVERY=${arg#*=}; COORD_ARGS+=("$arg") ;;
    --restart_after_s=*) RESTART_AFTER_S=${arg#*=} ;;
    --kill_server=*) KILLS+=("${arg#*=}") ;;
    --kill_coordinator=*) CKILLS+=("${arg#*=}") ;;
    --coordinators=*) COORDINATORS=${arg#*=} ;;
    --coordination=*) COORDINATION=${arg#*=} ;;
    --stop_server=*) STOPS+=("${arg#*=}") ;;
    --partition_server=*) PARTS+=("${arg#*=}") ;;
    --evaluator_every_s=*) EVAL_EVERY_S=${arg#*=} ;;
    --security=*) SECURITY=${arg#*=} ;;
    --trainer=*) TRAINER=${arg#*=} ;;
    --metrics) METRICS=1 ;;
    --consistency=*|--staleness=*|--heartbeat_timeout_ms=*|--replicas=*) COORD_ARGS+=("$arg") ;;
    --checkpoint_every_clocks=*|--checkpoint_every_s=*) COORD_ARGS+=("$arg") ;;
    --store=*|--cache_mb=*|--wal_per_update*|--flush_every_clocks=*) SERVER_ARGS+=("$arg") ;;
    --keep_checkpoints=*|--restore_from=latest) SERVER_ARGS+=("$arg") ;;
    --coordinator.*) COORD_ARGS+=("--${arg#--coordinator.}") ;;
    --server.*) SERVER_ARGS+=("--${arg#--server.}") ;;
    --*) WORKER_ARGS+=("$arg") ;;
    *) echo "run_local.sh: unexpected argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done
for v in SERVERS WORKERS PORT PROGRESS_S RESTART_AFTER_S COORDINATORS; do
  if ! [[ ${!v} =~ ^[0-9]+$ ]]; then echo "run_local.sh: --${v,,} must be a number" >&2; exit 2; fi
done
for k in "${KILLS[@]}"; do
  bad=0
  if [[ $k =~ ^([0-9]+(,[0-9]+)*)@([0-9]+)$ ]]; then
    for id in ${BASH_REMATCH[1]//,/ }; do [ "$id" -ge "$SERVERS" ] && bad=1; done
  else
    bad=1
  fi
  if [ $bad = 1 ]; then
    echo "run_local.sh: --kill_server=$k: expected ID@SECONDS or ID,ID,...@SECONDS with IDs < --servers" >&2
    exit 2
  fi
done
case "$COORDINATION" in
  none|zk) ;;
  *) echo "run_local.sh: --coordination must be none or zk, got '$COORDINATION'" >&2; exit 2 ;;
esac
if [ "$COORDINATORS" -lt 1 ] || { [ "$COORDINATORS" -gt 1 ] && [ "$COORDINATION" != zk ]; }; then
  echo "run_local.sh: --coordinators=$COORDINATORS needs --coordination=zk (one coordinator without)" >&2
  exit 2
fi
for k in "${CKILLS[@]}"; do
  if ! [[ $k =~ ^([0-9]+)@([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -ge "$COORDINATORS" ]; then
    echo "run_local.sh: --kill_coordinator=$k: expected ID@SECONDS with ID < --coordinators" >&2
    exit 2
  fi
done
for k in "${STOPS[@]}" "${PARTS[@]}"; do
  if ! [[ $k =~ ^([0-9]+)@([0-9]+)\+([0-9]+)$ ]] || [ "${BASH_REMATCH[1]}" -ge "$SERVERS" ]; then
    echo "run_local.sh: --stop_server/--partition_server=$k: expected ID@SECONDS+SECONDS" \
         "with ID < --servers" >&2
    exit 2
  fi
done
if [ ${#PARTS[@]} -gt 0 ] && [ "${RELAXPS_NETNS:-}" != 1 ]; then
  for t in unshare iptables ss ip; do
    command -v "$t" >/dev/null 2>&1 || {
      echo "run_local.sh: --partition_server needs $t (and root): apt-get install iptables iproute2" >&2
      exit 2; }
  done
  # The whole job in a private network namespace with its own loopback.
  exec unshare -n env RELAXPS_NETNS=1 bash -c 'ip link set lo up && exec bash "$0" "$@"' "$0" "$@"
fi
if ! [[ $EVAL_EVERY_S =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
  echo "run_local.sh: --evaluator_every_s must be a number of seconds" >&2; exit 2
fi
if [ "$SERVERS" -lt 1 ] || [ "$WORKERS" -lt 1 ]; then
  echo "run_local.sh: need at least one server and one worker" >&2; exit 2
fi
if [ -z "$DURATION_S" ] && [ -z "$EPOCHS" ]; then DURATION_S=120; fi

if [ "$SKIP_BUILD" != 1 ]; then
  "$ROOT/scripts/install_deps.sh" || exit 1
  "$ROOT/scripts/build.sh" >"${TMPDIR:-/tmp}/relaxps-build.log" 2>&1 || {
    tail -n 40 "${TMPDIR:-/tmp}/relaxps-build.log"; echo "run_local.sh: build failed" >&2; exit 1; }
fi
BIN=${RELAXPS_BIN:-$ROOT/${BUILD_DIR:-build}/bin}
# What the recovery policy needs (scripts/policies.sh): no policy is known by
# name here.
source "$ROOT/scripts/policies.sh"
load_policies "$BIN" || exit 1
is_policy "$RECOVERY" || {
  echo "run_local.sh: unknown --recovery=$RECOVERY (registered: ${POLICY_NAMES[*]})" >&2; exit 2; }
# The store the policy keeps its promise with, unless --store is given
# (stateless servers keep their state in memory only).
if [ "${NEED[$RECOVERY.store_kind]}" != any ] && [[ " ${SERVER_ARGS[*]} " != *" --store="* ]]; then
  SERVER_ARGS+=(--store="${NEED[$RECOVERY.store_kind]}")
fi
for b in relaxps-coordinator relaxps-server relaxps-worker; do
  [ -x "$BIN/$b" ] || { echo "run_local.sh: $BIN/$b not found (build failed?)" >&2; exit 1; }
done

WORKER_CMD=("$BIN/relaxps-worker")
if [ -n "$TRAINER" ]; then
  [ -f "$TRAINER" ] || { echo "run_local.sh: --trainer=$TRAINER: no such file" >&2; exit 2; }
  [ "$EVAL_EVERY_S" = 0 ] || {
    echo "run_local.sh: --evaluator_every_s runs relaxps-worker's model; not with --trainer" >&2; exit 2; }
  PY_PATH=${RELAXPS_PYTHONPATH:-$ROOT/${BUILD_DIR:-build}/python}
  compgen -G "$PY_PATH/relaxps/_relaxps*.so" >/dev/null || {
    echo "run_local.sh: no relaxps Python package in $PY_PATH (build with -DRELAXPS_WITH_PYTHON=ON)" >&2; exit 1; }
  WORKER_CMD=(env "PYTHONPATH=$PY_PATH${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 "$TRAINER")
fi

[ -n "$OUT_DIR" ] || OUT_DIR="$ROOT/runs/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT_DIR" || exit 1
OUT_DIR=$(cd "$OUT_DIR" && pwd)

# --security=curve: fresh CurveZMQ keys for this run, one per process.
case "$SECURITY" in
  plain) ;;
  curve)
    "$BIN/relaxps-ctl" keygen "$OUT_DIR/keys" --servers="$SERVERS" --workers="$WORKERS" \
      >/dev/null || { echo "run_local.sh: relaxps-ctl keygen failed" >&2; exit 1; }
    SEC=(--security=curve --keys_dir="$OUT_DIR/keys")
    COORD_ARGS+=("${SEC[@]}"); SERVER_ARGS+=("${SEC[@]}"); WORKER_ARGS+=("${SEC[@]}") ;;
  *) echo "run_local.sh: --security must be plain or curve, got '$SECURITY'" >&2; exit 2 ;;
esac

# --metrics: one free TCP port per process (coordinator, servers, workers).
METRICS_PORTS=()
if [ "$METRICS" = 1 ]; then
  used=" $(ss -Htan 2>/dev/null | awk '{n = split($4, a, ":"); printf "%s ", a[n]}') "
  port=$((20000 + RANDOM % 20000))
  while [ ${#METRICS_PORTS[@]} -lt $((1 + SERVERS + WORKERS)) ]; do
    port=$((port + 1))
    [[ $used == *" $port "* ]] || METRICS_PORTS+=("$port")
  done
fi
metrics_args() {  # metrics_args INDEX: MARGS=(--metrics_port of process INDEX; 0: coordinator)
  MARGS=()
  if [ "$METRICS" = 1 ]; then MARGS=(--metrics_port="${METRICS_PORTS[$1]}"); fi
}

PIDS=()
NAMES=()
EVAL_PID=""
# Stops the given pids: SIGTERM, up to GRACE_DS tenths of a second of grace
# (default 3 s), then SIGKILL. A stopped (SIGSTOP) process is continued first.
stop_pids() {
  local p
  for p in "$@"; do kill -TERM "$p" 2>/dev/null; kill -CONT "$p" 2>/dev/null; done
  for _ in $(seq 1 "${GRACE_DS:-30}"); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return
    sleep 0.1
  done
  for p in "$@"; do kill -KILL "$p" 2>/dev/null; done
}
cleanup() {
  trap - EXIT INT TERM
  # Workers first, so they finish their step and write their last rows while
  # the servers still answer; then servers and coordinator.
  if [ -n "${FIRST_WORKER:-}" ]; then
    stop_pids "${PIDS[@]:$FIRST_WORKER}"
    # The evaluator's last evaluation needs the servers.
    [ -n "$EVAL_PID" ] && GRACE_DS=600 stop_pids "$EVAL_PID"
    stop_pids "${PIDS[@]:0:$FIRST_WORKER}"
  fi
  [ -n "$EVAL_PID" ] && stop_pids "$EVAL_PID"
  stop_pids "${PIDS[@]}" "${CPIDS[@]}"
  wait 2>/dev/null
  [ "$COORDINATION" = zk ] && "$ROOT/scripts/zk.sh" stop "$OUT_DIR/zk"
}
on_signal() { echo "run_local.sh: interrupted; stopping every process" >&2; cleanup; exit 130; }
trap cleanup EXIT
trap on_signal INT TERM

start() {  # start NAME LOG CMD...
  local name=$1 log=$2; shift 2
  "$@" >"$log" 2>&1 &
  PIDS+=($!)
  NAMES+=("$name")
}

die() {
  echo "run_local.sh: $*" >&2
  echo "run_local.sh: logs in $OUT_DIR" >&2
  exit 1
}

# ---- Coordinators ----------------------------------------------------------------
CPIDS=()  # coordinator i's pid (CPIDS[0] is also PIDS[0])
if [ "$COORDINATION" = zk ]; then
  ZK=$("$ROOT/scripts/zk.sh" start "$OUT_DIR/zk") || die "could not start ZooKeeper (scripts/zk.sh)"
  COORD_ARGS+=(--coordination="zk://$ZK/relaxps")
elif [ ${#CKILLS[@]} -gt 0 ]; then
  COORD_ARGS+=(--data_dir="$OUT_DIR/data/coordinator-0")  # Restarts resume from it.
fi
coord_log() { if [ "$1" = 0 ]; then echo "$OUT_DIR/coordinator.log"; else echo "$OUT_DIR/coordinator-$1.log"; fi; }
# start_coordinator I BIND: starts coordinator I (appending to its log).
start_coordinator() {
  local i=$1 bind=$2
  MARGS=()
  [ "$i" = 0 ] && metrics_args 0  # Only coordinator 0 gets a --metrics_port.
  "$BIN/relaxps-coordinator" --bind="$bind" --endpoint_file="$OUT_DIR/coordinator-$i.endpoint" \
    --num_servers="$SERVERS" --num_workers="$WORKERS" --exit_when_done=false "${COORD_ARGS[@]}" \
    "${MARGS[@]}" >>"$(coord_log "$i")" 2>&1 &
  CPIDS[$i]=$!
  [ "$i" = 0 ] && PIDS[0]=$!
}
COORD=""
for c in $(seq 0 $((COORDINATORS - 1))); do
  rm -f "$OUT_DIR/coordinator-$c.endpoint"
  if [ "$c" = 0 ]; then NAMES+=(coordinator); PIDS+=(0); fi
  bind="tcp://127.0.0.1:*"
  [ "$c" = 0 ] && bind="tcp://127.0.0.1:${PORT/#0/*}"
  start_coordinator "$c" "$bind"
  for _ in $(seq 1 150); do
    [ -s "$OUT_DIR/coordinator-$c.endpoint" ] && break
    kill -0 "${CPIDS[$c]}" 2>/dev/null || die "coordinator $c exited at start-up: $(tail -n 3 "$(coord_log "$c")")"
    sleep 0.1
  done
  [ -s "$OUT_DIR/coordinator-$c.endpoint" ] || die "coordinator $c did not start within 15 s"
  COORD="${COORD:+$COORD,}$(cat "$OUT_DIR/coordinator-$c.endpoint")"
done
cp "$OUT_DIR/coordinator-0.endpoint" "$OUT_DIR/coordinator.endpoint"

# ---- Servers -------------------------------------------------------------------
server_cmd() {  # server_cmd I EXTRA... : sets CMD to the command line of server I
  local i=$1; shift
  metrics_args $((1 + i))
  CMD=("$BIN/relaxps-server" --coordinator="$COORD" --server_id="$i"
       --data_dir="$OUT_DIR/data/server-$i" "${SERVER_ARGS[@]}" "${MARGS[@]}" "$@")
}
for i in $(seq 0 $((SERVERS - 1))); do
  server_cmd "$i"
  start "server $i" "$OUT_DIR/server-$i.log" "${CMD[@]}"
done
# Restarts server I in place (same id, data dir and slot in PIDS) with the
# policy's restart flags; --restore_from only when it has a checkpoint.
restart_server() {
  local i=$1 from=() f
  for f in ${NEED[$RECOVERY.restart_flags]}; do
    if [[ $f == --restore_from=* ]] &&
       ! compgen -G "$OUT_DIR/data/checkpoints/server-$i/ckpt-*" >/dev/null; then
      continue
    fi
    from+=("$f")
  done
  echo "==== restarted by run_local.sh at $(date +%T) ${from[*]}" >>"$OUT_DIR/server-$i.log"
  server_cmd "$i" "${from[@]}"
  "${CMD[@]}" >>"$OUT_DIR/server-$i.log" 2>&1 &
  PIDS[$i + 1]=$!
}

# ---- Workers -------------------------------------------------------------------
STOP_ARGS=()
EVAL_ARGS=()
[ "$EVAL_EVERY_S" != 0 ] && EVAL_ARGS+=(--eval_every_s=0 --final_eval=false)
START_US=${EPOCHREALTIME/./}
echo "${EPOCHREALTIME}" >"$OUT_DIR/start_unix"
[ -n "$DURATION_S" ] && STOP_ARGS+=(--duration_s="$DURATION_S")
[ -n "$EPOCHS" ] && STOP_ARGS+=(--epochs="$EPOCHS")
FIRST_WORKER=${#PIDS[@]}
for i in $(seq 0 $((WORKERS - 1))); do
  MARGS=()
  [ -z "$TRAINER" ] && metrics_args $((1 + SERVERS + i))  # Python trainers serve none.
  start "worker $i" "$OUT_DIR/worker-$i.log" "${WORKER_CMD[@]}" --coordinator="$COORD" \
    --worker_id="$i" --model="$MODEL" --num_workers="$WORKERS" \
    --metrics_csv="$OUT_DIR/worker-$i.csv" --steps_csv="$OUT_DIR/worker-$i.steps.csv" \
    "${MARGS[@]}" "${STOP_ARGS[@]}" "${WORKER_ARGS[@]}" "${EVAL_ARGS[@]}"
done
if [ "$METRICS" = 1 ]; then
  {
    echo "# Written by run_local.sh for $OUT_DIR:"
    echo "#   prometheus --config.file=$OUT_DIR/prometheus.yml"
    echo "global:"
    echo "  scrape_interval: 5s"
    echo "scrape_configs:"
    # --trainer workers (Python) serve no metrics.
    METRIC_WORKERS=$WORKERS
    [ -n "$TRAINER" ] && METRIC_WORKERS=0
    for role in coordinator server worker; do
      [ "$role" = worker ] && [ "$METRIC_WORKERS" = 0 ] && continue
      echo "  - job_name: relaxps-$role"
      echo "    static_configs:"
      case $role in
        coordinator) first=0; n=1 ;;
        server) first=1; n=$SERVERS ;;
        worker) first=$((1 + SERVERS)); n=$METRIC_WORKERS ;;
      esac
      for i in $(seq 0 $((n - 1))); do
        echo "      - targets: ['127.0.0.1:${METRICS_PORTS[$((first + i))]}']"
        echo "        labels: {role: '$role', id: '$i', run: '$(basename "$OUT_DIR")'}"
      done
    done
  } >"$OUT_DIR/prometheus.yml"
  {
    echo "coordinator http://127.0.0.1:${METRICS_PORTS[0]}/metrics"
    for i in $(seq 0 $((SERVERS - 1))); do
      echo "server-$i http://127.0.0.1:${METRICS_PORTS[$((1 + i))]}/metrics"
    done
    for i in $(seq 0 $((METRIC_WORKERS - 1))); do
      echo "worker-$i http://127.0.0.1:${METRICS_PORTS[$((1 + SERVERS + i))]}/metrics"
    done
  } >"$OUT_DIR/metrics.txt"
  echo "run_local.sh: Prometheus metrics (scrape config $OUT_DIR/prometheus.yml):"
  sed 's/^/  /' "$OUT_DIR/metrics.txt"
fi
if [ "$EVAL_EVERY_S" != 0 ]; then
  # Same model flags as the workers; it runs until stopped after them.
  "$BIN/relaxps-worker" --role=evaluator --coordinator="$COORD" --model="$MODEL" \
    "${WORKER_ARGS[@]}" --eval_every_s="$EVAL_EVERY_S" --duration_s=0 \
    --time_origin_unix="$(cat "$OUT_DIR/start_unix")" \
    --metrics_csv="$OUT_DIR/evaluator.csv" >"$OUT_DIR/evaluator.log" 2>&1 &
  EVAL_PID=$!
fi

echo "run_local.sh: coordinator $COORD, $SERVERS server(s), $WORKERS worker(s), model $MODEL${TRAINER:+ ($TRAINER)}" \
     "${COORD_ARGS[*]} ${WORKER_ARGS[*]}; logs in $OUT_DIR"

# ---- Supervise -------------------------------------------------------------------
declare -A REPORTED
declare -A RESTART_AT  # server index -> epoch second of its restart
declare -A KILLED      # index into KILLS -> done
declare -A CKILLED     # index into CKILLS -> done
declare -A CRESTART_AT # coordinator id -> epoch second of its restart
CKILL_MS=""            # unix ms of the last coordinator kill (takeover not yet seen)
declare -A LEADERS_SEEN  # coordinator id -> LEADER lines already logged
KILL_MS=()             # "unix_ms@server" of each kill
declare -A STOPPED     # index into STOPS -> 1 stopped, 2 continued
declare -A CUT         # index into PARTS -> "ports" while cut, "healed" after
# partition_rules -A|-D PORTS...: DROP every TCP packet from or to the ports.
partition_rules() {
  local op=$1 p; shift
  for p in "$@"; do
    iptables "$op" INPUT -p tcp --dport "$p" -j DROP
    iptables "$op" INPUT -p tcp --sport "$p" -j DROP
  done
}
START=$((START_US / 1000000))
LAST_PROGRESS=$START
echo "time_s,event,server,detail" >"$OUT_DIR/events.csv"
event() {  # event NAME SERVER [DETAIL]
  local d=$(( ${EPOCHREALTIME/./} - START_US ))
  printf '%d.%03d,%s,%s,%s\n' $((d / 1000000)) $((d % 1000000 / 1000)) "$1" "$2" "${3:-}" \
    >>"$OUT_DIR/events.csv"
}
declare -A COORD_SEEN  # coordinator line marker -> lines already logged as events
# coordinator_events MARKER EVENT: the coordinator's "MARKER ... server=..." lines
# (stateless RESEED, hybrid FALLBACK) logged since the last look, as events.
coordinator_events() {
  local marker=$1 name=$2 lines n seen=${COORD_SEEN[$1]:-0}
  lines=$(grep -a "$marker .*server=" "$OUT_DIR/coordinator.log" 2>/dev/null)
  n=$(printf '%s' "$lines" | grep -c "$marker")
  [ "$n" -gt "$seen" ] || return
  printf '%s\n' "$lines" | tail -n $((n - seen)) | while IFS= read -r l; do
    l=${l#*"$marker" }
    local server=${l#*server=}; server=${server%% *}
    event "$name" "$server" "${l//,/;}"
  done
  COORD_SEEN[$marker]=$n
}
log_reseeds() {
  coordinator_events RESEED reseed
  coordinator_events FALLBACK fallback
  coordinator_events TAKEOVER takeover
  return 0
}
while true; do
  now=$(date +%s)
  # Failure injection.
  for k in "${!KILLS[@]}"; do
    [ -n "${KILLED[$k]:-}" ] && continue
    ids=${KILLS[$k]%@*} at=${KILLS[$k]#*@}
    if [ $((now - START)) -ge "$at" ]; then
      KILLED[$k]=1
      for id in ${ids//,/ }; do kill -KILL "${PIDS[$id + 1]}" 2>/dev/null; done
      for id in ${ids//,/ }; do
        echo "[$((now - START))s] run_local.sh: killed server $id (pid ${PIDS[$id + 1]}, --kill_server=${KILLS[$k]})" >&2
        event kill "$id"
        # A kill of several servers at once is no single failover (under a
        # policy that falls back, its reseed event tells what happened).
        [ "$ids" != "$id" ] || KILL_MS+=("$(date +%s%3N)@$id")
      done
    fi
  done
  for k in "${!CKILLS[@]}"; do
    [ -n "${CKILLED[$k]:-}" ] && continue
    id=${CKILLS[$k]%@*} at=${CKILLS[$k]#*@}
    if [ $((now - START)) -ge "$at" ]; then
      CKILLED[$k]=1
      kill -KILL "${CPIDS[$id]}" 2>/dev/null
      CKILL_MS=$(date +%s%3N)
      echo "[$((now - START))s] run_local.sh: killed coordinator $id (pid ${CPIDS[$id]}, --kill_coordinator=${CKILLS[$k]})" >&2
      event kill_coordinator "$id"
    fi
  done
  # Coordinators: a dead one is restarted on its endpoint when kills are
  # injected or standbys exist; the job goes on if another one leads.
  for c in $(seq 0 $((COORDINATORS - 1))); do
    if ! kill -0 "${CPIDS[$c]}" 2>/dev/null; then
      if [ ${#CKILLS[@]} -eq 0 ] && [ "$COORDINATORS" = 1 ]; then
        wait "${CPIDS[$c]}" 2>/dev/null; code=$?
        die "coordinator (pid ${CPIDS[$c]}) died with exit code $code; last log lines:
$(tail -n 5 "$(coord_log "$c")" 2>/dev/null)"
      fi
      if [ -z "${CRESTART_AT[$c]:-}" ]; then
        wait "${CPIDS[$c]}" 2>/dev/null
        CRESTART_AT[$c]=$((now + RESTART_AFTER_S))
      elif [ "$now" -ge "${CRESTART_AT[$c]}" ]; then
        unset "CRESTART_AT[$c]"
        echo "==== restarted by run_local.sh at $(date +%T)" >>"$(coord_log "$c")"
        start_coordinator "$c" "$(cat "$OUT_DIR/coordinator-$c.endpoint")"
        echo "[$((now - START))s] run_local.sh: restarted coordinator $c (pid ${CPIDS[$c]})" >&2
        event restart_coordinator "$c"
      fi
    fi
    # The new leader's LEADER line after a kill: the takeover time.
    n=$(grep -ac '] LEADER ' "$(coord_log "$c")" 2>/dev/null)
    if [ "${n:-0}" -gt "${LEADERS_SEEN[$c]:-0}" ]; then
      LEADERS_SEEN[$c]=$n
      ts=$(grep -a '] LEADER ' "$(coord_log "$c")" | tail -n 1 | awk '{print $2}')
      lms=$(date -d "$ts" +%s%3N 2>/dev/null)
      if [ -n "$CKILL_MS" ] && [ -n "$lms" ] && [ "$lms" -ge "$CKILL_MS" ]; then
        event leader "$c" "takeover_ms=$((lms - CKILL_MS))"
        echo "[$((now - START))s] run_local.sh: coordinator $c leads $((lms - CKILL_MS)) ms after the kill" >&2
        CKILL_MS=""
      fi
    fi
  done
  for k in "${!STOPS[@]}"; do
    [ "${STOPPED[$k]:-0}" = 2 ] && continue
    [[ ${STOPS[$k]} =~ ^([0-9]+)@([0-9]+)\+([0-9]+)$ ]]
    id=${BASH_REMATCH[1]} at=${BASH_REMATCH[2]} for=${BASH_REMATCH[3]}
    if [ "${STOPPED[$k]:-0}" = 0 ] && [ $((now - START)) -ge "$at" ]; then
      STOPPED[$k]=1
      echo "[$((now - START))s] run_local.sh: stopping server $id for ${for} s (SIGSTOP)" >&2
      kill -STOP "${PIDS[$id + 1]}" 2>/dev/null
      event stop "$id"
    elif [ "${STOPPED[$k]:-0}" = 1 ] && [ $((now - START)) -ge $((at + for)) ]; then
      STOPPED[$k]=2
      echo "[$((now - START))s] run_local.sh: continuing server $id (SIGCONT)" >&2
      kill -CONT "${PIDS[$id + 1]}" 2>/dev/null
      event cont "$id"
    fi
  done
  for k in "${!PARTS[@]}"; do
    [ "${CUT[$k]:-}" = healed ] && continue
    [[ ${PARTS[$k]} =~ ^([0-9]+)@([0-9]+)\+([0-9]+)$ ]]
    id=${BASH_REMATCH[1]} at=${BASH_REMATCH[2]} for=${BASH_REMATCH[3]}
    if [ -z "${CUT[$k]:-}" ] && [ $((now - START)) -ge "$at" ]; then
      pid=${PIDS[$id + 1]}
      ports=$(ss -tanpH 2>/dev/null | grep "pid=$pid," | awk '{print $4}' | sed 's/.*://' | sort -u)
      CUT[$k]=$(echo $ports)
      echo "[$((now - START))s] run_local.sh: partitioning server $id for ${for} s (ports ${CUT[$k]})" >&2
      partition_rules -A ${CUT[$k]}
      event partition "$id"
    elif [ -n "${CUT[$k]:-}" ] && [ $((now - START)) -ge $((at + for)) ]; then
      echo "[$((now - START))s] run_local.sh: healing the partition of server $id" >&2
      partition_rules -D ${CUT[$k]}
      CUT[$k]=healed
      event heal "$id"
    fi
  done
  log_reseeds
  # Control plane: the coordinator's death ends the job; a server's too,
  # unless the recovery policy restarts it.
  for idx in $(seq 1 $((FIRST_WORKER - 1))); do
    pid=${PIDS[$idx]}
    if ! kill -0 "$pid" 2>/dev/null; then
      name=${NAMES[$idx]}
      if [ "$idx" -gt 0 ] && [ "${NEED[$RECOVERY.restart]}" != never ]; then
        i=$((idx - 1))
        if [ -z "${RESTART_AT[$i]:-}" ]; then
          wait "$pid" 2>/dev/null; code=$?
          RESTART_AT[$i]=$((now + RESTART_AFTER_S))
          echo "[$((now - START))s] run_local.sh: $name (pid $pid) exited with code $code; restarting it in ${RESTART_AFTER_S} s" >&2
          event down "$i"
        elif [ "$now" -ge "${RESTART_AT[$i]}" ]; then
          unset "RESTART_AT[$i]"
          restart_server "$i"
          echo "[$((now - START))s] run_local.sh: restarted $name (pid ${PIDS[$idx]})" >&2
          event restart "$i"
        fi
        continue
      fi
      wait "$pid" 2>/dev/null; code=$?
      log="$OUT_DIR/${name// /-}.log"
      die "$name (pid $pid) died with exit code $code; last log lines:
$(tail -n 5 "$log" 2>/dev/null)"
    fi
  done
  running=0
  for idx in $(seq "$FIRST_WORKER" $((${#PIDS[@]} - 1))); do
    pid=${PIDS[$idx]}
    if kill -0 "$pid" 2>/dev/null; then
      running=$((running + 1))
    elif [ -z "${REPORTED[$idx]:-}" ]; then
      wait "$pid" 2>/dev/null; code=$?
      REPORTED[$idx]=$code
      if [ "$code" != 0 ]; then
        echo "run_local.sh: ${NAMES[$idx]} (pid $pid) exited with code $code; the others continue" >&2
        tail -n 2 "$OUT_DIR/${NAMES[$idx]// /-}.log" >&2
      fi
    fi
  done
  [ "$running" = 0 ] && break
  now=$(date +%s)
  if [ $((now - LAST_PROGRESS)) -ge "$PROGRESS_S" ]; then
    LAST_PROGRESS=$now
    for i in $(seq 0 $((WORKERS - 1))); do
      line=$(grep -a '^progress ' "$OUT_DIR/worker-$i.log" 2>/dev/null | tail -n 1)
      [ -n "$line" ] && echo "[$((now - START))s] $line"
    done
    if [ -n "$EVAL_PID" ]; then
      line=$(grep -a '^evaluator ' "$OUT_DIR/evaluator.log" 2>/dev/null | tail -n 1)
      [ -n "$line" ] && echo "[$((now - START))s] $line"
    fi
  fi
  sleep 0.5
done

# ---- Failover times (chain) ------------------------------------------------------
# For each kill: the first "chain failover" acknowledgement any worker logged
# after it.
if [ "${#KILL_MS[@]}" -gt 0 ]; then
  log_reseeds
  acks=$(grep -aho 'chain failover: .* at unix_ms=[0-9]*' "$OUT_DIR"/worker-*.log 2>/dev/null |
         grep -o '[0-9]*$' | sort -n)
  for k in "${KILL_MS[@]}"; do
    kms=${k%@*} kid=${k#*@}
    first=$(echo "$acks" | awk -v t="$kms" '$1 >= t {print; exit}')
    if [ -n "$first" ]; then
      echo "$(( kms / 1000 - START )),failover_ms=$((first - kms)),$kid" >>"$OUT_DIR/events.csv"
      echo "run_local.sh: server $kid killed; first resent push acknowledged by the new head after $((first - kms)) ms" >&2
    fi
  done
fi

# ---- Counters --------------------------------------------------------------------
# The push parts of each worker incarnation the servers' states reflect, read
# while they still run: with each worker's acked_updates (its final line) it
# counts what the failures lost (scripts/experiment/analyze_run.py).
"$BIN/relaxps-ctl" --coordinator="$COORD" --json stats >"$OUT_DIR/counters.json" \
  2>"$OUT_DIR/counters.err" || echo "run_local.sh: relaxps-ctl stats failed (see counters.err)" >&2

# ---- Summary ----------------------------------------------------------------------
if [ -n "$EVAL_PID" ]; then
  # Its last evaluation, of the final model, before the servers go.
  GRACE_DS=600 stop_pids "$EVAL_PID"
  wait "$EVAL_PID" 2>/dev/null
  EVAL_PID=""
fi
failed=0
for idx in $(seq "$FIRST_WORKER" $((${#PIDS[@]} - 1))); do
  [ "${REPORTED[$idx]:-0}" != 0 ] && failed=$((failed + 1))
done
for i in $(seq 0 $((WORKERS - 1))); do
  line=$(grep -a '^final ' "$OUT_DIR/worker-$i.log" 2>/dev/null | tail -n 1)
  [ -n "$line" ] && echo "$line"
done
# The evaluator's last evaluation, else worker 0's, else any worker's number.
acc=$(grep -ah '^final ' "$OUT_DIR"/evaluator.log "$OUT_DIR"/worker-*.log 2>/dev/null | grep -o ' test_acc=[0-9][0-9.]*' | head -n 1 | cut -d= -f2)
total_sps=$(grep -ah '^final ' "$OUT_DIR"/worker-*.log 2>/dev/null | grep -o ' samples_per_s=[0-9.]*' | cut -d= -f2 | awk '{s += $1} END {if (NR) printf "%.1f", s}')
echo "run_local.sh: final test accuracy ${acc:-unknown}; total samples/s ${total_sps:-unknown}"
echo "run_local.sh: logs and metrics CSVs in $OUT_DIR"
if [ "$failed" = "$WORKERS" ]; then
  echo "run_local.sh: every worker failed" >&2
  exit 1
fi
exit 0
