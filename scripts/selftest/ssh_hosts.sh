# Three "hosts" reachable over real ssh on one machine, for the multi-host
# self-test (scripts/selftest/ssh.sh): sourced, not run.
#
# Call ssh_hosts_up DIR inside a private network namespace (unshare -n): it
# brings up loopback, gives it 127.0.0.2, .3 and .4, and starts one Debian
# sshd per address (listening on that address only, port 22) with a
# throwaway host key; a throwaway user key for root is the only way in.
# SSH_CONFIG is then an ssh_config for `ssh -F` that reaches each host by
# its address. ssh_hosts_down stops the sshds (and every session under
# them). Nothing outside 127.0.0.0/8 is used.

SSH_HOSTS=(127.0.0.2 127.0.0.3 127.0.0.4)

ssh_hosts_up() {
  local dir=$1 host
  SSH_DIR=$dir
  SSH_CONFIG=$dir/ssh_config
  mkdir -p "$dir" /run/sshd
  ip link set lo up
  for host in "${SSH_HOSTS[@]}"; do
    ip addr add "$host/8" dev lo 2>/dev/null || true
  done
  ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key" -C relaxps-selftest-host
  ssh-keygen -q -t ed25519 -N '' -f "$dir/user_key" -C relaxps-selftest-user
  cp "$dir/user_key.pub" "$dir/authorized_keys"
  chmod 600 "$dir/authorized_keys"
  for host in "${SSH_HOSTS[@]}"; do
    cat >"$dir/sshd_$host.conf" <<CONF
ListenAddress $host
Port 22
HostKey $dir/host_key
PidFile $dir/sshd_$host.pid
AuthorizedKeysFile $dir/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AcceptEnv RELAXPS_*
CONF
    /usr/sbin/sshd -f "$dir/sshd_$host.conf" -E "$dir/sshd_$host.log" || return 1
  done
  cat >"$SSH_CONFIG" <<CONF
Host 127.0.0.*
  User root
  IdentityFile $dir/user_key
  IdentitiesOnly yes
  UserKnownHostsFile /dev/null
  StrictHostKeyChecking no
  BatchMode yes
  LogLevel ERROR
  ConnectTimeout 5
  ServerAliveInterval 2
  ServerAliveCountMax 3
CONF
  for host in "${SSH_HOSTS[@]}"; do
    local ok=0
    for _ in $(seq 1 50); do
      if [ "$(ssh -F "$SSH_CONFIG" "$host" 'echo up' 2>/dev/null)" = up ]; then ok=1; break; fi
      sleep 0.1
    done
    [ $ok = 1 ] || { echo "sshd on $host does not answer: $(tail -3 "$dir/sshd_$host.log")"; return 1; }
  done
}

# The pids of every process below the sshd of `host` (its sessions).
ssh_host_pids() {
  local host=$1 pid
  pid=$(cat "$SSH_DIR/sshd_$host.pid" 2>/dev/null) || return 0
  ssh_descendants "$pid"
}

ssh_descendants() {
  local child
  for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    echo "$child"
    ssh_descendants "$child"
  done
}

ssh_hosts_down() {
  local host pids
  for host in "${SSH_HOSTS[@]}"; do
    pids="$(ssh_host_pids "$host") $(cat "$SSH_DIR/sshd_$host.pid" 2>/dev/null)"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
  done
}
