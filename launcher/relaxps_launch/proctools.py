"""Process tools that work from /proc alone, on this host or (this file's
source sent to `python3 -c`) on a remote one:

  tagged(tag)      pids whose environment holds RELAXPS_JOB_TAG=<tag>
  sweep(tag)       SIGKILLs them (CONT first), returns the pids
  tcp_ports(pid)   the local TCP ports of pid's sockets (listening and connected)
  pdeathsig()      a preexec_fn: the child gets SIGKILL when the launcher dies

Self-contained (standard library only), so that `python3 -c "$(cat
proctools.py)" sweep TAG` runs it anywhere."""
import ctypes
import os
import signal
import sys

TAG_VAR = "RELAXPS_JOB_TAG"
_PR_SET_PDEATHSIG = 1


def pdeathsig():
    """preexec_fn: a new session (Ctrl-C on the terminal reaches only the
    launcher, which stops its children in order) and SIGKILL when the parent
    dies, even by SIGKILL."""
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def tagged(tag):
    """Pids (not this one) whose environment has RELAXPS_JOB_TAG=tag."""
    want = f"{TAG_VAR}={tag}".encode()
    me = os.getpid()
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue  # Gone, a kernel thread, or not ours to read.
        if want in env:
            pids.append(int(d))
    return sorted(pids)


def sweep(tag):
    """SIGKILLs every process carrying the tag; returns their pids."""
    pids = tagged(tag)
    for p in pids:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(p, sig)
            except OSError:
                pass
    return pids


def _socket_inodes(pid):
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        pass
    return inodes


def tcp_ports(pid):
    """Local TCP ports of pid's sockets, sorted."""
    inodes = _socket_inodes(pid)
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if len(cols) > 9 and cols[9] in inodes:
                        ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        except (OSError, StopIteration):
            pass
    return sorted(ports)


def iptables_rules(ports=None, addr=None):
    """The iptables rule specs (after -A/-D CHAIN) that cut off TCP ports, or
    an address (its ssh port 22 excepted, so the launcher keeps its control
    channel to the host)."""
    rules = []
    for p in ports or []:
        rules.append(["INPUT", "-p", "tcp", "--dport", str(p), "-j", "DROP"])
        rules.append(["INPUT", "-p", "tcp", "--sport", str(p), "-j", "DROP"])
    if addr:
        # multiport's negated --ports: neither port is 22. (Two negations,
        # "! --dport 22 ! --sport 22", also drop ssh under iptables-nft 1.8.9,
        # Debian's default, which cut the launcher's own control channel.)
        for chain, flag in (("INPUT", "-d"), ("OUTPUT", "-s")):
            rules.append([chain, flag, addr, "-p", "tcp", "-m", "multiport", "!", "--ports", "22",
                          "-j", "DROP"])
    return rules


def main(argv):
    if len(argv) == 2 and argv[0] == "sweep":
        print(" ".join(map(str, sweep(argv[1]))))
        return 0
    if len(argv) == 2 and argv[0] == "tagged":
        print(" ".join(map(str, tagged(argv[1]))))
        return 0
    if len(argv) == 2 and argv[0] == "ports":
        print(" ".join(map(str, tcp_ports(int(argv[1])))))
        return 0
    print("usage: proctools.py sweep|tagged TAG | ports PID", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
