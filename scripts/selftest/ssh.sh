#!/usr/bin/env bash
# Multi-host over real ssh, on one machine (issue 38): in a private network
# namespace three "hosts" are 127.0.0.2, .3 and .4, each with its own Debian
# sshd listening on that address only (throwaway host and user keys,
# scripts/selftest/ssh_hosts.sh). relaxps-launch's ssh backend runs a chain
# job (3 servers, one replica each on every host) with the coordinator on
# host .2, servers on .2-.4 and both workers on .4; every process binds and
# advertises its own host's address, and connects from it (--source_address),
# so that dropping an address cuts its processes off both ways. 8 s into
# training host .3 is lost, by the launcher's own fault schedule: its address
# is dropped with iptables (`partition host:127.0.0.3`, ssh's port 22 kept for
# the launcher's control channel), then every process on it is killed (`kill
# host:127.0.0.3`: their connections' resets are dropped too, as when a
# machine loses power). The job must finish (exit 0, verdict done, a final
# accuracy in summary.json) and nothing carrying the job's tag may be left on
# any host. No address outside 127.0.0.0/8 is used.
#   scripts/selftest/ssh.sh [BIN_DIR]     (root; exits 77 = skipped without)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# ctest passes SOURCE_DIR BIN_DIR; by hand: [BIN_DIR].
if [ $# -ge 2 ]; then BIN=$2; else BIN=${1:-${RELAXPS_BIN:-$ROOT/build/bin}}; fi
BIN=$(cd "$BIN" 2>/dev/null && pwd) || { echo "FAIL: no binaries in ${BIN}"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespace, sshd, iptables)"
if [ -z "${RELAXPS_SELFTEST_NETNS:-}" ]; then
  if ! command -v /usr/sbin/sshd >/dev/null || ! command -v ssh >/dev/null; then
    (apt-get update -qq && apt-get install -y -qq openssh-server openssh-client) >/dev/null ||
      skip "cannot install openssh-server"
  fi
  command -v iptables >/dev/null || apt-get install -y -qq iptables >/dev/null || skip "no iptables"
  RELAXPS_SELFTEST_NETNS=1 exec unshare -n -- bash "$0" "$ROOT" "$BIN"
fi
# shellcheck source=scripts/selftest/ssh_hosts.sh
source "$ROOT/scripts/selftest/ssh_hosts.sh"
DIR=$(mktemp -d /tmp/relaxps_ssh_selftest_XXXXXX)
TAG="ssh-selftest-$$"
cleanup() {
  ssh_hosts_down
  "$ROOT/launcher/relaxps-launch" --sweep="$TAG" >/dev/null 2>&1
  if [ -n "${KEEP:-}" ]; then echo "kept $DIR"; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -n 20 "$DIR/launch.out"; exit 1; }
ssh_hosts_up "$DIR/ssh" || fail "sshd did not come up"

/usr/bin/python3 - "$DIR/spec.json" "$BIN" "$DIR/run" "$TAG" "$SSH_CONFIG" <<'PY'
import json, sys
spec_path, bin_dir, out_dir, tag, ssh_config = sys.argv[1:]
hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
spec = {
    "name": "ssh-selftest", "backend": "ssh", "bin_dir": bin_dir, "out_dir": out_dir, "tag": tag,
    "hosts": [{"name": h, "addr": h, "bind": h} for h in hosts],
    "coordinator": {"count": 1, "hosts": ["127.0.0.2"]},
    "servers": {"count": 3, "hosts": hosts},
    "workers": {"count": 2, "hosts": ["127.0.0.4"]},
    "consistency": "async", "recovery": "chain", "model": "mlp", "duration_s": 25,
    "faults": [{"at_s": 8, "action": "partition", "target": "host:127.0.0.3", "for_s": 3600},
               {"at_s": 8, "action": "kill", "target": "host:127.0.0.3"}],
    "ssh": {"command": ["ssh", "-F", ssh_config, "-T", "{host}"], "shell": True},
}
json.dump(spec, open(spec_path, "w"), indent=1)
PY
echo "hosts: ${SSH_HOSTS[*]} (each its own sshd); job tag $TAG"
"$ROOT/launcher/relaxps-launch" "$DIR/spec.json" >"$DIR/launch.out" 2>&1
rc=$?
tail -n 5 "$DIR/launch.out"
[ $rc = 0 ] || fail "relaxps-launch exited $rc"
/usr/bin/python3 - "$DIR/run/summary.json" <<'PY' || fail "summary.json"
import json, sys
s = json.load(open(sys.argv[1]))
acc = s.get("final_accuracy")
hit = [f for f in s.get("faults", []) if f.get("target") == "host:127.0.0.3"]
print(f"summary: verdict={s.get('verdict')} final_accuracy={acc} faults on host .3: "
      f"{[(f.get('action'), f.get('processes')) for f in hit]}")
assert s.get("verdict") == "done", s.get("verdict")
assert acc is not None and acc > 0.5, acc
assert [f.get("action") for f in hit] == ["partition", "kill"], hit
assert not any(f.get("error") or f.get("skipped") for f in hit), hit
import os
events = [json.loads(l) for l in open(os.path.join(os.path.dirname(sys.argv[1]), "events.jsonl"))]
failovers = [e for e in events if e["kind"] == "chain_failover"]
print(f"chain failovers: {[(e.get('table'), e.get('new_head')) for e in failovers]}")
assert failovers, "no chain_failover event"
PY
left=""
for p in /proc/[0-9]*; do
  { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qx "RELAXPS_JOB_TAG=$TAG" && left="$left ${p#/proc/}"
done
[ -z "$left" ] || fail "processes of job $TAG left:$left"
echo "PASS: chain job over ssh lost host 127.0.0.3 (partitioned, then killed) and finished; nothing of job $TAG left on any host"
