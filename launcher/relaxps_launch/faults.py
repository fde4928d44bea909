"""The fault schedule, applied by the supervisor's loop: kill (SIGKILL), stop
(SIGSTOP, SIGCONT for_s later) and partition (iptables DROP on a process's
TCP ports or a host's address, removed for_s later) of processes or whole
hosts, and the elastic add_server / drain (scaling.py), each recorded for
summary.json and events.csv."""
import signal
import subprocess
import time

from relaxps_launch import proctools
from relaxps_launch.spec import SCALE_ACTIONS


class FaultInjector:
    """Owns the pending faults, the applied ones and the pending heals; acts
    on the supervisor's processes through its backend."""

    def __init__(self, sup, faults):
        self.sup = sup
        self.faults = sorted(faults, key=lambda f: f.at_s)  # Not yet applied.
        self.applied = []           # summary rows of applied faults
        self.pending_heals = []     # (due monotonic, action, fault, undo)

    def heal_all(self):
        """Removes the partitions still in place (at the job's end)."""
        for item in list(self.pending_heals):
            if item[1] == "heal":
                item[3]()
        self.pending_heals.clear()

    def _targets(self, target):
        if target.startswith("host:"):
            return [p for p in self.sup.procs if p.host.name == target[5:] and p.running]
        return [p for p in self.sup.procs if target in p.target_names() and p.running]

    def apply_due(self):
        """Applies the faults whose time came and the heals that are due."""
        now = self.sup.elapsed()
        while self.faults and self.faults[0].at_s <= now:
            at = self.faults[0].at_s
            group = [f for f in self.faults if f.at_s == at]  # Back to back, in one step.
            self.faults = [f for f in self.faults if f.at_s != at]
            kills = [f for f in group if f.action == "kill"]
            for f in group:
                self._apply(f, kills)
        for item in list(self.pending_heals):
            if time.monotonic() >= item[0]:
                self.pending_heals.remove(item)
                item[3]()

    def _apply(self, f, same_time_kills):
        procs = self._targets(f.target)
        row = dict(f.describe(), time_s=round(self.sup.elapsed(), 3),
                   unix_ms=int(time.time() * 1000), processes=[p.name for p in procs])
        self.applied.append(row)
        if f.action in SCALE_ACTIONS:
            self.sup.scaler.apply(f, row)
            return
        if not procs and f.action != "partition":
            row["skipped"] = "no running process"
            self.sup.say(f"fault {f.action} {f.target}: no running process; skipped")
            return
        if f.action == "kill":
            if f.target.startswith("host:"):
                self.sup.lost_hosts.add(f.target[5:])
            for p in procs:
                p.fault_killed = True
                self.sup.backend.signal(p.handle, signal.SIGKILL)
                self.sup.say(f"killed {p.role} {p.index} (pid {p.handle.pid}, {f.target} at "
                         f"{f.at_s:g} s)")
                if p.role == "server":
                    self.sup.csv("kill", p.index)
                    # A lone server's kill is one failover (several at once are not).
                    if len(same_time_kills) == 1 and sum(q.role == "server" for q in procs) == 1:
                        self.sup.kill_times[p.index] = row["unix_ms"]
                elif p.role == "coordinator":
                    self.sup.csv("kill_coordinator", p.index)
                    # A takeover is timed only from the kill of the leader.
                    leaders = [name for name, _ in self.sup.state.leaders]
                    if leaders and leaders[-1] == p.name:
                        self.sup.coordinator_kill_ms = row["unix_ms"]
        elif f.action == "stop":
            for p in procs:
                p.stopped = True
                self.sup.backend.signal(p.handle, signal.SIGSTOP)
                self.sup.say(f"stopping {p.role} {p.index} for {f.for_s:g} s (SIGSTOP)")
                if p.role == "server":
                    self.sup.csv("stop", p.index)

            def cont(procs=procs, row=row):
                for p in procs:
                    if p.running and p.stopped:
                        p.stopped = False
                        self.sup.backend.signal(p.handle, signal.SIGCONT)
                        self.sup.say(f"continuing {p.role} {p.index} (SIGCONT)")
                        if p.role == "server":
                            self.sup.csv("cont", p.index)
                row["ended_s"] = round(self.sup.elapsed(), 3)
            self.pending_heals.append((time.monotonic() + f.for_s, "cont", f, cont))
        else:
            self._partition(f, procs, row)

    def _partition(self, f, procs, row):
        if f.target.startswith("host:"):
            host = self.sup.spec.hosts[f.target[5:]]
            rules = proctools.iptables_rules(addr=host.addr)
            where = host
        else:
            p = procs[0]
            where = p.host
            rules = proctools.iptables_rules(ports=self.sup.backend.tcp_ports(p.host, p.handle))
            row["ports"] = sorted({int(r[4]) for r in rules})
        errors = self._iptables(where, "-A", rules)
        if errors:
            row["error"] = errors
            self.sup.say(f"partition of {f.target} failed: {errors}")
            return
        self.sup.say(f"partitioning {f.target} for {f.for_s:g} s")
        for p in procs:
            if p.role == "server":
                self.sup.csv("partition", p.index)

        def heal(rules=rules, where=where, row=row, procs=procs):
            self._iptables(where, "-D", rules)
            row["ended_s"] = round(self.sup.elapsed(), 3)
            self.sup.say(f"healing the partition of {f.target}")
            for p in procs:
                if p.role == "server":
                    self.sup.csv("heal", p.index)
        self.pending_heals.append((time.monotonic() + f.for_s, "heal", f, heal))

    def _iptables(self, host, op, rules):
        errors = []
        for r in rules:
            try:
                res = self.sup.backend.run(host, ["iptables", op] + r)
            except (OSError, subprocess.SubprocessError) as e:
                errors.append(str(e))
                continue
            if res.returncode != 0:
                errors.append(res.stderr.decode(errors="replace").strip())
        return "; ".join(sorted(set(errors)))[:300]
