#!/usr/bin/python3
"""summary.csv, report.md and plots of an experiment folder (matrix.py's).

Usage: summarize.py --out=DIR [--no_plots]

Reads DIR/matrix.json (the set and its protocol), DIR/cells/*/cell.json
(config, exit code, provenance) and metrics.json (analyze_run.py), and
DIR/skipped.json. One summary row per configuration (variant x fault x
workers) over its seeds. Columns with fewer than 3 runs show the values,
not mean ± sd. TTF's figures appear only when the protocol is TTF's own
(ttf_reference.PROTOCOL); its curves are required then (a missing
reference is an error, exit 1).
"""
import argparse
import csv
import glob
import json
import os
import statistics
import sys

import analyze_run
import pack
import plots
import report
import ttf_reference

METRICS = ["final_acc", "t070", "t085", "recovery_s", "dip", "regain_s", "eval_blind_s",
           "idle_frac", "samples_per_s", "computed", "acked", "acked_lost", "rolled_back",
           "dropped",
           "applied_late", "wall_s"]
KEYS = ["variant", "fault", "workers"]


def load_cells(out):
    cells = []
    for d in sorted(glob.glob(os.path.join(out, "cells", "*"))):
        try:
            with open(os.path.join(d, "cell.json")) as f:
                c = json.load(f)
        except (OSError, ValueError):
            continue  # Interrupted: not a result.
        if not c.get("finished"):
            continue
        c["dir"] = d
        c["stores"] = stores_of(d)
        try:
            with open(os.path.join(d, "metrics.json")) as f:
                c["metrics"] = json.load(f)
        except (OSError, ValueError):
            c["metrics"] = None
        cells.append(c)
    return cells


def stores_of(d):
    """The stores the cell's servers ran on (server_started.store): a
    policy's cost without faults includes its store's."""
    path = os.path.join(d, "events.jsonl")
    if not pack.exists(path):
        return []
    stores = set()
    with pack.open_text(path) as f:
        for line in f:
            if '"server_started"' in line:
                try:
                    stores.add(json.loads(line).get("store"))
                except ValueError:
                    continue
    return sorted(x for x in stores if x)


def stat(vals):
    """{'n', 'values', 'mean', 'sd'}: mean and sd only from 3 values on."""
    vals = [v for v in vals if v is not None]
    out = {"n": len(vals), "values": vals, "mean": None, "sd": None}
    if len(vals) >= 3:
        out["mean"], out["sd"] = statistics.mean(vals), statistics.stdev(vals)
    return out


def hist_text(hist):
    """'1:12 2-3:40 4-7:3' (clocks behind: updates), empty buckets left out; '-' if none."""
    def label(i):
        return str(i) if i < 2 else f"{2 ** (i - 1)}-{2 ** i - 1}"
    return " ".join(f"{label(i)}:{n}" for i, n in enumerate(hist) if n) or "-"


def cell_text(s, spec):
    if not s["n"]:
        return "-"
    if s["mean"] is None:
        return " / ".join(format(v, spec) for v in s["values"])
    return f"{format(s['mean'], spec)} ± {format(s['sd'], spec)}"


def summarize(cells):
    groups = {}
    for c in cells:
        groups.setdefault(tuple(c[k] for k in KEYS), []).append(c)
    rows = []
    for key, cs in sorted(groups.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])):
        ok = [c for c in cs if c["exit_code"] == c["expect_exit"]]
        row = dict(zip(KEYS, key), policy=cs[0]["policy"], runs=len(cs), as_expected=len(ok),
                   expect_exit=cs[0]["expect_exit"],
                   exits=sorted({c["exit_code"] for c in cs}),
                   reasons=sorted({c.get("reason") or "" for c in cs if c["exit_code"] != 0}),
                   fallback=any((c["metrics"] or {}).get("fallback") for c in cs),
                   stores=sorted({x for c in cs for x in c.get("stores", [])}),
                   lost_notes=sorted({c["metrics"]["acked_lost_note"] for c in cs
                                      if c["metrics"] and c["metrics"].get("acked_lost_note")}))
        for m in METRICS:
            row[m] = stat([(c["metrics"] or {}).get(m) for c in cs])
        # Over every run of the configuration.
        row["late_staleness_hist"] = analyze_run.add_hists((c["metrics"] or {}).get("late_staleness_hist")
                                               for c in cs)
        rows.append(row)
    # Throughput against `none` without faults, per worker count.
    base = {r["workers"]: r["samples_per_s"] for r in rows
            if r["policy"] == "none" and r["fault"] == "nofault"}
    for r in rows:
        b, v = base.get(r["workers"]), r["samples_per_s"]
        mean = lambda s: s["mean"] if s["mean"] is not None else (  # noqa: E731
            statistics.mean(s["values"]) if s["values"] else None)
        r["throughput_vs_none"] = (mean(v) / mean(b) if b and mean(b) and mean(v) is not None
                                   else None)
    return rows


def write_csv(path, rows):
    cols = KEYS + ["policy", "runs", "as_expected", "expect_exit"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols + [f"{m}_{x}" for m in METRICS for x in ("n", "mean", "sd", "values")]
                   + ["throughput_vs_none", "late_staleness_hist"])
        for r in rows:
            w.writerow([r[c] for c in cols] +
                       [x for m in METRICS for x in (
                           r[m]["n"], "" if r[m]["mean"] is None else f"{r[m]['mean']:.4f}",
                           "" if r[m]["sd"] is None else f"{r[m]['sd']:.4f}",
                           " ".join(f"{v:.4f}" for v in r[m]["values"]))] +
                       ["" if r["throughput_vs_none"] is None else f"{r['throughput_vs_none']:.3f}",
                        hist_text(r["late_staleness_hist"])])


def is_ttf_protocol(matrix):
    p, want = matrix["protocol"], ttf_reference.PROTOCOL
    return (not matrix.get("quick") and p["duration_s"] == want["duration_s"]
            and list(p["fault_at"]) == want["fault_at"] and p["down_s"] == want["down_s"])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--no_plots", action="store_true")
    a = ap.parse_args(argv)
    with open(os.path.join(a.out, "matrix.json")) as f:
        matrix = json.load(f)
    skipped = []
    if os.path.exists(os.path.join(a.out, "skipped.json")):
        with open(os.path.join(a.out, "skipped.json")) as f:
            skipped = json.load(f)
    cells = load_cells(a.out)
    rows = summarize(cells)
    write_csv(os.path.join(a.out, "summary.csv"), rows)
    ttf = None
    if is_ttf_protocol(matrix):
        try:
            ttf = ttf_reference.load_curves()
        except ttf_reference.MissingReference as e:
            print(f"summarize: {e}", file=sys.stderr)
            return 1
    pngs = [] if a.no_plots else plots.write(os.path.join(a.out, "plots"), cells, ttf)
    report.write(os.path.join(a.out, "report.md"), matrix, rows, cells, skipped, pngs, ttf)
    print(f"summarize: {len(cells)} cell(s), {len(rows)} row(s) -> {a.out}/summary.csv, "
          f"report.md, {len(pngs)} plot(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
