"""Elastic servers in the fault schedule (docs/elastic.md, docs/launch.md):
`add_server` starts a new `relaxps-server --join` with the job's server
flags, named and supervised like the job's own servers; `drain` runs
`relaxps-ctl drain-server ID` (with the job's operator key under curve) and
takes the server's exit 0 once it holds nothing as its leaving, not a
failure. Each is a row of summary.json's `faults` and rows of events.csv.

Joins are one at a time: the coordinator gives a joining server the next
free id, so an add_server whose time comes while the previous joining server
has not registered yet waits for it (the launcher names a server by the id
it will get). Nothing here blocks the supervisor's loop: relaxps-ctl runs as
a child polled every loop."""
import json
import subprocess
import time

from relaxps_launch import plan

CTL_TIMEOUT_S = 60  # A drain-server call that has not answered by then failed.


class Scaler:
    """Owns the add_servers waiting for a join, the joining servers and the
    relaxps-ctl calls in flight; acts through the supervisor."""

    def __init__(self, sup):
        self.sup = sup
        self.waiting = []    # (fault, row): add_servers due while a join is pending
        self.ctl_calls = []  # (popen, started monotonic, row, proc)

    # ---- applying ------------------------------------------------------------------
    def apply(self, f, row):
        """Applies an add_server or drain whose time came; `row` is its
        summary row (already recorded)."""
        if f.action == "add_server":
            if self._join_pending() or self.waiting:
                row["waited_for_join"] = True
                self.waiting.append((f, row))
                self.sup.say(f"add_server at {f.at_s:g} s waits: a joining server has not "
                             "registered yet")
                return
            self._add(f, row)
        else:
            self._drain(f, row)

    def poll(self):
        """Every loop: joins seen in the coordinator's events, the waiting
        add_servers, finished relaxps-ctl calls."""
        for p in self.sup.role("server"):
            if p.joining and p.joined_unix is None and p.running:
                self._check_join(p)
        if self.waiting and not self._join_pending():
            f, row = self.waiting.pop(0)
            row["time_s"] = round(self.sup.elapsed(), 3)
            row["unix_ms"] = int(time.time() * 1000)
            self._add(f, row)
        for call in list(self.ctl_calls):
            self._check_ctl(call)

    def _join_pending(self):
        return any(p.joining and p.joined_unix is None and p.running
                   for p in self.sup.role("server"))

    def _next_id(self):
        """The id the coordinator will give a joining server: after every
        server that registered (a join that failed took no id)."""
        known = [p.index for p in self.sup.role("server")
                 if not (p.joining and p.joined_unix is None)]
        return max([self.sup.spec.servers.count - 1] + known) + 1

    def _add(self, f, row):
        sup = self.sup
        sid = self._next_id()
        name = plan.process_name("server", sid)
        if name != f.target:
            sup.say(f"add_server at {f.at_s:g} s: the new server will be {name}, not "
                    f"{f.target} (an earlier join failed)")
        # A failed join's process record is reused (its id is still free).
        p = next((q for q in sup.role("server") if q.index == sid), None)
        if p is None:
            p = plan.Proc("server", sid, sup.spec.hosts[f.host], name)
            sup.add_proc(p)
        p.joining = True
        p.joined_unix = None
        p.scale_row = row
        row.update(target=name, processes=[name], server=sid)
        sup.start_server(p, join=True)
        row["pid"] = p.handle.pid
        sup.csv("add_server", sid)
        sup.say(f"added server {sid} (pid {p.handle.pid}, relaxps-server --join on "
                f"{p.host.name}, add_server at {f.at_s:g} s)")

    def _check_join(self, p):
        ev = self.sup.state.server_joins.get(p.handle.pid)
        if ev is None:
            return
        p.joined_unix = ev["ts_unix_ms"] / 1000.0
        row = p.scale_row
        t = p.joined_unix - self.sup.start_unix
        row["joined_s"] = round(t, 3)
        if ev.get("id") != p.index:
            # Someone else joined a server meanwhile (relaxps-ctl by hand):
            # the coordinator's id is the one that counts (restarts, drains).
            self.sup.say(f"{p.name} joined as server {ev.get('id')}; it is server "
                         f"{ev.get('id')} from now on (log {p.name}.log)")
            p.index = ev.get("id")
            row["server"] = p.index
        self.sup.csv("joined", p.index, f"pid={p.handle.pid}", t=t)
        self.sup.say(f"server {p.index} joined ({row['joined_s'] - row['time_s']:.1f} s after "
                     "it started)")

    def join_failed(self, p, rc):
        """A joining server exited before it registered (the coordinator
        refused the join, or it could not start): recorded, not a job failure."""
        row = p.scale_row
        row["error"] = (f"{p.name} exited with code {rc} before it joined; see {p.name}.log")
        self.sup.csv("join_failed", p.index, f"exit={rc}")
        self.sup.say(f"add_server: {row['error']}")

    def _drain(self, f, row):
        sup = self.sup
        sid = int(f.target.split("-")[1])
        procs = [p for p in sup.role("server") if p.index == sid]
        row["server"] = sid
        if not any(p.running for p in procs):
            row["skipped"] = "no running process"
            sup.say(f"drain {f.target}: no running process; skipped")
            return
        for p in procs:
            p.drained = True
            p.scale_row = row
        try:
            popen = sup.spawn_ctl("--json", "drain-server", str(sid))
        except (OSError, subprocess.SubprocessError) as e:
            row["error"] = f"relaxps-ctl drain-server {sid}: {e}"
            sup.say(row["error"])
            return
        self.ctl_calls.append((popen, time.monotonic(), row, procs[0]))
        sup.csv("drain", sid)
        sup.say(f"draining server {sid} (relaxps-ctl drain-server {sid})")

    def _check_ctl(self, call):
        popen, started, row, p = call
        rc = popen.poll()
        if rc is None:
            if time.monotonic() - started < CTL_TIMEOUT_S:
                return
            popen.kill()
            rc = popen.wait()
            err = f"no answer within {CTL_TIMEOUT_S} s"
        else:
            err = None
        out, stderr = popen.communicate()
        self.ctl_calls.remove(call)
        if err is None and rc != 0:
            err = stderr.decode(errors="replace").strip()[-300:] or f"exit code {rc}"
        if err is not None:
            row["error"] = f"relaxps-ctl drain-server {p.index}: {err}"
            p.drained = False  # It serves on: an exit now is a failure again.
            self.sup.say(row["error"])
            return
        try:
            moves = json.loads(out.decode(errors="replace")).get("moves", [])
        except ValueError:
            moves = None
        row["moves"] = None if moves is None else len(moves)
        self.sup.say(f"server {p.index}: {row['moves']} range move(s) off it planned")

    def left(self, p, rc):
        """A drained server exited 0 (it held nothing and deregistered; a
        drain by hand too): gone for good, never restarted."""
        p.left = True
        t = self.sup.elapsed()
        if p.scale_row is not None:
            p.scale_row["drained_s"] = round(t, 3)
        self.sup.csv("drained", p.index, f"exit={rc}")
        self.sup.say(f"server {p.index} was drained and left (exit {rc})")
