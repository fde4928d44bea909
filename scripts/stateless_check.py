#!/usr/bin/python3
"""Checks a run_local.sh --recovery=stateless run against the stateless
issue's acceptance 2 and prints the figures.

Usage: scripts/stateless_check.py RUN_DIR [--eval_worker=0] [--steps_worker=1]

Evaluations come from evaluator.csv when the run has one (--evaluator_every_s),
else from worker --eval_worker's metrics CSV.

On one time axis (seconds since run_local.sh started the workers, like
events.csv): per outage (kill -> reseed), the longest gap between two
consecutive steps of the non-evaluating worker; the test accuracy of the last
evaluation before each kill and of the first evaluation at least 5 s after
the re-seed; the final test accuracy. Exits 1 if a check fails (gap > 1 s,
accuracy after < before - 0.01, final < 0.88).
"""
import csv
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "experiment"))
import analyze_run  # noqa: E402  (scripts/experiment/analyze_run.py)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def worker_offset(run, w, run_start):
    """Seconds from run_local.sh's start of the workers to worker w's time 0: from
    its events (events.jsonl), or its log's final line in runs made before them."""
    events = analyze_run.load_events(run)
    if events is not None:
        return analyze_run.event_offset(events.get(f"worker-{w}", []), run_start)
    with open(os.path.join(run, f"worker-{w}.log"), errors="replace") as f:
        for line in f:
            m = re.search(r"^final .* start_unix=([0-9.]+)", line)
            if m:
                return float(m.group(1)) - run_start
    return 0.0


def main():
    run = sys.argv[1]
    opts = dict(a[2:].split("=", 1) for a in sys.argv[2:])
    ev_w, st_w = int(opts.get("eval_worker", 0)), int(opts.get("steps_worker", 1))
    run_start = float(open(os.path.join(run, "start_unix")).read().split()[0])
    events = read_csv(os.path.join(run, "events.csv"))
    kills = [float(e["time_s"]) for e in events if e["event"] == "kill"]
    reseeds = [(float(e["time_s"]), e.get("detail", "")) for e in events if e["event"] == "reseed"]
    off_s = worker_offset(run, st_w, run_start)
    steps = [float(r["time_s"]) + off_s for r in read_csv(os.path.join(run, f"worker-{st_w}.steps.csv"))]
    # The evaluator (--evaluator_every_s) if the run had one, else worker ev_w.
    ev_csv = os.path.join(run, "evaluator.csv")
    if os.path.exists(ev_csv):
        off_e, rows = 0.0, read_csv(ev_csv)
    else:
        off_e = worker_offset(run, ev_w, run_start)
        rows = read_csv(os.path.join(run, f"worker-{ev_w}.csv"))
    evals = [(float(r["time_s"]) + off_e, float(r["test_acc"]))
             for r in rows if r["test_acc"] not in ("", "nan")]
    ok = True
    for i, k in enumerate(kills):
        back = next((t for t, _ in reseeds if t > k), None)
        if back is None:
            print(f"outage {i + 1}: kill at {k:.1f} s, no re-seed logged")
            ok = False
            continue
        detail = next(d for t, d in reseeds if t == back)
        inside = [t for t in steps if k - 1 <= t <= back + 1]
        gap = max((b - a for a, b in zip(inside, inside[1:])), default=float("inf"))
        n = sum(1 for t in steps if k <= t <= back)
        before = [a for t, a in evals if t < k]
        after = [(t, a) for t, a in evals if t >= back + 5]
        acc_b = before[-1] if before else float("nan")
        t_a, acc_a = after[0] if after else (float("nan"), float("nan"))
        print(f"outage {i + 1}: kill {k:.1f} s, re-seeded {back:.1f} s ({detail})")
        print(f"  worker {st_w}: {n} steps during the outage, longest gap {gap:.3f} s")
        first = [(t, a) for t, a in evals if t >= back]
        t_f, acc_f = first[0] if first else (float("nan"), float("nan"))
        print(f"  test accuracy before the kill {acc_b:.4f}; first after the re-seed "
              f"(at {t_f:.1f} s) {acc_f:.4f}; at {t_a:.1f} s (>= re-seed + 5 s) {acc_a:.4f}")
        ok &= gap <= 1.0 and acc_a >= acc_b - 0.01
    final = evals[-1][1] if evals else float("nan")
    print(f"final test accuracy {final:.4f}")
    ok &= final >= 0.88
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
