#!/usr/bin/python3
"""Per-run analysis of one run_local.sh output directory (experiment.sh).

Usage: analyze_run.py RUN_DIR

Reads start_unix, events.csv, events.jsonl (the processes' structured events,
docs/events.md: each worker's final result and time origin, the servers'
checkpoints and restores), evaluator.csv, worker-<i>.{csv,steps.csv} and
exit.txt; no log line. (Runs made before events.jsonl existed are read from
worker-<i>.log and server-<i>.log as they were then.) Writes merged.csv (every worker metrics row and
evaluation on one time axis: seconds since run_local.sh started the workers),
metrics.json and headline.txt. Exits 1 without metrics.json when the run
failed (run_local.sh exit status, or no evaluation / steps to measure).

Measures (definitions also in report.md):
  final_acc       the evaluator's last evaluation (of the final model)
  t070, t085      first evaluation >= 0.70 / 0.85
  stall_s         longest gap between two consecutive training steps of any worker
  recovery_s      per fault: fault -> end of the step gap it caused (the first
                  acknowledged push after); fault -> next step if there was none
  regain_s        per fault: recovery -> first evaluation >= the last pre-fault
                  accuracy - 0.005
  lost_updates    counted (method "counted"): per worker, the push parts servers
                  acknowledged (its final line) minus those of its incarnation
                  the servers' states reflect at the end (counters.json); runs
                  without those files, or with a re-seed (stateless, hybrid's
                  fallback: seeded state holds the workers' changes, not
                  counted parts), fall back to estimates per fault: pushes
                  acknowledged after the restored checkpoint was written and
                  before the fault ("checkpoint"), or the staleness jump right
                  after recovery ("staleness")
  idle_frac       per worker and outage (fault -> server back): 1 - steps in it x
                  median step time / its length
  grads_computed  training steps of all workers; grads_applied: minus lost
"""
import csv
import datetime
import gzip
import json
import os
import re
import statistics
import sys

FAULTS = ("kill", "stop", "partition", "kill_coordinator")
BACKS = ("restart", "cont", "heal", "restart_coordinator")
GLOG_TIME = re.compile(r"^[IWEF](\d{8} \d\d:\d\d:\d\d\.\d+)")


def open_text(path):
    """Opens path, or path.gz when only that exists (committed results keep the
    big per-step CSVs compressed); None when neither does."""
    if os.path.exists(path):
        return open(path, newline="", errors="replace")
    if os.path.exists(path + ".gz"):
        return gzip.open(path + ".gz", "rt", newline="", errors="replace")
    return None


def read_csv(path):
    f = open_text(path)
    if f is None:
        return []
    with f:
        return list(csv.DictReader(f))


def glog_unix(line):
    m = GLOG_TIME.match(line)
    if not m:
        return None
    return datetime.datetime.strptime(m.group(1), "%Y%m%d %H:%M:%S.%f").timestamp()


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def load_events(run):
    """The run's events (events.jsonl) by process name, in file order; None for a
    run made before events existed."""
    path = os.path.join(run, "events.jsonl")
    if not os.path.exists(path):
        return None
    by = {}
    with open(path, errors="replace") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            by.setdefault(e.get("process"), []).append(e)
    return by


def event_offset(events, start_unix):
    """When a worker's time_s was 0, in seconds after start_unix, from the
    wall-clock time of its first progress or final event."""
    for e in events:
        if e["kind"] in ("progress", "final"):
            return e["ts_unix_ms"] / 1000.0 - e["time_s"] - start_unix
    return 0.0


def worker_offset(log, start_unix):
    """Runs without events.jsonl: when the worker's time_s was 0, in seconds after
    start_unix: the final line's start_unix=, else the glog line just before
    training started, else 0."""
    glog = None
    with open(log, errors="replace") as f:
        for line in f:
            m = re.search(r"^final .* start_unix=([0-9.]+)", line) or \
                re.match(r"start worker=\d+ unix_s=([0-9.]+)", line)
            if m:
                return float(m.group(1)) - start_unix
            if glog is None and re.search(r"\] training \S+ \(\d+ parameters\)", line):
                glog = glog_unix(line)
    return 0.0 if glog is None else glog - start_unix


def worker_ids(run, suffix):
    """The ids i of the run's worker-<i><suffix> files, sorted."""
    ids = []
    for name in os.listdir(run):
        m = re.fullmatch(r"worker-(\d+)" + re.escape(suffix), name)
        if m:
            ids.append(int(m.group(1)))
    return sorted(ids)


def load_workers(run, start_unix):
    """worker id -> {'offset', 'steps': [(t, clock, staleness)], 'rows', 'sps'}"""
    events = load_events(run)
    if events is None:
        return load_workers_from_logs(run, start_unix)
    workers = {}
    for i in worker_ids(run, ".csv"):
        mine = events.get(f"worker-{i}", [])
        final = next((e for e in reversed(mine) if e["kind"] == "final"), None)
        workers[i] = worker_entry(run, i, event_offset(mine, start_unix),
                                  None if final is None else final["samples_per_s"],
                                  None if final is None else
                                  (str(final["incarnation"]), final["acked_updates"]))
    return workers


def worker_entry(run, i, offset, sps, acked):
    steps = [(float(r["time_s"]) + offset, int(r["clock"]), int(r["staleness"]))
             for r in read_csv(os.path.join(run, f"worker-{i}.steps.csv"))]
    rows = read_csv(os.path.join(run, f"worker-{i}.csv"))
    return {"offset": offset, "steps": steps, "rows": rows, "sps": sps, "acked": acked}


def load_workers_from_logs(run, start_unix):
    """load_workers for runs made before events.jsonl existed."""
    workers = {}
    for i in worker_ids(run, ".log"):
        name = f"worker-{i}.log"
        offset = worker_offset(os.path.join(run, name), start_unix)
        sps, acked = None, None
        with open(os.path.join(run, name), errors="replace") as f:
            for line in f:
                fin = re.match(r"final .* samples_per_s=([0-9.]+)", line)
                if fin:
                    sps = float(fin.group(1))
                    ack = re.search(r" incarnation=(\d+) acked_updates=(\d+)", line)
                    if ack:
                        acked = (ack.group(1), int(ack.group(2)))
        workers[i] = worker_entry(run, i, offset, sps, acked)
    return workers


def counted_lost(run, workers, events):
    """Acknowledged updates absent from the final model, counted: each worker's
    acknowledged push parts (its final line: incarnation, acked_updates) minus
    the parts of that incarnation the servers' states reflect at the end
    (counters.json: relaxps-ctl --json stats, taken by run_local.sh before the
    servers stop). None without both, and None after a re-seed: a server
    seeded from the workers' copies holds their changes, not counted parts,
    so the difference would not count what its name says."""
    path = os.path.join(run, "counters.json")
    if not os.path.exists(path) or not workers:
        return None
    if any(e["event"] == "reseed" for e in events):
        return None
    try:
        with open(path) as f:
            counters = json.load(f)
    except ValueError:
        return None
    applied = {}
    for s in counters.get("servers", []):
        for a in s.get("stats", {}).get("applied_parts", []):
            key = str(a.get("incarnation", "0"))
            applied[key] = applied.get(key, 0) + int(a.get("parts", 0))
    lost = 0
    for w in workers.values():
        if w.get("acked") is None:
            return None
        incarnation, acked = w["acked"]
        lost += max(0, acked - applied.get(incarnation, 0))
    return lost


def faults_of(events):
    """[(time, server, kind, back_time or None)] pairing each fault with its server's next back event."""
    out = []
    for i, e in enumerate(events):
        if e["event"] not in FAULTS:
            continue
        t, server = float(e["time_s"]), e["server"]
        back = next((float(b["time_s"]) for b in events[i + 1:]
                     if b["server"] == server and b["event"] in BACKS), None)
        out.append((t, server, e["event"], back))
    return out


def step_gap_after(times, t_fault, t_until):
    """(gap_start, gap_end) of the longest step gap starting in [t_fault - 0.5, t_until]."""
    best = None
    for a, b in zip(times, times[1:]):
        if t_fault - 0.5 <= a <= t_until and (best is None or b - a > best[1] - best[0]):
            best = (a, b)
    return best


def restore_info(run, server, t_fault, start_unix):
    """(clock, time the restored checkpoint was written) of the first restore after
    t_fault: the server's checkpoint_written and server_started events."""
    events = load_events(run)
    if events is None:
        return restore_info_from_log(run, server, t_fault, start_unix)
    written = {}  # checkpoint seq -> time written
    for e in events.get(f"server-{server}", []):
        t = e["ts_unix_ms"] / 1000.0 - start_unix
        if e["kind"] == "checkpoint_written":
            written[e["seq"]] = t
        elif e["kind"] == "server_started" and e.get("restored") and t > t_fault:
            return e["restored_clock"], written.get(e["restored_seq"])
    return None


def restore_info_from_log(run, server, t_fault, start_unix):
    """restore_info for runs made before events.jsonl existed."""
    path = os.path.join(run, f"server-{server}.log")
    if not os.path.exists(path):
        return None
    written = {}  # checkpoint dir -> time written
    with open(path, errors="replace") as f:
        for line in f:
            t = glog_unix(line)
            w = re.search(r"\] checkpoint (\S+) \(clock (\d+)", line)
            if w and t is not None:
                written[w.group(1)] = t - start_unix
            r = re.search(r"restored \S+ from checkpoint (\S+) \(clock (\d+)\)", line)
            if r and t is not None and t - start_unix > t_fault:
                return int(r.group(2)), written.get(r.group(1))
    return None


def analyze(run):
    rc_wall = open(os.path.join(run, "exit.txt")).read().split()
    rc, wall = int(rc_wall[0]), float(rc_wall[1])
    if rc != 0:
        raise SystemExit(f"run_local.sh exited with {rc}")
    start_unix = float(open(os.path.join(run, "start_unix")).read())
    events = read_csv(os.path.join(run, "events.csv"))
    evals = [(float(r["time_s"]), float(r["test_acc"]), float(r["test_loss"]))
             for r in read_csv(os.path.join(run, "evaluator.csv"))]
    workers = load_workers(run, start_unix)
    if not evals:
        raise SystemExit("no evaluation in evaluator.csv")
    all_steps = sorted(s for w in workers.values() for s in w["steps"])
    if len(all_steps) < 2:
        raise SystemExit("fewer than two training steps")
    times = [s[0] for s in all_steps]

    def first_eval_at_least(th, after=-1e9):
        return next((t for t, a, _ in evals if a >= th and t >= after), None)

    gaps = [(b - a, a) for a, b in zip(times, times[1:])]
    stall, stall_at = max(gaps)
    intervals = sorted(g for g, _ in gaps if g < 1.0) or [0.0]
    step_s = statistics.median(intervals) * len(workers)  # per worker

    per_fault = []
    prev_back = -1e9
    for t_f, server, kind, back in faults_of(events):
        until = back if back is not None else t_f + 60
        gap = step_gap_after(times, t_f, until + 1)
        if gap is not None and gap[1] - gap[0] >= 1.0:
            rec_end = gap[1]
        else:
            rec_end = next((t for t in times if t > t_f), None)
        pre = [a for t, a, _ in evals if t <= t_f]
        regain = None
        if pre and rec_end is not None:
            t_re = first_eval_at_least(pre[-1] - 0.005, rec_end)
            regain = None if t_re is None else t_re - rec_end
        lost, method = None, None
        info = restore_info(run, server, t_f, start_unix) if kind == "kill" else None
        if info is not None and info[1] is not None:
            t_ck = info[1]
            lost = sum(1 for t, _, _ in all_steps if max(t_ck, prev_back) < t <= t_f)
            method = "checkpoint"
        elif rec_end is not None:
            before = [s for t, _, s in all_steps if t_f - 10 <= t <= t_f] or [0]
            after = [s for t, _, s in all_steps if rec_end <= t <= rec_end + 2] or [0]
            lost = max(0, max(after) - int(statistics.median(before))) * len(workers)
            method = "staleness"
        idle = []
        if back is not None and back > t_f:
            for w in workers.values():
                n = sum(1 for t, _, _ in w["steps"] if t_f < t <= back)
                idle.append(max(0.0, 1.0 - n * step_s / (back - t_f)))
        per_fault.append({
            "time_s": t_f, "server": server, "kind": kind, "back_s": back,
            "recovery_s": None if rec_end is None else rec_end - t_f,
            "pre_acc": pre[-1] if pre else None, "regain_s": regain,
            "lost_updates": lost, "lost_method": method,
            "idle_frac": statistics.mean(idle) if idle else None,
        })
        prev_back = back if back is not None else t_f

    def total(key):
        vals = [f[key] for f in per_fault if f[key] is not None]
        return sum(vals) if vals else (0 if not per_fault else None)

    def mean(key):
        vals = [f[key] for f in per_fault if f[key] is not None]
        return statistics.mean(vals) if vals else None

    lost = total("lost_updates")
    counted = counted_lost(run, workers, events)
    if counted is not None:
        lost = counted
    computed = len(all_steps)
    sps = [w["sps"] for w in workers.values() if w["sps"] is not None]
    return {
        "id": os.path.basename(os.path.normpath(run)), "wall_s": wall,
        "final_acc": evals[-1][1], "t070": first_eval_at_least(0.70),
        "t085": first_eval_at_least(0.85), "stall_s": stall, "stall_at_s": stall_at,
        "recovery_s": mean("recovery_s"), "regain_s": mean("regain_s"),
        "lost_updates": lost,
        "lost_method": "counted" if counted is not None else
                       ",".join(sorted({f["lost_method"] for f in per_fault if f["lost_method"]})),
        "idle_frac": mean("idle_frac"), "grads_computed": computed,
        "grads_applied": None if lost is None else computed - lost,
        "samples_per_s": sum(sps) if sps else None, "workers": len(workers),
        "evaluations": len(evals), "faults": per_fault,
    }


def write_merged(run, m):
    start_unix = float(open(os.path.join(run, "start_unix")).read())
    rows = []
    for i, w in load_workers(run, start_unix).items():
        for r in w["rows"]:
            rows.append((float(r["time_s"]) + w["offset"], "worker", i, r["clock"], r["samples"],
                         r["test_acc"], r["test_loss"], r["loss"], r.get("staleness_mean", "")))
    for r in read_csv(os.path.join(run, "evaluator.csv")):
        rows.append((float(r["time_s"]), "evaluator", "", r["params_clock"], "", r["test_acc"],
                     r["test_loss"], "", ""))
    rows.sort(key=lambda r: r[0])
    with open(os.path.join(run, "merged.csv"), "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["time_s", "source", "worker", "clock", "samples", "test_acc", "test_loss",
                      "loss", "staleness"])
        for r in rows:
            out.writerow([f"{r[0]:.3f}"] + list(r[1:]))


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    run = sys.argv[1]
    m = analyze(run)
    write_merged(run, m)
    with open(os.path.join(run, "metrics.json.tmp"), "w") as f:
        json.dump(m, f, indent=1)
    os.replace(os.path.join(run, "metrics.json.tmp"), os.path.join(run, "metrics.json"))
    with open(os.path.join(run, "headline.txt"), "w") as f:
        f.write(f"final_acc={fmt(m['final_acc'], '.4f')} t070={fmt(m['t070'])} "
                f"t085={fmt(m['t085'])} stall={fmt(m['stall_s'])}s "
                f"recovery={fmt(m['recovery_s'])}s lost={fmt(m['lost_updates'], 'd')} "
                f"idle={fmt(m['idle_frac'], '.2f')} grads={m['grads_computed']} "
                f"samples/s={fmt(m['samples_per_s'])}\n")


if __name__ == "__main__":
    main()
