"""Reading the processes' structured events (docs/events.md): each process
writes its own JSON Lines file (or stream, remote), the launcher reads the new
complete lines, appends them to <out_dir>/events.jsonl and keeps the state it
needs (endpoints, progress, finals, checkpoints written, job_end). Log lines
are never read."""
import json
import os


class LineReader:
    """Complete lines appended to a file since the last read (a file that
    does not exist yet reads as empty). A restarted process appends to its
    predecessor's file: its reader starts at the end of what is there."""

    def __init__(self, path):
        self.path = path
        self._offset = 0
        if path is not None:
            try:
                self._offset = os.path.getsize(path)
            except OSError:
                pass
        self._partial = b""

    def read(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        self._offset += len(data)
        return self._split(data)

    def _split(self, data):
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return [line.decode("utf-8", "replace") for line in lines if line.strip()]


class StreamReader(LineReader):
    """Complete lines from a non-blocking pipe (a remote process's events)."""

    def __init__(self, fd):
        super().__init__(None)
        self.fd = fd
        self.closed = False
        os.set_blocking(fd, False)

    def read(self):
        chunks = []
        while not self.closed:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self.closed = True
                break
            chunks.append(data)
        return self._split(b"".join(chunks))


class JobState:
    """What the events said so far, per launcher process name."""

    def __init__(self, merged_path):
        self._merged = open(merged_path, "a", encoding="utf-8")
        self.coordinator_endpoint = {}   # coordinator-i -> endpoint
        self.progress = {}               # worker id -> last progress event
        self.finals = {}                 # worker id -> final event
        self.evaluator_progress = None
        self.evaluator_final = None
        self.checkpoints_written = set()  # server ids that wrote a checkpoint part
        self.job_end = None
        self.job_failed = None
        self.leaders = []                # (name, event) of each leader_elected
        self.derived = []                # (event, process name) for events.csv
        self.server_joins = {}           # pid -> member_joined event of a server
        self.servers_left = set()        # server ids that said goodbye (member_left)
        self.range_moves = []            # range_move_done / range_move_failed events
        self.bad_lines = 0

    def feed(self, name, lines):
        """Takes lines of process `name`'s events; returns the parsed events."""
        out = []
        for line in lines:
            try:
                ev = json.loads(line)
                kind = ev["kind"]
            except (ValueError, KeyError, TypeError):
                self.bad_lines += 1
                continue
            self._merged.write(line + "\n")
            out.append(ev)
            self._take(name, kind, ev)
        if out:
            self._merged.flush()
        return out

    def _take(self, name, kind, ev):
        if kind == "coordinator_started":
            self.coordinator_endpoint[name] = ev.get("endpoint")
        elif kind == "progress":
            self.progress[ev.get("worker")] = ev
        elif kind == "final":
            self.finals[ev.get("worker")] = ev
        elif kind == "evaluator_progress":
            self.evaluator_progress = ev
        elif kind == "evaluator_final":
            self.evaluator_final = ev
        elif kind == "checkpoint_written":
            self.checkpoints_written.add(ev.get("server"))
        elif kind == "job_end":
            self.job_end = ev
        elif kind == "job_failed":
            self.job_failed = ev
        elif kind == "leader_elected":
            self.leaders.append((name, ev))
        elif kind == "member_joined" and ev.get("role") == "server":
            self.server_joins[ev.get("pid")] = ev
        elif kind == "member_left" and ev.get("role") == "server":
            self.servers_left.add(ev.get("id"))
        elif kind in ("range_move_done", "range_move_failed"):
            self.range_moves.append(ev)
        if kind in ("reseed_done", "fallback", "spare_takeover", "client_failover_acked",
                    "leader_elected", "chain_failover", "range_move_done", "range_move_failed"):
            self.derived.append((ev, name))

    def accuracy(self):
        """(final test accuracy, where from): the evaluator's final
        evaluation, else worker 0's final, else any worker's."""
        if self.evaluator_final and self.evaluator_final.get("test_acc") is not None:
            return self.evaluator_final["test_acc"], "evaluator"
        for w in sorted(self.finals, key=lambda x: (x != 0, x)):
            if self.finals[w].get("test_acc") is not None:
                return self.finals[w]["test_acc"], f"worker-{w}"
        return None, None

    def samples_per_s(self):
        rates = [f.get("samples_per_s") for f in self.finals.values()
                 if f.get("samples_per_s") is not None]
        return round(sum(rates), 1) if rates else None

    def close(self):
        self._merged.close()
