#!/usr/bin/python3
"""Per-set summary of an experiment.sh output directory.

Usage: summarize.py --out=DIR --set=NAME [--ttf_csv=PATH] [--fault_at="30 80"]
                    [--down_s=20] [--duration_s=210] [--skipped=DIR/skipped.txt]
                    [--kills=0,1,2] [--policies_json=DIR/policies.json]

Reads DIR/runs/*/metrics.json (analyze_run.py) and writes DIR/summary.csv
(one row per configuration: policy x kills x fault x consistency x workers,
mean and sample standard deviation over repeats), DIR/report.md (the same
with TTF's logged numbers beside ours) and DIR/plots/ (data + plots.gp,
see plots.py). Runs that failed (exit.txt without metrics.json) and
policies the binaries refused (skipped.txt) appear as rows with a status.
What it knows of the recovery policies (their order, the servers a run used,
which ones run only without faults) comes from the registry's JSON
(relaxps-ctl policies --json, saved by experiment.sh as DIR/policies.json).
"""
import argparse
import csv
import glob
import json
import os
import statistics

import plots
import ttf_reference

METRICS = ["final_acc", "t070", "t085", "stall_s", "recovery_s", "regain_s", "lost_updates",
           "idle_frac", "grads_computed", "grads_applied", "samples_per_s", "wall_s"]
KEYS = ["policy", "kills", "fault", "consistency", "workers"]


def load_policies(path):
    """{name: needs} in registry order, from relaxps-ctl policies --json."""
    with open(path) as f:
        return {p["name"]: p["needs"] for p in json.load(f)}


def parse_id(run_id):
    # <policy>-k<kills>-<fault>-<consistency>-w<workers>-r<repeat>
    p, k, f, c, w, r = run_id.split("-")
    return {"policy": p, "kills": int(k[1:]), "fault": f, "consistency": c,
            "workers": int(w[1:]), "repeat": int(r[1:])}


def load_runs(out):
    runs, failed = [], []
    for d in sorted(glob.glob(os.path.join(out, "runs", "*"))):
        run_id = os.path.basename(d)
        try:
            cfg = parse_id(run_id)
        except ValueError:
            continue
        mpath = os.path.join(d, "metrics.json")
        if os.path.exists(mpath):
            with open(mpath) as f:
                m = json.load(f)
            m.update(cfg)
            m["dir"] = d
            runs.append(m)
        elif os.path.exists(os.path.join(d, "exit.txt")):
            reason = ""
            alog = os.path.join(d, "analyze.log")
            if os.path.exists(alog):
                lines = [l.strip() for l in open(alog) if l.strip()]
                reason = lines[-1] if lines else ""
            failed.append(dict(cfg, reason=reason or "no results"))
    return runs, failed


def mean_sd(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None, None
    return statistics.mean(vals), (statistics.stdev(vals) if len(vals) > 1 else None)


def summarize(runs, failed, skipped, kills, policies):
    groups = {}
    for r in runs:
        groups.setdefault(tuple(r[k] for k in KEYS), []).append(r)
    rows = []
    for key, rs in groups.items():
        row = dict(zip(KEYS, key))
        row.update(repeats=len(rs), status="ok", servers=policies.get(key[0], {}).get("experiment_servers"))
        nfail = sum(1 for f in failed if tuple(f[k] for k in KEYS) == key)
        if nfail:
            row["status"] = f"ok ({nfail} failed repeat(s))"
        for m in METRICS:
            row[m + "_mean"], row[m + "_sd"] = mean_sd([r.get(m) for r in rs])
        row["lost_method"] = ",".join(sorted({r["lost_method"] for r in rs if r.get("lost_method")}))
        rows.append(row)
    seen = {tuple(r[k] for k in KEYS) for r in rows}
    for f in failed:
        key = tuple(f[k] for k in KEYS)
        if key not in seen:
            seen.add(key)
            rows.append(dict(zip(KEYS, key), repeats=0, status="failed: " + f["reason"]))
    for kind, name, reason in skipped:
        if kind == "policy":
            for k in kills:
                if k != 0 and not policies.get(name, {}).get("tolerates_server_loss", True):
                    continue  # A fault ends such a job: it runs without faults only.
                rows.append({"policy": name, "kills": k, "fault": "-", "consistency": "-",
                             "workers": "-", "repeats": 0, "status": "skipped: " + reason})
    # Each policy's no-kill accuracy, for the acceptance comparison.
    nokill = {(r["policy"], r["consistency"], r["workers"]): r.get("final_acc_mean")
              for r in rows if r["kills"] == 0 and r["status"].startswith("ok")}
    for r in rows:
        base = nokill.get((r["policy"], r["consistency"], r["workers"]))
        r["nokill_final_acc"] = base
        acc = r.get("final_acc_mean")
        r["acc_minus_nokill"] = None if base is None or acc is None else acc - base
        r.update(ttf_reference.columns(r["policy"], r["kills"]))
    order = {p: i for i, p in enumerate(policies)}
    rows.sort(key=lambda r: (str(r["workers"]), str(r["consistency"]), r["kills"],
                             order.get(r["policy"], 9), str(r["fault"])))
    return rows


def columns():
    cols = ["set"] + KEYS + ["servers", "repeats", "status"]
    for m in METRICS:
        cols += [m + "_mean", m + "_sd"]
    return cols + ["lost_method", "nokill_final_acc", "acc_minus_nokill"] + ttf_reference.COLUMNS


def write_csv(path, rows, set_name):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns())
        for r in rows:
            r["set"] = set_name
            w.writerow(["" if r.get(c) is None else
                         (f"{r[c]:.4f}" if isinstance(r[c], float) else r[c]) for c in columns()])


def read_skipped(path):
    out = []
    if path and os.path.exists(path):
        for line in open(path):
            parts = line.rstrip("\n").split(",", 2)
            if len(parts) == 3:
                out.append(tuple(parts))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", required=True)
    ap.add_argument("--ttf_csv", default="")
    ap.add_argument("--fault_at", default="30 80")
    ap.add_argument("--down_s", type=float, default=20)
    ap.add_argument("--duration_s", type=float, default=210)
    ap.add_argument("--skipped", default="")
    ap.add_argument("--kills", default="0,1,2")
    ap.add_argument("--schedule", default="ttf")
    ap.add_argument("--policies_json", default="",
                    help="relaxps-ctl policies --json output (default OUT/policies.json)")
    a = ap.parse_args()
    runs, failed = load_runs(a.out)
    skipped = read_skipped(a.skipped)
    policies = load_policies(a.policies_json or os.path.join(a.out, "policies.json"))
    rows = summarize(runs, failed, skipped, [int(k) for k in a.kills.split(",") if k], policies)
    write_csv(os.path.join(a.out, "summary.csv"), rows, a.set)
    ttf = ttf_reference.load_curves(a.ttf_csv) if a.duration_s >= 100 else {}
    pngs = plots.write(os.path.join(a.out, "plots"), runs, rows, ttf, list(policies))
    import report  # after the data: report.md links the PNGs
    report.write(os.path.join(a.out, "report.md"), a, rows, runs, failed, skipped, pngs,
                 bool(ttf))
    print(f"summarize: {len(runs)} run(s), {len(rows)} row(s) -> {a.out}/summary.csv, report.md")


if __name__ == "__main__":
    main()
