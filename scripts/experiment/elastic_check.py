#!/usr/bin/python3
"""The acceptance run of issue 43's first bullet (scripts/elastic_check.sh;
docs/elastic.md, "Acceptance run"): per seed, an elastic job (1 server; a
second and a third added at --add_at, the first drained at --drain_at) and
the same job with the final number of servers fixed from the start. Each run
is one relaxps-launch job with the servers' counters sampled
(sample_servers_s) and is analyzed by analyze_run.py; the figures come from
summary.json, events.csv, steps CSVs and servers.csv, none from a log.

Prints per run: exit, the longest pause between training steps
(max_step_gap_s, target < 1 s), the final accuracy, and (elastic runs) each
remaining server's pushes/s after the last move against an even share
(target within 20 %); then the mean +- sd final accuracy of both jobs and
their difference (target within 0.02). Exit 0 when every run finished and
every target holds, 1 otherwise, 2 on bad usage."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import analyze_run  # noqa: E402
import plots  # noqa: E402

MAX_PAUSE_S = 1.0
MAX_ACC_DIFF = 0.02
MAX_PUSH_DEV = 0.20


def _ints(s):
    return [int(x) for x in s.split(",") if x]


def _floats(s):
    return [float(x) for x in s.split(",") if x]


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="elastic_check.sh", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", type=_ints, default=[1, 2, 3])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--consistency", default="async")
    ap.add_argument("--duration_s", type=float, default=130)
    ap.add_argument("--add_at", type=_floats, default=[30, 60])
    ap.add_argument("--drain_at", type=float, default=90)
    ap.add_argument("--fixed_servers", type=int, default=3,
                    help="servers of the fixed job (the issue's: 3)")
    ap.add_argument("--sample_s", type=float, default=1.0)
    ap.add_argument("--jobs", default="elastic,fixed",
                    help="which jobs to run: elastic, fixed or both")
    a = ap.parse_args(argv)
    if not a.seeds or a.workers < 1 or a.duration_s <= a.drain_at or not a.add_at:
        ap.error("need seeds, workers >= 1, add times, and duration_s after drain_at")
    if max(a.add_at) >= a.drain_at:
        ap.error("--drain_at must come after the last --add_at")
    return a


def job_spec(a, kind, seed, out_dir):
    flags = [f"--servers={1 if kind == 'elastic' else a.fixed_servers}",
             f"--workers={a.workers}", f"--model={a.model}", f"--consistency={a.consistency}",
             "--recovery=none", f"--duration_s={a.duration_s:g}", "--optimizer=sgd",
             "--lr=0.01", "--batch=32", "--evaluator_every_s=2", f"--seed={seed}",
             "--log_every_s=1", "--progress_s=30", "--metrics", f"--out_dir={out_dir}",
             f"--sample_servers_s={a.sample_s:g}"]
    if kind == "elastic":
        flags += ["--add_server=" + ",".join(f"{t:g}" for t in a.add_at),
                  f"--drain_server=0@{a.drain_at:g}"]
    r = subprocess.run([os.path.join(a.bin, "relaxps-launch"), "make-spec", "run_local"] + flags,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"elastic_check: make-spec refused {' '.join(flags)}: {r.stderr}")
    spec = json.loads(r.stdout)
    spec["name"] = f"elastic-check-{kind}-seed{seed}"
    return spec


def run_one(a, kind, seed):
    d = os.path.join(a.out, f"{kind}-seed{seed}")
    os.makedirs(d, exist_ok=True)
    spec_path = os.path.join(a.out, f"{kind}-seed{seed}.json")
    with open(spec_path, "w") as f:
        json.dump(job_spec(a, kind, seed, d), f, indent=1)
    load_before = os.getloadavg()
    t0 = time.time()
    with open(os.path.join(a.out, f"{kind}-seed{seed}.out"), "w") as log:
        rc = subprocess.run([os.path.join(a.bin, "relaxps-launch"), spec_path,
                             f"--bin={a.bin}"], stdout=log, stderr=subprocess.STDOUT).returncode
    rec = {"kind": kind, "seed": seed, "dir": d, "exit": rc, "wall_s": time.time() - t0,
           "load_before": load_before[0], "load_after": os.getloadavg()[0], "metrics": None}
    try:
        rec["metrics"] = analyze_run.write(d)
    except analyze_run.NoData as e:
        rec["error"] = str(e)
    if rec["metrics"]:
        try:
            rec["png"] = plots.write_run(d)
        except RuntimeError as e:
            rec["png_error"] = str(e)
    return rec


def holdings(run_dir):
    """{server: (ranges, keys)} after every move of a job that started with
    one server (its tables whole on server 0), rebuilt from summary.json's
    range_moves: why the pushes are spread as they are (a push request
    carries one range, so a server's pushes/step is the number of ranges it
    holds). None if a move does not fit that start."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        moves = [m for m in json.load(f).get("range_moves", [])
                 if m.get("kind") == "range_move_done"]
    ranges = {}  # table -> [[begin, end, server]]
    for m in moves:
        t = ranges.setdefault(m["table"], [[0, max(x["end"] for x in moves
                                                   if x["table"] == m["table"]), 0]])
        r = next((r for r in t if r[2] == m["source"] and r[1] == m["end"]
                  and r[0] <= m["begin"]), None)
        if r is None:
            return None
        if r[0] == m["begin"]:
            r[2] = m["destination"]
        else:
            r[1] = m["begin"]
            t.append([m["begin"], m["end"], m["destination"]])
    out = {}
    for t in ranges.values():
        for b, e, sid in t:
            n, k = out.get(sid, (0, 0))
            out[sid] = (n + 1, k + e - b)
    return out


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def line(rec):
    m = rec["metrics"] or {}
    s = (f"{rec['kind']:8s} seed={rec['seed']} exit={rec['exit']} "
         f"max_step_gap_s={fmt(m.get('max_step_gap_s'), '.2f')} "
         f"(at {fmt(m.get('max_step_gap_at_s'), '.1f')} s) "
         + (f"near_scale_events={fmt(m.get('scale_step_gap_s'), '.2f')} s "
            if rec["kind"] == "elastic" else "")
         + f"final_acc={fmt(m.get('final_acc'), '.4f')} "
         f"load={rec['load_before']:.1f}->{rec['load_after']:.1f}")
    p = m.get("pushes_after_moves")
    if rec["kind"] == "elastic":
        if p:
            s += (f" pushes/s from {p['from_s']:.1f} s: " + " ".join(
                f"server{k}={v:.1f}({v / p['even_share'] - 1:+.1%})"
                for k, v in p["per_server"].items()) + f" even={p['even_share']:.1f}")
        else:
            s += " pushes/s after the moves: no samples"
        b = m.get("bytes_in_after_moves")
        if b:
            s += " bytes_in/s: " + " ".join(
                f"server{k}={v / 1e6:.1f}MB({v / b['even_share'] - 1:+.1%})"
                for k, v in b["per_server"].items())
        held = holdings(rec["dir"])
        if held:
            s += " held (ranges/keys): " + " ".join(
                f"server{k}={n}/{keys}" for k, (n, keys) in sorted(held.items()))
        moves = [e for e in m.get("scale_events", []) if e["kind"] == "range_move_done"]
        s += f" moves={len(moves)} map_versions=" + ",".join(
            str(e["map_version"]) for e in moves)
    if rec.get("error"):
        s += f" NO DATA: {rec['error']}"
    return s


def verdict(recs):
    """(lines, ok) of the targets over every run."""
    out, ok = [], True
    if any(r["exit"] != 0 or not r["metrics"] for r in recs):
        ok = False
        out.append("FAIL: runs that did not finish: " + ", ".join(
            f"{r['kind']}-seed{r['seed']} (exit {r['exit']})" for r in recs
            if r["exit"] != 0 or not r["metrics"]))
    done = [r for r in recs if r["metrics"]]
    el = [r for r in done if r["kind"] == "elastic"]
    gaps = [r["metrics"]["max_step_gap_s"] for r in el if r["metrics"]["max_step_gap_s"]]
    if el:
        worst = max(gaps) if gaps else None
        good = worst is not None and worst < MAX_PAUSE_S
        ok &= good
        out.append(f"{'ok  ' if good else 'FAIL'} longest pause between steps (elastic): "
                   f"{fmt(worst, '.2f')} s (target < {MAX_PAUSE_S:g} s)")
        devs = [r["metrics"]["pushes_after_moves"]["max_dev"] for r in el
                if r["metrics"].get("pushes_after_moves")
                and r["metrics"]["pushes_after_moves"]["max_dev"] is not None]
        good = len(devs) == len(el) and max(devs) <= MAX_PUSH_DEV
        ok &= good
        out.append(f"{'ok  ' if good else 'FAIL'} pushes/s per remaining server after the last "
                   f"move vs an even share: worst {fmt(max(devs) if devs else None, '.1%')} "
                   f"(target within {MAX_PUSH_DEV:.0%})")
    accs = {k: [r["metrics"]["final_acc"] for r in done if r["kind"] == k]
            for k in ("elastic", "fixed")}
    for k, v in accs.items():
        if v:
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            out.append(f"     final accuracy {k}: {statistics.mean(v):.4f} +- {sd:.4f} "
                       f"(n={len(v)}: {', '.join(f'{x:.4f}' for x in v)})")
    if accs["elastic"] and accs["fixed"]:
        diff = statistics.mean(accs["elastic"]) - statistics.mean(accs["fixed"])
        good = abs(diff) <= MAX_ACC_DIFF
        ok &= good
        out.append(f"{'ok  ' if good else 'FAIL'} mean final accuracy elastic - fixed: "
                   f"{diff:+.4f} (target within {MAX_ACC_DIFF})")
    return out, ok


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    kinds = [k for k in a.jobs.split(",") if k]
    if any(k not in ("elastic", "fixed") for k in kinds):
        raise SystemExit("elastic_check: --jobs takes elastic and/or fixed")
    print(f"elastic_check: {len(a.seeds)} seed(s) x {', '.join(kinds)}; {a.model}, "
          f"{a.workers} worker(s), {a.duration_s:g} s, servers added at "
          f"{', '.join(f'{t:g}' for t in a.add_at)} s, server 0 drained at {a.drain_at:g} s; "
          f"{os.cpu_count()} cpus, 1-min load {os.getloadavg()[0]:.1f}; runs in {a.out}",
          flush=True)
    recs = []
    for seed in a.seeds:
        for kind in kinds:
            rec = run_one(a, kind, seed)
            recs.append(rec)
            print(line(rec), flush=True)
    with open(os.path.join(a.out, "elastic_check.json"), "w") as f:
        json.dump(recs, f, indent=1)
    lines, ok = verdict(recs)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
