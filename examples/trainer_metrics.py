"""What relaxps-worker writes (apps/trainer/metrics.h), for Python trainers:
the per-worker metrics CSV, the per-step CSV and the `progress`/`final`
lines, byte for byte in the same format, so scripts/run_local.sh and the
experiment scripts read a Python worker like the C++ one.
"""
import math

CSV_HEADER = ("time_s,worker,clock,samples,loss,train_acc,test_acc,samples_per_s,"
              "bytes_sent,bytes_received,epoch,test_loss,staleness_mean,staleness_max,"
              "gate_wait_s,cache_hits")


class Row:
    """One metrics row; test_acc/test_loss None when not evaluated."""

    def __init__(self, **fields):
        self.time_s = 0.0
        self.worker = self.clock = self.samples = self.epoch = 0
        self.loss = self.train_acc = math.nan
        self.test_acc = self.test_loss = None
        self.samples_per_s = 0.0
        self.bytes_sent = self.bytes_received = self.cache_hits = 0
        self.staleness_mean, self.staleness_max, self.gate_wait_s = 0.0, 0, 0.0
        self.__dict__.update(fields)


class MetricsWriter:
    """Appends and flushes one row at a time (a killed worker keeps its rows)."""

    def __init__(self, path):
        self.file = open(path, "w") if path else None
        self._write(CSV_HEADER)

    def _write(self, line):
        if self.file:
            self.file.write(line + "\n")
            self.file.flush()

    def write(self, r):
        acc = "" if r.test_acc is None else f"{r.test_acc:.4f}"
        tloss = "" if r.test_loss is None else f"{r.test_loss:.6f}"
        self._write(f"{r.time_s:.3f},{r.worker},{r.clock},{r.samples},{r.loss:.6f},"
                    f"{r.train_acc:.4f},{acc},{r.samples_per_s:.1f},{r.bytes_sent},"
                    f"{r.bytes_received},{r.epoch},{tloss},{r.staleness_mean:.3f},"
                    f"{r.staleness_max},{r.gate_wait_s:.4f},{r.cache_hits}")


class StepLog:
    """time_s,clock,staleness,gate_wait_ms,cache_hit,loss,compute_ms; flushed every
    256 rows. compute_s: the step's time computing its gradient (waits on the
    parameter server excluded)."""

    def __init__(self, path):
        self.file = open(path, "w") if path else None
        if self.file:
            self.file.write("time_s,clock,staleness,gate_wait_ms,cache_hit,loss,compute_ms\n")
        self.unflushed = 0

    def write(self, time_s, clock, staleness, gate_wait_s, cache_hit, loss, compute_s):
        if not self.file:
            return
        self.file.write(f"{time_s:.4f},{clock},{staleness},{gate_wait_s * 1e3:.3f},"
                        f"{int(cache_hit)},{loss:.5f},{compute_s * 1e3:.3f}\n")
        self.unflushed += 1
        if self.unflushed >= 256:
            self.file.flush()
            self.unflushed = 0

    def close(self):
        if self.file:
            self.file.close()


def format_progress(kind, r, latest_test_acc):
    """`progress worker=0 time_s=12.0 clock=350 ... bytes_sent=N`."""
    acc = "nan" if latest_test_acc is None or math.isnan(latest_test_acc) \
        else f"{latest_test_acc:.4f}"
    return (f"{kind} worker={r.worker} time_s={r.time_s:.1f} clock={r.clock} epoch={r.epoch} "
            f"samples={r.samples} samples_per_s={r.samples_per_s:.1f} loss={r.loss:.4f} "
            f"train_acc={r.train_acc:.4f} test_acc={acc} staleness_max={r.staleness_max} "
            f"gate_wait_s={r.gate_wait_s:.2f} bytes_sent={r.bytes_sent}")


def _num(x):
    """A float for JSON: null when not finite (docs/events.md)."""
    return None if x is None or not math.isfinite(x) else float(x)


class EventWriter:
    """The `progress` and `final` events of docs/events.md (--events_file),
    one JSON line per write() with O_APPEND, as relaxps-worker writes them;
    relaxps-launch reads a Python worker's progress and result from here."""

    def __init__(self, path, worker):
        import os
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        self._worker = worker

    def _emit(self, kind, fields):
        if self._fd is None:
            return
        import json
        import os
        import time
        ev = {"v": 1, "ts_unix_ms": int(time.time() * 1000),
              "mono_ms": int(time.monotonic() * 1000), "process": f"worker-{self._worker}",
              "kind": kind}
        ev.update(fields)
        try:
            os.write(self._fd, (json.dumps(ev) + "\n").encode())
        except OSError:
            pass

    def progress(self, r, latest_test_acc):
        self._emit("progress", {"worker": r.worker, "time_s": r.time_s, "step": r.clock,
                                "epoch": r.epoch, "samples": r.samples,
                                "samples_per_s": _num(r.samples_per_s) or 0.0,
                                "loss": _num(r.loss), "train_acc": _num(r.train_acc),
                                "test_acc": _num(latest_test_acc),
                                "staleness_max": r.staleness_max, "bytes_sent": r.bytes_sent})

    def final(self, r, steps, wall_samples_per_s, compute_s, stopped, stats):
        self._emit("final", {"worker": r.worker, "time_s": r.time_s, "steps": steps,
                             "epochs": r.epoch, "samples": r.samples,
                             "samples_per_s": _num(r.samples_per_s) or 0.0,
                             "wall_samples_per_s": _num(wall_samples_per_s) or 0.0,
                             "compute_s": compute_s,
                             "test_acc": _num(r.test_acc), "test_loss": _num(r.test_loss),
                             "stopped": bool(stopped),
                             "incarnation": int(stats.get("incarnation", 0)),
                             "acked_updates": int(stats.get("acked_updates", 0)),
                             "local_steps": int(stats.get("local_steps", 0)),
                             "reported_lost": int(stats.get("reported_lost", 0))})
