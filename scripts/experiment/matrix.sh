# Sourced by scripts/experiment.sh: policy probing, the run matrix and the
# loop that runs it. Uses the variables experiment.sh sets (POLICY_LIST,
# KILL_LIST, ..., OUT, BIN, ROOT, PY) and say().

declare -A REFUSED  # policy -> reason
RUN_IDS=()
RUN_ARGS=()  # one string per run: the run_local.sh flags, NUL-free, space-separated
FAILED=0
T_START=$(date +%s)
RUN_PID=""  # the running run_local.sh

# Ctrl-C / SIGTERM: stop the running job (run_local.sh stops its processes)
# and exit; finished runs are kept and the next invocation resumes.
on_signal() {
  trap - INT TERM
  if [ -n "$RUN_PID" ]; then
    kill -TERM "$RUN_PID" 2>/dev/null
    wait "$RUN_PID" 2>/dev/null
  fi
  say "experiment.sh: interrupted; finished runs are kept, run the same command to resume"
  exit 130
}
trap on_signal INT TERM

servers_for() {  # servers_for POLICY: what the policy's needs say experiments run
  echo "${NEED[$1.experiment_servers]}"
}
policy_flags() {  # policy_flags POLICY: the coordinator/server flags its needs ask for
  local p=$1 flags=()
  [ "${NEED[$p.min_replicas]}" -gt 1 ] && flags+=("--coordinator.replicas=${NEED[$p.min_replicas]}")
  [ "${NEED[$p.store_kind]}" = any ] || flags+=("--store=${NEED[$p.store_kind]}")
  # A policy that restores checkpoints needs them written.
  [ "${NEED[$p.restart]}" = same-id-from-checkpoint ] &&
    flags+=("--checkpoint_every_s=$([ "$QUICK" = 1 ] && echo 2 || echo 5)")
  echo "${flags[*]}"
}

# Asks relaxps-coordinator whether it accepts each policy (then with the
# policy's extra flags): exit 2 within 1.5 s marks it refused, with the last
# line of its stderr as the reason.
probe_one() {  # probe_one FLAGS... ; sets PROBE_RC and PROBE_ERR
  local err
  err=$(mktemp)
  timeout 1.5 "$BIN/relaxps-coordinator" --bind='tcp://127.0.0.1:*' "$@" >/dev/null 2>"$err"
  PROBE_RC=$?
  PROBE_ERR=$(grep -v '^[IWE][0-9]' "$err" | tail -n 1)
  rm -f "$err"
}
probe_policies() {
  : >"$OUT/skipped.txt"
  local p extra
  for p in "${POLICY_LIST[@]}"; do
    probe_one --recovery="$p" --num_servers="$(servers_for "$p")"
    if [ "$PROBE_RC" = 124 ]; then
      # shellcheck disable=SC2046
      extra=($(policy_flags "$p" | tr ' ' '\n' | sed -n 's/^--coordinator\./--/p'))
      [ ${#extra[@]} -gt 0 ] && probe_one --recovery="$p" --num_servers="$(servers_for "$p")" "${extra[@]}"
    fi
    if [ "$PROBE_RC" != 124 ] && [ "$PROBE_RC" != 0 ]; then
      REFUSED[$p]=${PROBE_ERR:-relaxps-coordinator exited with $PROBE_RC}
      say "[skip] policy $p: refused by relaxps-coordinator (exit $PROBE_RC): ${REFUSED[$p]}"
      echo "policy,$p,${REFUSED[$p]//,/;}" >>"$OUT/skipped.txt"
    fi
  done
  if ! command -v java >/dev/null || [ ! -r /usr/share/java/zookeeper.jar ]; then
    REFUSED[coordinator]="coordinator faults need java and zookeeper (scripts/install_deps.sh)"
  fi
  if ! "$ROOT/scripts/run_local.sh" --help | grep -q -- '--partition_server'; then
    REFUSED[partition]="run_local.sh has no --partition_server"
  elif ! command -v iptables >/dev/null || ! command -v unshare >/dev/null || [ "$(id -u)" != 0 ]; then
    REFUSED[partition]="partitions need root, iptables and unshare (scripts/install_deps.sh)"
  fi
}

# Fault times (seconds after start) and targets of a run: ttf's fixed
# schedule (server 0), or seeded random ones.
fault_schedule() {  # fault_schedule KILLS SERVERS RUN_SEED -> "ID@T ID@T ..."
  local k=$1 servers=$2 seed=$3
  if [ "$SCHEDULE" = ttf ]; then
    local i out=() t
    for ((i = 0; i < k; i++)); do
      t=${FAULT_AT[$i]:-$(( FAULT_AT[-1] + (i - ${#FAULT_AT[@]} + 1) * (DOWN_S + 30) ))}
      out+=("0@$t")
    done
    echo "${out[*]}"
  else
    "$PY" - "$k" "$servers" "$seed" "$DURATION_S" "$DOWN_S" <<'EOF'
import random, sys
k, servers, seed, duration, down = map(int, sys.argv[1:])
rng = random.Random(seed)
# Faults in the first 2/3 of the run, at least down + 5 s apart.
lo, hi, gap = max(3, duration // 10), max(4, duration * 2 // 3), down + 5
times = []
for _ in range(1000):
    times = sorted(rng.randint(lo, hi) for _ in range(k))
    if all(b - a >= gap for a, b in zip(times, times[1:])):
        break
print(" ".join(f"{rng.randrange(servers)}@{t}" for t in times))
EOF
  fi
}

build_matrix() {
  local rep w c p k f id servers sched flags a
  for ((rep = 1; rep <= REPEATS; rep++)); do
    for w in "${WORKER_LIST[@]}"; do
      for c in "${CONS_LIST[@]}"; do
        for k in "${KILL_LIST[@]}"; do
          for p in "${POLICY_LIST[@]}"; do
            for f in $([ "$k" = 0 ] && echo nofault || echo "${FAULT_LIST[@]}"); do
              # A fault ends the job of a policy that does not tolerate one.
              [ "${NEED[$p.tolerates_server_loss]}" = false ] && [ "$k" != 0 ] && continue
              id="$p-k$k-$f-$c-w$w-r$rep"
              if [ -n "${REFUSED[$p]:-}" ] || [ -n "${REFUSED[$f]:-}" ]; then
                continue
              fi
              servers=$(servers_for "$p")
              sched=$(fault_schedule "$k" "$servers" "$((SEED * 1000 + rep * 10 + k))")
              flags="--servers=$servers --workers=$w --model=$MODEL --consistency=$c"
              flags+=" --recovery=$p --duration_s=$DURATION_S --restart_after_s=$DOWN_S"
              flags+=" --optimizer=sgd --lr=0.01 --batch=32 --evaluator_every_s=$EVAL_EVERY_S"
              # Each repeat trains from its own seed (initialization, data order, dropout).
              flags+=" --seed=$rep"
              flags+=" --log_every_s=1 --progress_s=30 $(policy_flags "$p")"
              local nth=0
              [ "$f" = coordinator ] && flags+=" --coordinators=2 --coordination=zk"
              for a in $sched; do
                case "$f" in
                  coordinator) flags+=" --kill_coordinator=$((nth % 2))@${a#*@}"; nth=$((nth + 1)) ;;
                  kill) flags+=" --kill_server=$a" ;;
                  stop) flags+=" --stop_server=$a+$DOWN_S" ;;
                  partition) flags+=" --partition_server=$a+$DOWN_S" ;;
                esac
              done
              RUN_IDS+=("$id")
              RUN_ARGS+=("$flags")
            done
          done
        done
      done
    done
  done
  local f
  for f in "${FAULT_LIST[@]}"; do
    if [ -n "${REFUSED[$f]:-}" ]; then
      say "[skip] fault $f: ${REFUSED[$f]}"
      echo "fault,$f,${REFUSED[$f]//,/;}" >>"$OUT/skipped.txt"
    fi
  done
}

fmt_hms() { printf '%02d:%02d:%02d' $(($1 / 3600)) $(($1 % 3600 / 60)) $(($1 % 60)); }

run_matrix() {
  local n=${#RUN_IDS[@]} i id dir t0 wall rc todo=0 done_walls=0 done_runs=0 est eta
  for id in "${RUN_IDS[@]}"; do [ -s "$OUT/runs/$id/metrics.json" ] || todo=$((todo + 1)); done
  say "experiment.sh: $n run(s) in the matrix, $((n - todo)) already done, $todo to run"
  for ((i = 0; i < n; i++)); do
    id=${RUN_IDS[$i]}
    dir="$OUT/runs/$id"
    if [ -s "$dir/metrics.json" ]; then
      if [ "$REANALYZE" = 1 ] && ! "$PY" "$EXP_PY/analyze_run.py" "$dir" >"$dir/analyze.log" 2>&1; then
        say "[$((i + 1))/$n] $id: results exist; analysis FAILED: $(tail -n 1 "$dir/analyze.log")"
        continue
      fi
      say "[$((i + 1))/$n] $id: results exist, skipped; $(cat "$dir/headline.txt" 2>/dev/null)"
      continue
    fi
    # ETA: the mean wall time of this invocation's runs, else duration + 15 s.
    est=$((DURATION_S + 15))
    [ "$done_runs" -gt 0 ] && est=$((done_walls / done_runs))
    eta=$((est * todo))
    say "[$((i + 1))/$n] $id: starting; $todo run(s) left, ETA $(fmt_hms "$eta")" \
        "(~$(date -u -d "@$(( $(date +%s) + eta ))" +%H:%M) UTC)"
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "${RUN_ARGS[$i]}" >"$dir/flags.txt"
    t0=$(date +%s)
    # In the background, so that a signal reaches on_signal at once.
    # shellcheck disable=SC2086
    RELAXPS_BIN="$BIN" "$ROOT/scripts/run_local.sh" --skip_build --out_dir="$dir" ${RUN_ARGS[$i]} \
      >"$dir/run_local.log" 2>&1 &
    RUN_PID=$!
    wait "$RUN_PID"
    rc=$?
    RUN_PID=""
    wall=$(( $(date +%s) - t0 ))
    echo "$rc $wall" >"$dir/exit.txt"
    todo=$((todo - 1))
    done_walls=$((done_walls + wall))
    done_runs=$((done_runs + 1))
    if "$PY" "$EXP_PY/analyze_run.py" "$dir" >"$dir/analyze.log" 2>&1; then
      say "[$((i + 1))/$n] $id: exit $rc in ${wall}s; $(cat "$dir/headline.txt" 2>/dev/null)"
      [ "$KEEP_DATA" = 1 ] || rm -rf "$dir/data"
    else
      FAILED=$((FAILED + 1))
      say "[$((i + 1))/$n] $id: FAILED (exit $rc in ${wall}s): $(tail -n 1 "$dir/analyze.log")"
      # The launcher's verdict and reason (summary.json), not its output.
      "$PY" -c 'import json, sys; s = json.load(open(sys.argv[1]))
print("    job %s: %s" % (s["verdict"], s["reason"]))' "$dir/summary.json" 2>/dev/null | tee -a "$LOG"
    fi
  done
}
