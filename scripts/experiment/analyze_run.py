#!/usr/bin/python3
"""Per-cell analysis of one relaxps-launch run folder (matrix.py).

Usage: analyze_run.py RUN_DIR

Reads only what programs are meant to read: summary.json (the launcher's
outcome, the workers' time origin), events.jsonl (docs/events.md),
events.csv (the faults the launcher applied, on the same time axis),
counters.json (relaxps-ctl --json stats: what the servers' state reflects)
and worker-<i>.steps.csv (one row per training step). No log line. Writes
metrics.json and merged.csv (every step rate and evaluation on one axis).

Definitions (also in the report):
  recovery_s  per worker and fault: fault -> the worker's first acknowledged
              push after it (client_failover_acked: a resent request
              acknowledged by a new head or by the server back, at an
              epoch the worker lost a server at; client_rejoined for a
              worker that trained on its own copy),
              else the end of the step gap (>= 1 s) the fault caused, else
              (training went on: e.g. a chain tail lost while the worker
              pushed to the heads) the worker's next step after the fault
  idle_frac   per worker: 1 - compute / wall, measured: compute is the sum
              of steps.csv's compute_ms (the time each step computed its
              gradient, waits on the parameter server excluded) from the
              second step on, wall the time from the first step's end to
              the last one's; none for a steps.csv without compute_ms
  dip         largest drop of test accuracy within 60 s after a fault,
              against the last evaluation before it
  regain_s    fault -> first evaluation at or above that pre-fault value
  eval_blind_s  the evaluator's own gaps (evaluator_gap) within 60 s after
              a fault: time it could not pull the model
  acked_lost  acknowledged push parts absent from the final model: per
              (worker, incarnation), the acknowledged count (its final
              event) minus the parts the servers' states reflect
              (counters.json); not countable after a re-seed (a seeded
              server holds the workers' changes, not counted parts)
  rolled_back  per fault the job's one server came back from a
              checkpoint: the workers' pushes acknowledged before the fault
              (client_request_parked.acked_updates) that the restored state
              does not hold (server_started.restored_parts,
              the count the checkpoint holds; its clock lags it under
              async), less what is still missing from earlier restores
              (rolled back and not replayed): the acknowledged updates the
              restore must lose, which a checkpoint run's acked_lost should
              equal to within a batch per worker and replay's applied_late
              (updates_replayed) make good; none otherwise
  dropped     computed updates never applied: dropped by a client
              (updates_dropped), plus steps a worker applied to its own copy
              that no rejoin or re-seed handed to a server (its final
              local_steps beyond those at its last client_rejoined)
  applied_late  updates applied after their server came back: replayed
              (updates_replayed.count, less what the servers skipped as
              already applied under their exactly-once keys: a server that
              restarts from a checkpoint it wrote after a pause holds them;
              the final servers' duplicates_skipped, so a server killed
              after replays leaves its skips uncounted) and trained on a
              worker's own copy
              (client_rejoined.late_updates: handed back at the re-seed or
              the rejoin)
  late_staleness_hist  how many clocks behind those were when applied,
              power-of-two buckets (0 | 1 | 2-3 | 4-7 | ...): the sum of
              the events' staleness_hist
  max_step_gap_s  the longest time between two consecutive training steps
              of any worker (steps.csv), and when it began (max_step_gap_at_s);
              scale_step_gap_s the same among the gaps that overlap a scale
              event's window (1 s before it to 5 s after)
  scale_events  servers added (add_server, joined) and drained (drain,
              drained) and the range moves published (range_move_done, with
              the map version): events.csv's rows of those kinds
  pushes_after_moves  per server, pushes/s (the servers' own
              relaxps_server_pushes_total, sampled into servers.csv by the
              launcher's sample_servers_s) from the last scale event to the
              last training step, against an even share (their mean):
              max_dev is the largest |rate / even share - 1|; per-server
              pushes/s over the whole run go to server_rates.csv. A push
              request carries one range of a table, so a server holding
              more ranges gets more pushes for the same keys
  bytes_in_after_moves  the same for the payload bytes each server received
              (relaxps_server_bytes_in_total): the keys it serves
"""
import csv
import json
import os
import statistics
import sys

import pack

FAULTS = ("kill", "stop", "partition", "kill_coordinator")
# events.csv rows of elastic servers (launcher/relaxps_launch/scaling.py).
SCALE = ("add_server", "joined", "join_failed", "drain", "drained", "range_move_done",
         "range_move_failed")
BACKS = {"kill": "restart", "stop": "cont", "partition": "heal",
         "kill_coordinator": "restart_coordinator"}
DIP_WINDOW_S = 60.0


class NoData(Exception):
    """The run left nothing to measure (no summary, no evaluation, no step)."""


def _read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def load(run):
    try:
        with open(os.path.join(run, "summary.json")) as f:
            summary = json.load(f)
    except (OSError, ValueError) as e:
        raise NoData(f"summary.json: {e}") from None
    origin = summary.get("workers_started_unix")
    if origin is None:
        raise NoData("the workers never started (summary.json)")
    events = []
    if pack.exists(os.path.join(run, "events.jsonl")):
        with pack.open_text(os.path.join(run, "events.jsonl")) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                e["t"] = e["ts_unix_ms"] / 1000.0 - origin
                events.append(e)
    counters = None
    try:
        with open(os.path.join(run, "counters.json")) as f:
            counters = json.load(f)
    except (OSError, ValueError):
        pass
    return summary, origin, events, counters


def faults_of(rows):
    """[(time, [servers], kind, back)]: faults at the same time are one."""
    out = []
    for i, r in enumerate(rows):
        if r["event"] not in FAULTS:
            continue
        t = float(r["time_s"])
        back = next((float(b["time_s"]) for b in rows[i + 1:]
                     if b["server"] == r["server"] and b["event"] == BACKS[r["event"]]), None)
        if out and out[-1][2] == r["event"] and abs(out[-1][0] - t) < 0.5:
            out[-1][1].append(r["server"])
            continue
        out.append((t, [r["server"]], r["event"], back))
    return out


def scale_events(rows):
    """[{time_s, kind, server, detail, map_version}] of the scale rows."""
    out = []
    for r in rows:
        if r["event"] not in SCALE:
            continue
        fields = dict(kv.split("=", 1) for kv in r["detail"].split() if "=" in kv)
        version = fields.get("map_version")
        out.append({"time_s": float(r["time_s"]), "kind": r["event"],
                    "server": int(r["server"]) if r["server"].lstrip("-").isdigit() else None,
                    "detail": r["detail"],
                    "map_version": int(version) if version and version.isdigit() else None})
    return out


def max_step_gap(steps, windows=None):
    """(longest gap between consecutive steps of any worker, when it began);
    with `windows` [(from, to)], only gaps that overlap one of them."""
    best = (None, None)
    for times in steps.values():
        for a, b in zip(times, times[1:]):
            if windows is not None and not any(a < hi and b > lo for lo, hi in windows):
                continue
            if best[0] is None or b - a > best[0]:
                best = (b - a, a)
    return best


def server_samples(run, column="pushes_total"):
    """{server: [(time_s, counter)]} of a servers.csv column (none: {})."""
    out = {}
    for r in _read_csv(os.path.join(run, "servers.csv")):
        if r.get(column) not in (None, ""):
            out.setdefault(int(r["server"]), []).append((float(r["time_s"]), float(r[column])))
    return out


def server_rates(samples):
    """[(time_s, server, pushes/s)]: each interval's rate at its midpoint."""
    rows = []
    for sid, pts in samples.items():
        for (t0, c0), (t1, c1) in zip(pts, pts[1:]):
            if t1 > t0 and c1 >= c0:
                rows.append(((t0 + t1) / 2, sid, (c1 - c0) / (t1 - t0)))
    return sorted(rows)


def rate_after_moves(samples, scale, end):
    """Per-server rate of a counter from the last scale event to `end` (the
    last step) against their mean; None without samples or window."""
    start = max((e["time_s"] for e in scale), default=None)
    if start is None or not samples:
        return None
    per = {}
    for sid, pts in samples.items():
        inside = [(t, c) for t, c in pts if start <= t <= end]
        # A server sampled until the end: still serving (a drained one is not).
        if len(inside) >= 2 and end - inside[-1][0] < 0.2 * (end - start) + 2:
            per[sid] = (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
    if not per:
        return None
    even = statistics.mean(per.values())
    return {"from_s": start, "to_s": end, "per_server": {str(k): v for k, v in sorted(
        per.items())}, "even_share": even,
            "max_dev": max(abs(v / even - 1) for v in per.values()) if even > 0 else None}


def worker_steps(run, events):
    """({worker: [step times on the run's axis]}, {worker: [compute seconds of
    each step] or None}): steps.csv's time_s counts from the worker's start,
    which its progress/final events place on the axis; compute_ms is None in
    a steps.csv without that column (a trainer that does not measure it)."""
    steps, compute = {}, {}
    for e in events:
        if e["kind"] in ("progress", "final") and e["worker"] not in steps:
            offset = e["t"] - e["time_s"]
            rows = _read_csv(os.path.join(run, f"worker-{e['worker']}.steps.csv"))
            steps[e["worker"]] = [float(r["time_s"]) + offset for r in rows]
            compute[e["worker"]] = ([float(r["compute_ms"]) / 1000.0 for r in rows]
                                    if rows and rows[0].get("compute_ms") not in (None, "")
                                    else None)
    return steps, compute


def idle_frac(times, compute):
    """1 - compute / wall between the first step's end and the last one's."""
    if compute is None or len(times) < 2 or times[-1] <= times[0]:
        return None
    return min(1.0, max(0.0, 1.0 - sum(compute[1:]) / (times[-1] - times[0])))


def add_hists(hists):
    """Power-of-two staleness histograms (lists of counts) summed bucket by bucket."""
    total = []
    for h in hists:
        for i, n in enumerate(h or []):
            total += [0] * (i + 1 - len(total))
            total[i] += n
    return total


def late_staleness(events):
    """The staleness histograms of updates_replayed and client_rejoined, summed."""
    return add_hists(e.get("staleness_hist") for e in events
                     if e["kind"] in ("updates_replayed", "client_rejoined"))


def recovery(worker, t_f, until, events, times):
    # A resend acknowledged at an epoch other than those the worker lost its
    # servers at is another episode's: e.g. under chain a worker with no push
    # in flight at the failover resent nothing then, and its first
    # acknowledged resend came when the old head rejoined as a tail.
    lost = {e["epoch"] for e in events if e["kind"] == "client_server_lost"
            and e.get("worker") == worker and t_f <= e["t"] <= until and "epoch" in e}
    ack = next((e["t"] for e in events if e["kind"] in ("client_failover_acked", "client_rejoined")
                and e.get("worker") == worker and e["t"] >= t_f
                and (not lost or "epoch" not in e or e["epoch"] in lost)), None)
    if ack is not None and ack <= until + 60:
        return ack - t_f
    gap = max(((b - a, b) for a, b in zip(times, times[1:]) if t_f - 0.5 <= a <= until + 1),
              default=None)
    if gap and gap[0] >= 1.0:
        return gap[1] - t_f
    return next((t - t_f for t in times if t >= t_f), None)


def recoveries(t_f, until, events, steps):
    """A fault's recovery_s (the mean over workers) and recovery_by_worker."""
    return _recovery_fields({str(w): recovery(w, t_f, until, events, times)
                             for w, times in steps.items()})


def _recovery_fields(by_worker):
    return {"recovery_s": mean_of(by_worker.values()), "recovery_by_worker": by_worker}


def mean_of(values):
    """The mean of the values that are not None, or None."""
    vals = [v for v in values if v is not None]
    return statistics.mean(vals) if vals else None


def restore_losses(faults, events, steps):
    """Per fault (faults_of), the acknowledged updates its restore rolled
    back, or None: only where the job's one server came back from a
    checkpoint (a restore is counted against the whole job's pushes)."""
    all_servers = {str(e.get("server")) for e in events if e["kind"] == "server_started"}
    out, missing = [], 0
    for i, (t_f, servers, _, _) in enumerate(faults):
        restored = next((e for e in events if e["kind"] == "server_started"
                         and e.get("restored") and e["t"] > t_f
                         and str(e.get("server")) in map(str, servers)), None)
        acked = acked_before(t_f, servers, events, steps)
        if (restored is None or "restored_parts" not in restored or acked is None
                or set(map(str, servers)) != all_servers):
            out.append(None)
            continue
        # Missing so far: every push acknowledged up to the fault that the
        # restored state does not hold; this fault's share is the growth.
        # What the workers replayed into it before the next fault is back in
        # the model (replay), so not missing after it.
        lost = max(0, acked - int(restored["restored_parts"]))
        until_next = faults[i + 1][0] if i + 1 < len(faults) else float("inf")
        replayed = sum(e["count"] for e in events if e["kind"] == "updates_replayed"
                       and t_f < e["t"] <= until_next and str(e.get("server")) in map(str, servers))
        out.append(max(0, lost - missing))
        missing = max(0, lost - replayed)
    return out


def recount_packed(run):
    """A packed cell's counts (computed, dropped, applied late, acked lost:
    counts()), restore losses (per-fault rolled_back and their sum) and
    recovery times recounted from what packing keeps: events.csv, the
    gzipped events.jsonl, counters.json and merged.csv (each worker's step
    times). The rest of its metrics.json stands (the per-step files are
    gone). Returns the metrics."""
    _, _, events, counters = load(run)
    with open(os.path.join(run, "metrics.json")) as f:
        m = json.load(f)
    m.update(counts(events, counters))
    workers = {e["worker"] for e in events if e["kind"] == "final"}
    faults = faults_of(_read_csv(os.path.join(run, "events.csv")))
    rolled = restore_losses(faults, events, {w: None for w in workers})
    if len(rolled) != len(m["faults"]):
        raise NoData(f"{len(rolled)} fault(s) in events.csv, {len(m['faults'])} in metrics.json")
    steps = merged_steps(run)
    for f, r, (t_f, _, _, back) in zip(m["faults"], rolled, faults):
        f["rolled_back"] = r
        if steps:
            f.update(recount_recoveries(f, t_f, back if back is not None else t_f + 60, events,
                                        steps))
    m["rolled_back"] = sum(r for r in rolled if r is not None) if any(
        r is not None for r in rolled) else None
    if steps:
        m["recovery_s"] = mean_of(f["recovery_s"] for f in m["faults"])
    return _save(run, m)


RECOUNT_MOVE_S = 0.5  # See recount_recoveries.


def recount_recoveries(fault, t_f, until, events, steps):
    """recoveries() from a packed cell's step times, which merged.csv keeps
    to the millisecond: that can move "the worker's next step after the
    fault" by one step, so a worker's stored figure (from the full-precision
    steps) stands unless the recount moves it by more than RECOUNT_MOVE_S."""
    new = recoveries(t_f, until, events, steps)
    stored = fault.get("recovery_by_worker") or {}
    return _recovery_fields({w: (stored[w] if stored.get(w) is not None and v is not None
                                 and abs(v - stored[w]) <= RECOUNT_MOVE_S else v)
                             for w, v in new["recovery_by_worker"].items()})


def merged_steps(run):
    """{worker: [step times]} from RUN/merged.csv (write_merged), gzipped or
    not; {} without one."""
    path = os.path.join(run, "merged.csv")
    if not pack.exists(path):
        return {}
    steps = {}
    with pack.open_text(path) as f:
        for r in csv.DictReader(f):
            if r["source"] == "step":
                steps.setdefault(int(r["value"]), []).append(float(r["time_s"]))
    return steps


def acked_before(t_f, servers, events, steps):
    """The workers' pushes acknowledged before the fault at t_f: each one's
    count in its first client_request_parked for a faulted server after it
    (nothing is acknowledged by a dead server); without that event (older
    runs), its steps up to the fault, which may count a pipelined push still
    in flight at the kill); None where neither says (no steps given)."""
    total = 0
    for w, times in steps.items():
        parked = next((e for e in events if e["kind"] == "client_request_parked"
                       and e.get("worker") == w and e["t"] > t_f and "acked_updates" in e
                       and str(e.get("server")) in map(str, servers)), None)
        if parked is None and times is None:
            return None
        total += (int(parked["acked_updates"]) if parked is not None
                  else sum(1 for t in times if t <= t_f))
    return total


def unmerged_local_steps(events, finals):
    """Steps the workers applied to their own copies that never reached a
    server: each one's final local_steps (a running count) beyond the count
    at its last client_rejoined (which hands back every local step so far),
    all of them for a worker that never rejoined."""
    handed = {}
    for e in events:
        if e["kind"] == "client_rejoined":
            handed[e["worker"]] = max(handed.get(e["worker"], 0), int(e.get("local_steps", 0)))
    return sum(max(0, int(e.get("local_steps", 0)) - handed.get(e["worker"], 0)) for e in finals)


def duplicates_skipped(counters):
    """Pushes the final servers skipped as already applied (exactly-once
    keys), all servers together; 0 without counters.json."""
    return sum(int(s.get("stats", {}).get("duplicates_skipped", 0))
               for s in (counters or {}).get("servers", []))


def counts(events, counters):
    finals = [e for e in events if e["kind"] == "final"]
    out = {"computed": sum(e["steps"] for e in finals),
           "dropped": sum(e["count"] for e in events if e["kind"] == "updates_dropped")
           + unmerged_local_steps(events, finals),
           "applied_late": max(0, sum(e["count"] for e in events
                                      if e["kind"] == "updates_replayed")
                               - duplicates_skipped(counters))
           + sum(e.get("late_updates", 0) for e in events if e["kind"] == "client_rejoined"),
           "late_staleness_hist": late_staleness(events),
           "acked": sum(e["acked_updates"] for e in finals), "acked_lost": None,
           "acked_lost_note": None}
    if any(e["kind"] == "reseed_done" for e in events):
        out["acked_lost_note"] = "not countable: re-seeded from the workers' copies"
    elif counters is None or not finals:
        out["acked_lost_note"] = "no counters.json or no final event"
    else:
        applied = {}
        for s in counters.get("servers", []):
            for a in s.get("stats", {}).get("applied_parts", []):
                key = (int(a.get("worker", -1)), str(a.get("incarnation", "0")))
                applied[key] = applied.get(key, 0) + int(a.get("parts", 0))
        out["acked_lost"] = sum(max(0, e["acked_updates"] - applied.get(
            (e["worker"], str(e["incarnation"])), 0)) for e in finals)
    return out


def analyze(run):
    summary, origin, events, counters = load(run)
    evals = [(e["time_s"], e["test_acc"]) for e in events
             if e["kind"] in ("evaluator_progress", "evaluator_final") and e["test_acc"] is not None]
    if not evals:
        raise NoData("no evaluation (evaluator_progress events)")
    steps, compute = worker_steps(run, events)
    if not any(len(t) > 1 for t in steps.values()):
        raise NoData("fewer than two training steps")
    gaps = [e for e in events if e["kind"] == "evaluator_gap"]
    per_fault = []
    csv_rows = _read_csv(os.path.join(run, "events.csv"))
    scale = scale_events(csv_rows)
    samples = server_samples(run)
    last_step = max(t[-1] for t in steps.values() if t)
    gap, gap_at = max_step_gap(steps)
    # Around each server added or drained and move published: what scaling cost.
    scale_gap, scale_gap_at = max_step_gap(steps, [(e["time_s"] - 1, e["time_s"] + 5)
                                                   for e in scale]) if scale else (None, None)
    faults = faults_of(csv_rows)
    rolled = restore_losses(faults, events, steps)
    for (t_f, servers, kind, back), rolled_back in zip(faults, rolled):
        until = back if back is not None else t_f + 60
        rec = recoveries(t_f, until, events, steps)
        pre = [a for t, a in evals if t <= t_f]
        window = [a for t, a in evals if t_f < t <= t_f + DIP_WINDOW_S]
        regain = next((t - t_f for t, a in evals if t > t_f and pre and a >= pre[-1]), None)
        blind = sum(max(0.0, min(g["to_s"], t_f + DIP_WINDOW_S) - max(g["from_s"], t_f))
                    for g in gaps)
        per_fault.append({
            "time_s": t_f, "servers": servers, "kind": kind, "back_s": back, **rec,
            "pre_acc": pre[-1] if pre else None,
            "dip": max(0.0, pre[-1] - min(window)) if pre and window else None,
            "regain_s": regain, "eval_blind_s": blind, "rolled_back": rolled_back,
            "fallback": any(e["kind"] == "fallback" and until + 60 >= e["t"] >= t_f
                            for e in events)})

    def mean(key):
        return mean_of(f[key] for f in per_fault)
    idle = [v for v in (idle_frac(t, compute[w]) for w, t in steps.items()) if v is not None]
    m = {"id": os.path.basename(os.path.normpath(run)), "wall_s": summary.get("wall_s"),
         "final_acc": evals[-1][1],
         "t070": next((t for t, a in evals if a >= 0.70), None),
         "t085": next((t for t, a in evals if a >= 0.85), None),
         "recovery_s": mean("recovery_s"), "dip": max((f["dip"] for f in per_fault
                                                       if f["dip"] is not None), default=None),
         "regain_s": mean("regain_s"), "eval_blind_s": sum(g["to_s"] - g["from_s"] for g in gaps),
         "rolled_back": (sum(f["rolled_back"] for f in per_fault if f["rolled_back"] is not None)
                         if any(f["rolled_back"] is not None for f in per_fault) else None),
         "idle_frac": statistics.mean(idle) if idle else None,
         "samples_per_s": summary.get("samples_per_s"), "workers": len(steps),
         "fallback": any(e["kind"] == "fallback" for e in events),
         "evaluations": len(evals), "faults": per_fault,
         "max_step_gap_s": gap, "max_step_gap_at_s": gap_at, "scale_events": scale,
         "scale_step_gap_s": scale_gap, "scale_step_gap_at_s": scale_gap_at,
         "pushes_after_moves": rate_after_moves(samples, scale, last_step),
         "bytes_in_after_moves": rate_after_moves(server_samples(run, "bytes_in_total"), scale,
                                                  last_step)}
    m.update(counts(events, counters))
    write_merged(run, steps, evals)
    write_server_rates(run, samples)
    return m


def write_server_rates(run, samples):
    if not samples:
        return
    with open(os.path.join(run, "server_rates.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time_s", "server", "pushes_per_s"])
        w.writerows([f"{t:.3f}", s, f"{r:.2f}"] for t, s, r in server_rates(samples))


def write_merged(run, steps, evals):
    rows = sorted([(t, "step", w) for w, ts in steps.items() for t in ts] +
                  [(t, "evaluation", a) for t, a in evals])
    with open(os.path.join(run, "merged.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time_s", "source", "value"])
        w.writerows([f"{t:.3f}", s, v] for t, s, v in rows)


def _save(run, m):
    """m into RUN/metrics.json, atomically; returns m."""
    with open(os.path.join(run, "metrics.json.tmp"), "w") as f:
        json.dump(m, f, indent=1)
    os.replace(os.path.join(run, "metrics.json.tmp"), os.path.join(run, "metrics.json"))
    return m


def write(run):
    """analyze() into RUN/metrics.json (atomically); returns the metrics."""
    m = analyze(run)
    return _save(run, m)


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def headline(m):
    line = (f"final_acc={fmt(m['final_acc'], '.4f')} t070={fmt(m['t070'])} "
            f"recovery={fmt(m['recovery_s'])}s dip={fmt(m['dip'], '.3f')} "
            f"regain={fmt(m['regain_s'])}s acked_lost={fmt(m['acked_lost'], 'd')} "
            f"dropped={m['dropped']} late={m['applied_late']} idle={fmt(m['idle_frac'], '.2f')} "
            f"samples/s={fmt(m['samples_per_s'])} max_step_gap={fmt(m['max_step_gap_s'], '.2f')}s")
    p = m.get("pushes_after_moves")
    if p:
        line += (" pushes/s after moves: " + " ".join(
            f"server{k}={v:.1f}" for k, v in p["per_server"].items()) +
                 f" even={p['even_share']:.1f} max_dev={fmt(p['max_dev'], '.3f')}")
    b = m.get("bytes_in_after_moves")
    if b:
        line += f" bytes_in max_dev={fmt(b['max_dev'], '.3f')}"
    return line


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    try:
        print(headline(write(sys.argv[1])))
    except NoData as e:
        raise SystemExit(f"analyze_run.py: {sys.argv[1]}: {e}")


if __name__ == "__main__":
    main()
