#!/usr/bin/env bash
# shellcheck disable=SC2317  # cleanup and its helpers run from the EXIT trap.
# Starts a relaxps job on several hosts: the coordinator, servers and workers
# named in a hostfile, over ssh (or any command prefix, --exec), streams their
# progress prefixed with host and process, collects their logs into the run
# folder, and stops everything it started when it ends (done, Ctrl-C, TERM).
#
#   scripts/launch.sh --hostfile=FILE [--exec=CMD] [--out_dir=runs/launch-<time>]
#                     [--bin=DIR] [--security=curve|plain] [--model=mlp]
#                     [--duration_s=60] [--coordinator.X=Y] [--server.X=Y] [worker flags...]
#
# Hostfile: one line per host, '#' starts a comment:
#
#   HOST ROLES [key=value ...]
#
#   HOST   the name --exec gets as {host} (ssh: a host name or user@host)
#   ROLES  comma-separated: coordinator, server[xN], worker[xN]
#          (exactly one coordinator in the file; e.g. "server,workerx2")
#   keys   addr=ADDR        address the other hosts reach this one at
#                           (default: HOST without user@); servers and the
#                           coordinator bind tcp://<bind>:* and advertise it
#          bind=ADDR        interface to bind (default 0.0.0.0)
#          port=N           the coordinator's port (default: OS-chosen)
#          bin=DIR          directory of the relaxps binaries on that host
#                           (default: --bin, i.e. the same path as here)
#          workdir=DIR      where that host keeps keys, pid files and server
#                           data (default /tmp/relaxps-launch-<run id>)
#          metrics_port=N   Prometheus ports N, N+1, ... for the processes on
#                           that host (--metrics_port; default: off); the
#                           run folder then gets prometheus.yml
#   Example:
#     node1 coordinator,server addr=10.0.0.1 metrics_port=9100
#     node2 server,worker      addr=10.0.0.2
#     node3 workerx2           addr=10.0.0.3
#
# Servers get ids 0.. and workers 0.. in hostfile order. --exec is a command
# prefix with {host} replaced (default: 'ssh -o BatchMode=yes {host}'); each
# process runs as `<prefix> sh -s` with its script on stdin, e.g.
# --exec='ip netns exec {host}' for network namespaces. Binaries and the
# Fashion-MNIST data must exist on every host (same paths, or bin=).
#
# Security: processes bind non-loopback addresses, so --security=curve (the
# default) generates the job's CurveZMQ keys here (relaxps-ctl keygen) and
# installs on each host the public keys plus the secret keys of its own
# processes; --security=plain passes --insecure_bind_public (anyone who can
# reach the hosts can read and change the model).
#
# Flags: --coordinator.X=Y and --server.X=Y go to the coordinator / servers;
# --consistency, --staleness, --recovery, --replicas to the coordinator; every
# other --flag to the workers (e.g. --model, --duration_s, --lr, --batch).
#
# Ends when the coordinator ends the job (every worker finished: it then
# tells the servers to flush and exit) or exits; exit status 0 if every
# worker exited 0. Logs: <out_dir>/<host>.<process>.log; prints the final
# test accuracy. On any exit it sends SIGTERM to every remote process still
# running (through --exec), then SIGKILL after 10 s; a process whose host
# became unreachable exits by itself once its coordinator is gone
# (--coordinator_timeout_ms, default 30 s). If launch.sh itself is killed
# with SIGKILL (no clean-up), the job runs to its end: the workers stop after
# --duration_s and the coordinator then ends the job, so every process exits.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

HOSTFILE=""
EXEC='ssh -o BatchMode=yes {host}'
OUT_DIR=""
BIN=${RELAXPS_BIN:-$ROOT/build/bin}
SECURITY=curve
MODEL=mlp
DURATION_S=60
COORD_ARGS=()
SERVER_ARGS=()
WORKER_ARGS=()

# The comment block at the top of this file (up to the first non-comment line).
usage() { awk '/^# shellcheck/ {next} NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }
die() { echo "launch.sh: $*" >&2; exit 2; }

for arg in "$@"; do
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --hostfile=*) HOSTFILE=${arg#*=} ;;
    --exec=*) EXEC=${arg#*=} ;;
    --out_dir=*) OUT_DIR=${arg#*=} ;;
    --bin=*) BIN=${arg#*=} ;;
    --security=*) SECURITY=${arg#*=} ;;
    --model=*) MODEL=${arg#*=} ;;
    --duration_s=*) DURATION_S=${arg#*=} ;;
    --consistency=*|--staleness=*|--recovery=*|--replicas=*) COORD_ARGS+=("$arg") ;;
    --coordinator.*) COORD_ARGS+=("--${arg#--coordinator.}") ;;
    --server.*) SERVER_ARGS+=("--${arg#--server.}") ;;
    --*) WORKER_ARGS+=("$arg") ;;
    *) die "unexpected argument '$arg' (see --help)" ;;
  esac
done
[ -n "$HOSTFILE" ] || die "--hostfile=FILE is required (see --help)"
[ -r "$HOSTFILE" ] || die "cannot read hostfile $HOSTFILE"
[[ $EXEC == *"{host}"* ]] || die "--exec must contain {host}, e.g. 'ssh {host}'"
case "$SECURITY" in curve|plain) ;; *) die "--security must be curve or plain" ;; esac
[[ $DURATION_S =~ ^[0-9]+$ ]] || die "--duration_s must be a number of seconds"
BIN=$(cd "$BIN" 2>/dev/null && pwd) || die "--bin directory not found"

# ---- Parse the hostfile ----------------------------------------------------------
# One entry per process: HOST ADDR BIND BIN WORKDIR ROLE ID METRICS_PORT.
PROCS=()
HOSTS=()
declare -A H_ADDR H_BIND H_BIN H_WORKDIR H_PORT H_METRICS
RUN_ID="$(date +%Y%m%d-%H%M%S)-$$"
NSERVERS=0
NWORKERS=0
NCOORD=0
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
  lineno=$((lineno + 1))
  line=${line%%#*}
  read -r -a f <<<"$line"
  [ ${#f[@]} -eq 0 ] && continue
  [ ${#f[@]} -ge 2 ] || die "$HOSTFILE:$lineno: expected 'HOST ROLES [key=value...]'"
  host=${f[0]}
  [[ -z ${H_ADDR[$host]+x} ]] || die "$HOSTFILE:$lineno: host $host listed twice"
  H_ADDR[$host]=${host#*@}; H_BIND[$host]=0.0.0.0; H_BIN[$host]=$BIN
  H_WORKDIR[$host]=/tmp/relaxps-launch-$RUN_ID; H_PORT[$host]="*"; H_METRICS[$host]=""
  for kv in "${f[@]:2}"; do
    v=${kv#*=}
    case "$kv" in
      addr=?*) H_ADDR[$host]=$v ;;
      bind=?*) H_BIND[$host]=$v ;;
      bin=?*) H_BIN[$host]=$v ;;
      workdir=?*) H_WORKDIR[$host]=$v ;;
      port=?*) [[ $v =~ ^[0-9]+$ ]] || die "$HOSTFILE:$lineno: port=$v"; H_PORT[$host]=$v ;;
      metrics_port=?*) [[ $v =~ ^[0-9]+$ ]] || die "$HOSTFILE:$lineno: metrics_port=$v"
                       H_METRICS[$host]=$v ;;
      *) die "$HOSTFILE:$lineno: unknown key '$kv' (addr, bind, port, bin, workdir, metrics_port)" ;;
    esac
  done
  HOSTS+=("$host")
  IFS=, read -r -a roles <<<"${f[1]}"
  for r in "${roles[@]}"; do
    n=1
    if [[ $r =~ ^(server|worker)x([0-9]+)$ ]]; then r=${BASH_REMATCH[1]}; n=${BASH_REMATCH[2]}; fi
    case "$r" in
      coordinator) [ "$n" = 1 ] || die "$HOSTFILE:$lineno: one coordinator per job"
                   PROCS+=("$host coordinator 0"); NCOORD=$((NCOORD + 1)) ;;
      server) for _ in $(seq 1 "$n"); do PROCS+=("$host server $NSERVERS"); NSERVERS=$((NSERVERS + 1)); done ;;
      worker) for _ in $(seq 1 "$n"); do PROCS+=("$host worker $NWORKERS"); NWORKERS=$((NWORKERS + 1)); done ;;
      *) die "$HOSTFILE:$lineno: unknown role '$r' (coordinator, server[xN], worker[xN])" ;;
    esac
  done
done <"$HOSTFILE"
[ "$NCOORD" = 1 ] || die "$HOSTFILE: needs exactly one coordinator, found $NCOORD"
if [ "$NSERVERS" -lt 1 ] || [ "$NWORKERS" -lt 1 ]; then
  die "$HOSTFILE: needs at least one server and one worker"
fi

[ -n "$OUT_DIR" ] || OUT_DIR="$ROOT/runs/launch-$RUN_ID"
mkdir -p "$OUT_DIR" || exit 1
OUT_DIR=$(cd "$OUT_DIR" && pwd)

# `$EXEC` for HOST as an array (the prefix is split on spaces).
exec_for() { local e=${EXEC//\{host\}/$1}; read -r -a EXEC_ARGV <<<"$e"; }
# Runs the shell script $2 on host $1 (stdin of `sh -s`).
on_host() { exec_for "$1"; "${EXEC_ARGV[@]}" sh -s <<<"$2"; }

# ---- Keys --------------------------------------------------------------------------
if [ "$SECURITY" = curve ]; then
  "$BIN/relaxps-ctl" keygen "$OUT_DIR/keys" --servers="$NSERVERS" --workers="$NWORKERS" >/dev/null ||
    die "relaxps-ctl keygen failed"
fi
for host in "${HOSTS[@]}"; do
  wd=${H_WORKDIR[$host]}
  script="set -e; mkdir -p '$wd/keys'; chmod 700 '$wd/keys'"
  if [ "$SECURITY" = curve ]; then
    # Public keys of everyone; secret keys of this host's processes only.
    names=()
    for p in "${PROCS[@]}"; do
      read -r h role id <<<"$p"
      [ "$h" = "$host" ] || continue
      case $role in coordinator) names+=(coordinator router) ;; server) names+=("server-$id" router) ;;
                    worker) names+=("worker-$id") ;; esac
    done
    for pub in "$OUT_DIR"/keys/*.pub; do
      script+=$'\n'"cat >'$wd/keys/$(basename "$pub")' <<'RELAXPS_KEY'"$'\n'"$(cat "$pub")"$'\n'"RELAXPS_KEY"
    done
    for n in $(printf '%s\n' "${names[@]}" | sort -u); do
      script+=$'\n'"(umask 077; cat >'$wd/keys/$n.key' <<'RELAXPS_KEY'"$'\n'"$(cat "$OUT_DIR/keys/$n.key")"$'\n'"RELAXPS_KEY"$'\n'")"
    done
  fi
  on_host "$host" "$script" || die "cannot prepare $host (${EXEC//\{host\}/$host}): is it reachable?"
done
security_flags() {  # security_flags HOST [worker]: a worker binds nothing
  if [ "$SECURITY" = curve ]; then
    echo "--security=curve --keys_dir=${H_WORKDIR[$1]}/keys"
  elif [ "${2:-}" != worker ]; then
    echo "--insecure_bind_public"
  fi
}

# ---- Processes -----------------------------------------------------------------------
NAMES=()     # host.role-id
JOBS=()      # local pid of each process's pipeline
declare -A NEXT_METRICS
PROM_TARGETS=()
# metrics_flag HOST ROLE ID: sets MFLAG to --metrics_port=<next port of HOST>
# (empty without metrics_port=) and records the scrape target.
metrics_flag() {
  MFLAG=""
  local host=$1 base=${H_METRICS[$1]}
  [ -n "$base" ] || return 0
  local port=$((base + ${NEXT_METRICS[$host]:-0}))
  NEXT_METRICS[$host]=$(( ${NEXT_METRICS[$host]:-0} + 1 ))
  PROM_TARGETS+=("$2 $3 ${H_ADDR[$host]}:$port")
  MFLAG="--metrics_port=$port"
}
# start HOST NAME COMMAND: runs COMMAND (a shell command line) on HOST; its
# output goes to <out_dir>/<name>.log, its non-glog lines to the terminal
# prefixed with [NAME]; <out_dir>/<name>.rc gets its exit status.
start() {
  local host=$1 name=$2 cmd=$3 wd=${H_WORKDIR[$1]}
  local script="mkdir -p '$wd' && echo \$\$ >'$wd/$name.pid' && exec $cmd 2>&1"
  (
    # Ctrl-C reaches the whole process group: the pipeline must live on to
    # record the exit status and the last lines (the binaries install their
    # own handlers, so they still stop on INT/TERM).
    trap '' INT TERM
    exec_for "$host"
    { "${EXEC_ARGV[@]}" sh -s <<<"$script"; echo $? >"$OUT_DIR/$name.rc"; } |
      tee "$OUT_DIR/$name.log" | grep --line-buffered -v -E '^I[0-9]{8} ' |
      sed -u "s/^/[$name] /"
  ) &
  JOBS+=($!)
  NAMES+=("$name")
}
alive() { [ ! -e "$OUT_DIR/$1.rc" ]; }
# Stops the processes named in $@ that still run: TERM through --exec, then
# KILL after GRACE_S seconds.
stop_names() {
  local n host wd sig
  for sig in TERM KILL; do
    for n in "$@"; do
      alive "$n" || continue
      host=${n%%.*}; wd=${H_WORKDIR[$host]}
      on_host "$host" "[ -s '$wd/$n.pid' ] && kill -$sig \$(cat '$wd/$n.pid') 2>/dev/null" </dev/null \
        >/dev/null 2>&1 &
    done
    wait_names "${GRACE_S:-10}" "$@" && return 0
  done
}
wait_names() {  # wait_names SECONDS NAME...: true once every NAME exited
  local deadline=$((SECONDS + $1)) n left; shift
  while true; do
    left=0
    for n in "$@"; do alive "$n" && left=1; done
    [ $left = 0 ] && return 0
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.2
  done
}
cleanup() {
  trap - EXIT INT TERM
  local workers=() servers=() coord=() n
  for n in "${NAMES[@]}"; do
    case $n in *.worker-*) workers+=("$n") ;; *.server-*) servers+=("$n") ;; *) coord+=("$n") ;; esac
  done
  [ ${#workers[@]} -gt 0 ] && stop_names "${workers[@]}"
  [ ${#servers[@]} -gt 0 ] && stop_names "${servers[@]}"
  [ ${#coord[@]} -gt 0 ] && stop_names "${coord[@]}"
  wait 2>/dev/null
  for n in "${NAMES[@]}"; do
    alive "$n" && echo "launch.sh: $n may still run on ${n%%.*}" >&2
  done
  for host in "${HOSTS[@]}"; do
    on_host "$host" "rm -f '${H_WORKDIR[$host]}'/*.pid" </dev/null >/dev/null 2>&1
  done
}
trap cleanup EXIT
trap 'echo "launch.sh: interrupted; stopping every process" >&2; exit 130' INT TERM

# Coordinator first: its "listening on" line gives the endpoint the others use.
for p in "${PROCS[@]}"; do
  read -r host role id <<<"$p"
  [ "$role" = coordinator ] || continue
  CNAME="$host.coordinator"
  metrics_flag "$host" coordinator 0
  start "$host" "$CNAME" "'${H_BIN[$host]}/relaxps-coordinator' \
--bind=tcp://${H_BIND[$host]}:${H_PORT[$host]} --advertise=${H_ADDR[$host]} \
--num_servers=$NSERVERS --num_workers=$NWORKERS $(security_flags "$host") $MFLAG ${COORD_ARGS[*]}"
done
COORD=""
for _ in $(seq 1 300); do
  COORD=$(sed -n 's/^relaxps-coordinator listening on \(tcp:[^ ]*\)$/\1/p' "$OUT_DIR/$CNAME.log" 2>/dev/null)
  [ -n "$COORD" ] && break
  alive "$CNAME" || { echo "launch.sh: the coordinator exited at start-up:" >&2; tail -n 5 "$OUT_DIR/$CNAME.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$COORD" ] || { echo "launch.sh: the coordinator did not start within 30 s" >&2; exit 1; }
echo "launch.sh: coordinator $COORD; $NSERVERS server(s), $NWORKERS worker(s) on ${#HOSTS[@]} host(s); logs in $OUT_DIR"

SERVER_NAMES=()
for p in "${PROCS[@]}"; do
  read -r host role id <<<"$p"
  [ "$role" = server ] || continue
  metrics_flag "$host" server "$id"
  start "$host" "$host.server-$id" "'${H_BIN[$host]}/relaxps-server' --coordinator=$COORD \
--server_id=$id --bind=tcp://${H_BIND[$host]}:* --advertise=${H_ADDR[$host]} \
--data_dir='${H_WORKDIR[$host]}/data/server-$id' $(security_flags "$host") $MFLAG ${SERVER_ARGS[*]}"
  SERVER_NAMES+=("$host.server-$id")
done
WORKER_NAMES=()
for p in "${PROCS[@]}"; do
  read -r host role id <<<"$p"
  [ "$role" = worker ] || continue
  metrics_flag "$host" worker "$id"
  # A worker binds nothing else: its metrics port follows the host's bind=.
  [ -n "$MFLAG" ] && MFLAG+=" --metrics_bind=${H_BIND[$host]}"
  start "$host" "$host.worker-$id" "'${H_BIN[$host]}/relaxps-worker' --coordinator=$COORD \
--worker_id=$id --num_workers=$NWORKERS --model=$MODEL --duration_s=$DURATION_S \
$(security_flags "$host" worker) $MFLAG ${WORKER_ARGS[*]}"
  WORKER_NAMES+=("$host.worker-$id")
done

if [ ${#PROM_TARGETS[@]} -gt 0 ]; then
  {
    echo "# Written by launch.sh: prometheus --config.file=$OUT_DIR/prometheus.yml"
    echo "global:"
    echo "  scrape_interval: 5s"
    echo "scrape_configs:"
    for role in coordinator server worker; do
      printf '%s\n' "${PROM_TARGETS[@]}" | grep -q "^$role " || continue
      echo "  - job_name: relaxps-$role"
      echo "    static_configs:"
      printf '%s\n' "${PROM_TARGETS[@]}" | while read -r r id target; do
        [ "$r" = "$role" ] || continue
        echo "      - targets: ['$target']"
        echo "        labels: {role: '$role', id: '$id'}"
      done
    done
  } >"$OUT_DIR/prometheus.yml"
  echo "launch.sh: Prometheus scrape config $OUT_DIR/prometheus.yml"
fi

# ---- Wait for the workers (or the coordinator's end) ---------------------------------
while true; do
  alive "$CNAME" || break
  for n in "${SERVER_NAMES[@]}"; do
    # A server that failed (not one the job's end let go) ends the launch.
    if ! alive "$n" && [ "$(cat "$OUT_DIR/$n.rc")" != 0 ]; then
      echo "launch.sh: $n exited with status $(cat "$OUT_DIR/$n.rc"): $(tail -n 1 "$OUT_DIR/$n.log")" >&2
      exit 1
    fi
  done
  done_workers=1
  for n in "${WORKER_NAMES[@]}"; do alive "$n" && done_workers=0; done
  [ $done_workers = 1 ] && break
  sleep 0.5
done
# With every worker gone the coordinator ends the job: servers flush and exit.
wait_names 60 "${NAMES[@]}" || echo "launch.sh: processes still running 60 s after the workers; stopping them" >&2
status=0
for n in "${WORKER_NAMES[@]}"; do
  rc=$(cat "$OUT_DIR/$n.rc" 2>/dev/null || echo "?")
  [ "$rc" = 0 ] || { echo "launch.sh: $n exited with status $rc" >&2; status=1; }
done
acc=$(grep -ah '^final ' "$OUT_DIR"/*.worker-*.log 2>/dev/null | grep -o 'test_acc=[0-9.]*' | head -n 1 | cut -d= -f2)
echo "launch.sh: final test accuracy ${acc:-unknown}; logs in $OUT_DIR"
exit $status
