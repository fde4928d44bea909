#!/usr/bin/python3
"""Runs an experiment matrix (cells.py) with relaxps-launch, resumably.

  matrix.py SET --out=DIR --bin=DIR [--policies=V1,V2] [--faults=F1,F2]
            [--workers=1,4] [--seeds=1,2,3] [--quick] [--duration_s=S]
            [--fault_at=T1,T2] [--down_s=S] [--eval_every_s=S] [--model=M]
            [--consistency=C] [--no_logs] [--keep_data] [--reanalyze]
            [--cooldown_s=120] [--dry_run] [--pack] [--finished_only]

Each cell runs in DIR/cells/<key>/, key = its config and seed (cells.py).
A cell with cell.json holding "finished" is done and skipped; any other
folder of a cell is an interrupted run, removed and run again. Before each
cell the machine cools down (1-min load average under 1 per core, at most
--cooldown_s); cell.json records the commit, the machine and the load before
and after. The job spec is made by `relaxps-launch make-spec run_local`;
every figure comes from the run's summary.json, events.jsonl, counters.json
and data files (analyze_run.py), none from a log. Exit 0 when every cell
ran and ended as expected, 1 otherwise, 2 on bad usage, 130 on a signal.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import analyze_run
import cells as cellmod
import pack
import provenance

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LAUNCH = os.path.join(ROOT, "launcher", "relaxps-launch")


class Interrupted(Exception):
    pass


class Interrupt:
    """Ctrl-C or SIGTERM. The handler never waits (a Popen.wait() in a
    handler deadlocks on the lock the interrupted wait() holds): it stops the
    running cell's relaxps-launch and marks the request; the main flow sees
    it where it is safe to stop (after the cell's launch returns, between
    cells) and an interrupted cool-down stops at once. The interrupted cell
    is left without cell.json, so the next invocation reruns it."""

    def __init__(self):
        self.child = None  # The running cell's relaxps-launch.
        self.requested = False
        self.idle = False  # In a cool-down: nothing to finish.

    def handle(self, _signum, _frame):
        self.requested = True
        if self.child is not None:
            self.child.send_signal(signal.SIGTERM)
        if self.idle:
            raise Interrupted()

    def check(self):
        if self.requested:
            raise Interrupted()


INTERRUPT = Interrupt()


def _csv(v, conv=str):
    return [conv(x) for x in v.split(",") if x]


def parse(argv):
    ap = argparse.ArgumentParser(prog="experiment.sh", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("set", choices=sorted(cellmod.SETS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--policies", type=_csv, help="variants (cells.variants(); default all)")
    ap.add_argument("--faults", type=_csv, help=f"of {', '.join(cellmod.FAULTS)}")
    ap.add_argument("--kills", type=lambda v: _csv(v, int),
                    help="shorthand: 0,1,2 -> nofault,kill1,kill2")
    ap.add_argument("--workers", type=lambda v: _csv(v, int))
    ap.add_argument("--seeds", type=lambda v: _csv(v, int), default=[1])
    ap.add_argument("--repeats", type=int, help="seeds 1..N")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--duration_s", type=float)
    ap.add_argument("--fault_at", type=lambda v: _csv(v, float))
    ap.add_argument("--down_s", type=float)
    ap.add_argument("--eval_every_s", type=float)
    ap.add_argument("--model")
    ap.add_argument("--consistency", choices=["async", "ssp", "bsp"])
    ap.add_argument("--no_logs", action="store_true", help="every process's output to /dev/null")
    ap.add_argument("--keep_data", action="store_true")
    ap.add_argument("--reanalyze", action="store_true")
    ap.add_argument("--cooldown_s", type=float, default=120)
    ap.add_argument("--dry_run", action="store_true", help="list the cells and exit")
    ap.add_argument("--finished_only", action="store_true",
                    help="run no cell: only the finished ones (with --reanalyze, --pack)")
    ap.add_argument("--pack", action="store_true",
                    help="pack every finished cell for committing (pack.py): the analysis and "
                         "gzipped series stay, logs and per-step files go")
    a = ap.parse_args(argv)
    s = cellmod.SETS[a.set]
    p = cellmod.Protocol(**vars(cellmod.QUICK if a.quick else s["protocol"]))
    for k in ("duration_s", "fault_at", "down_s", "eval_every_s", "model", "consistency"):
        if getattr(a, k) is not None:
            setattr(p, k, getattr(a, k))
    a.protocol = p
    if a.kills is not None:
        a.faults = [("nofault", "kill1", "kill2")[k] if 0 <= k <= 2 else ap.error(
            f"--kills: {k} (0, 1 or 2)") for k in a.kills]
    a.faults = a.faults or s["faults"]
    a.workers = a.workers or s["workers"]
    if a.repeats:
        a.seeds = list(range(1, a.repeats + 1))
    for f in a.faults:
        if f not in cellmod.FAULTS:
            ap.error(f"unknown fault '{f}' ({', '.join(cellmod.FAULTS)})")
    if p.duration_s <= 0 or p.down_s <= 0 or not p.fault_at or min(a.workers) < 1:
        ap.error("--duration_s, --down_s and --workers must be positive, --fault_at non-empty")
    return a


def registry(bin_dir):
    out = subprocess.run([os.path.join(bin_dir, "relaxps-ctl"), "policies", "--json"],
                         stdout=subprocess.PIPE, check=True, text=True).stdout
    return json.loads(out)


def cool_down(cap_s, say):
    """Waits until the 1-min load average is under 1 per core, at most cap_s."""
    t0, cpus = time.monotonic(), os.cpu_count() or 1
    INTERRUPT.idle = True
    try:
        INTERRUPT.check()
        while os.getloadavg()[0] >= cpus and time.monotonic() - t0 < cap_s:
            time.sleep(5)
    finally:
        INTERRUPT.idle = False
    waited = time.monotonic() - t0
    if waited >= 5:
        say(f"  cooled down {waited:.0f} s (load {os.getloadavg()[0]:.1f}, {cpus} cores)")
    return round(waited, 1)


def run_cell(cell, d, a, prov, say):
    if os.path.isdir(d):
        shutil.rmtree(d)  # An interrupted run of this cell.
    os.makedirs(d)
    waited = cool_down(a.cooldown_s, say)
    rec = dict(cell.config, key=cell.key, protocol=vars(cell.protocol), **prov,
               cooldown_s=waited, load_before=os.getloadavg())
    zk = None
    flags = list(cell.flags) + (["--no_logs"] if a.no_logs else [])
    if "--coordination=zk" in flags:
        zk = subprocess.run([os.path.join(ROOT, "scripts", "zk.sh"), "start", f"{d}/zk"],
                            stdout=subprocess.PIPE, text=True)
        if zk.returncode != 0:
            rec.update(finished=True, exit_code=5, reason="ZooKeeper did not start")
            return rec
        flags = [f for f in flags if f != "--coordination=zk"] + [f"--zk={zk.stdout.strip()}"]
    env = dict(os.environ, RELAXPS_SCRIPT="experiment.sh")
    spec = subprocess.run([LAUNCH, "make-spec", "run_local", f"--out_dir={d}"] + flags,
                          stdout=subprocess.PIPE, env=env, text=True)
    if spec.returncode != 0:
        rec.update(finished=True, exit_code=2, reason="make-spec refused the cell's flags")
        return rec
    with open(os.path.join(d, "spec.json"), "w") as f:
        f.write(spec.stdout)
    t0 = time.time()
    out = subprocess.DEVNULL if a.no_logs else open(os.path.join(d, "launch.out"), "w")
    try:
        INTERRUPT.check()
        INTERRUPT.child = subprocess.Popen([LAUNCH, os.path.join(d, "spec.json"),
                                            f"--bin={a.bin}", "--name=experiment"],
                                           stdout=out, stderr=subprocess.STDOUT)
        if INTERRUPT.requested:  # Signalled before the child was known.
            INTERRUPT.child.send_signal(signal.SIGTERM)
        rc = INTERRUPT.child.wait()
        INTERRUPT.child = None
        INTERRUPT.check()
    finally:
        if zk is not None:
            subprocess.run([os.path.join(ROOT, "scripts", "zk.sh"), "stop", f"{d}/zk"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with open(os.path.join(d, "summary.json")) as f:
            summary = json.load(f)
        reason, verdict = summary.get("reason"), summary.get("verdict")
    except (OSError, ValueError):
        reason, verdict = "no summary.json", None
    rec.update(finished=True, exit_code=rc, wall_s=round(time.time() - t0, 1), verdict=verdict,
               reason=reason, load_after=os.getloadavg())
    return rec


def main(argv):
    a = parse(argv)
    os.makedirs(os.path.join(a.out, "cells"), exist_ok=True)
    log = open(os.path.join(a.out, "progress.log"), "a")

    def say(line):
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    policies = registry(a.bin)
    with open(os.path.join(a.out, "policies.json"), "w") as f:
        json.dump(policies, f, indent=1)
    reg = {p["name"]: p["needs"] for p in policies}
    known = cellmod.variants(list(reg))
    unknown = sorted(set(a.policies or []) - {v.name for v in known})
    if unknown:
        print(f"experiment.sh: unknown policy variant(s) {', '.join(unknown)} "
              f"({', '.join(v.name for v in known)})", file=sys.stderr)
        return 2
    a.variants = [v for v in known if not a.policies or v.name in a.policies]
    refused = cellmod.probe_variants(a.variants, a.bin)
    skipped = [{"variant": v, "reason": r} for v, r in refused.items()]
    with open(os.path.join(a.out, "skipped.json"), "w") as f:
        json.dump(skipped, f, indent=1)
    for s in skipped:
        say(f"[skip] {s['variant']}: {s['reason']}")
    variants = [v for v in a.variants if v.name not in refused]
    todo = cellmod.build(variants, a.faults, a.workers, a.seeds, a.protocol, reg, a.quick)
    with open(os.path.join(a.out, "matrix.json"), "w") as f:
        json.dump({"set": a.set, "quick": a.quick, "protocol": vars(a.protocol),
                   "cells": [c.key for c in todo]}, f, indent=1)
    done = [c for c in todo if _finished(a.out, c)]
    say(f"experiment.sh {a.set}: {len(todo)} cell(s), {len(done)} finished, "
        f"{len(todo) - len(done)} to run; out={a.out}")
    if a.dry_run:
        for c in todo:
            say(f"  {'done' if c in done else 'todo'} {c.key} {' '.join(c.flags)}")
        return 0

    signal.signal(signal.SIGINT, INTERRUPT.handle)
    signal.signal(signal.SIGTERM, INTERRUPT.handle)
    try:
        return run_matrix(a, todo, done, say)
    except Interrupted:
        if INTERRUPT.child is not None:
            INTERRUPT.child.wait()
        say("experiment.sh: interrupted; finished cells are kept, run the same command to resume")
        return 130


def run_matrix(a, todo, done, say):
    bad = 0
    for i, c in enumerate(todo, 1):
        INTERRUPT.check()
        d = os.path.join(a.out, "cells", c.key)
        if c in done and (not a.reanalyze or pack.is_packed(d)):
            note = ""
            if a.reanalyze and os.path.exists(os.path.join(d, "metrics.json")):
                try:
                    analyze_run.recount_packed(d)
                    note = (" (packed: counts, restores and recoveries recounted from its"
                            " events and step times, the rest of metrics.json stands)")
                except analyze_run.NoData as e:
                    note = f" (packed: its metrics.json stands, not recounted: {e})"
            say(f"[{i}/{len(todo)}] {c.key}: finished, skipped{note}")
            if a.pack:
                pack.pack(d)
            continue
        if c not in done and a.finished_only:
            say(f"[{i}/{len(todo)}] {c.key}: not run (--finished_only)")
            continue
        if c not in done:
            say(f"[{i}/{len(todo)}] {c.key}: starting")
            rec = run_cell(c, d, a, provenance.cell(a.out), say)
            with open(os.path.join(d, "cell.json"), "w") as f:
                json.dump(rec, f, indent=1)
        rec = json.load(open(os.path.join(d, "cell.json")))
        ok = rec["exit_code"] == c.expect_exit
        try:
            m = analyze_run.write(d) if rec["exit_code"] == 0 else None
            head = analyze_run.headline(m) if m else f"{rec['verdict']}: {rec['reason']}"
        except analyze_run.NoData as e:
            ok, head = False, f"analysis failed: {e}"
        if not a.keep_data:
            shutil.rmtree(os.path.join(d, "data"), ignore_errors=True)
        if a.pack:
            pack.pack(d)
        bad += not ok
        say(f"[{i}/{len(todo)}] {c.key}: exit {rec['exit_code']} (expected {c.expect_exit}) "
            f"{'ok' if ok else 'UNEXPECTED'}; {head}")
    return 1 if bad else 0


def _finished(out, cell):
    try:
        with open(os.path.join(out, "cells", cell.key, "cell.json")) as f:
            return json.load(f).get("finished") is True
    except (OSError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
