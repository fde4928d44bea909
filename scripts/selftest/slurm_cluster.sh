# A one-node Slurm cluster of Debian's slurmctld, slurmd and munge, made in a
# temporary directory for the Slurm self-test (scripts/selftest/slurm.sh):
# sourced, not run.
#
# slurm_up DIR writes DIR/slurm.conf (this machine as the one node, with its
# CPUs; its own ports, state, spool and log dirs), makes a munge key for it,
# starts munged on its own socket, then slurmctld and slurmd, and waits until
# the node is idle. It exports SLURM_CONF, so sbatch, srun, salloc, squeue
# and scancel talk to this cluster only. slurm_down stops all three.
# Nothing is written outside DIR; the system's own munge and Slurm (if any)
# are not touched.

slurm_up() {
  local dir=$1 node
  SLURM_DIR=$dir
  node=$(hostname)
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/munge"
  chmod 755 "$dir"
  chmod 711 "$dir/munge"  # munged wants every user able to reach its socket.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  /usr/sbin/munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/seed" || return 1
  # Free ports of its own (asked of the OS), so that nothing already on the
  # machine is in the way.
  local ports ctld_port slurmd_port
  ports=$(/usr/bin/python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')
  read -r ctld_port slurmd_port <<<"$ports"
  # slurmstepd processes that exist already are not this cluster's.
  SLURM_STEPDS_BEFORE=" $(pgrep -x slurmstepd | tr '\n' ' ') "
  cat >"$dir/slurm.conf" <<CONF
ClusterName=relaxpsselftest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
KillWait=5
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=selftest Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:16
CONF
  export SLURM_CONF=$dir/slurm.conf
  /usr/sbin/slurmctld -c || return 1
  /usr/sbin/slurmd || return 1
  local deadline=$((SECONDS + 30))
  while [ $SECONDS -lt $deadline ]; do
    [ -f "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null ||
      { echo "slurmctld died: $(tail -2 "$dir/log/slurmctld.log")"; return 1; }
    if [ "$(timeout 5 sinfo -h -o %t 2>/dev/null)" = idle ]; then return 0; fi
    sleep 0.2
  done
  echo "the Slurm node is not idle: $(sinfo 2>&1 | tail -1); $(tail -3 "$dir/log/slurmd.log")"
  return 1
}

slurm_down() {
  local f pid
  # Step daemons this cluster started (they outlive slurmd), and any slurmd
  # child still serving a request.
  for pid in $(pgrep -x slurmstepd); do
    [[ "$SLURM_STEPDS_BEFORE" == *" $pid "* ]] || kill -KILL "$pid" 2>/dev/null
  done
  for pid in $(pgrep -x slurmd) $(pgrep -x slurmctld); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_DIR/slurm.conf" &&
      kill -KILL "$pid" 2>/dev/null
  done
  for f in "$SLURM_DIR/slurmd.pid" "$SLURM_DIR/slurmctld.pid" "$SLURM_DIR/munge/munged.pid"; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  sleep 0.5
  for f in "$SLURM_DIR/slurmd.pid" "$SLURM_DIR/slurmctld.pid" "$SLURM_DIR/munge/munged.pid"; do
    [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
  done
  return 0
}
