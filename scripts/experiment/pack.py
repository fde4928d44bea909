"""Packs a finished cell's folder for committing (docs/results, issue 42):
what the report, the plots and a reader need stays, the rest goes.

Kept as they are: cell.json, summary.json, metrics.json (the analysis),
counters.json, spec.json, job.json, events.csv and server_rates.csv (small).
Gzipped: merged.csv (every step rate and evaluation on one axis, which the
plots read), events.jsonl (the structured events every figure comes from),
evaluator.csv and servers.csv. Removed: the processes' logs and their own
CSVs (worker-<i>.csv, the per-step worker-<i>.steps.csv), events/ (the
per-process event files events.jsonl merges) and anything else (data/, zk/).
cell.json records what was removed. A packed cell keeps its metrics.json:
`--reanalyze` cannot recompute all of it (the per-step files are gone); it
recounts the update counts, restore losses and recovery times from the
events, counters and merged.csv's step times (analyze_run.recount_packed).
Packing is idempotent.
"""
import gzip
import json
import os
import shutil

KEEP = ("cell.json", "summary.json", "metrics.json", "counters.json", "spec.json", "job.json",
        "events.csv", "server_rates.csv")
GZIP = ("merged.csv", "events.jsonl", "evaluator.csv", "servers.csv")


def open_text(path):
    """`path`, or its gzipped form once packed, for reading as text (a byte
    that is not UTF-8, as in a line cut by a kill, reads as U+FFFD)."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        return gzip.open(path + ".gz", "rt", newline="", errors="replace")
    return open(path, newline="", errors="replace")


def exists(path):
    return os.path.exists(path) or os.path.exists(path + ".gz")


def is_packed(cell_dir):
    try:
        with open(os.path.join(cell_dir, "cell.json")) as f:
            return "packed" in json.load(f)
    except (OSError, ValueError):
        return False


def pack(cell_dir):
    """Packs cell_dir (a finished cell: cell.json present). Returns the
    bytes before and after."""
    if is_packed(cell_dir):
        return None
    before = _size(cell_dir)
    for name in GZIP:
        src = os.path.join(cell_dir, name)
        if not os.path.exists(src):
            continue
        # mtime 0: the same input packs to the same bytes.
        with open(src, "rb") as i, open(src + ".gz", "wb") as raw, \
                gzip.GzipFile(filename=name, mode="wb", fileobj=raw, mtime=0) as o:
            shutil.copyfileobj(i, o)
        os.remove(src)
    keep = set(KEEP) | {n + ".gz" for n in GZIP}
    removed = []
    for name in sorted(os.listdir(cell_dir)):
        if name in keep:
            continue
        path = os.path.join(cell_dir, name)
        removed.append(name + ("/" if os.path.isdir(path) else ""))
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    with open(os.path.join(cell_dir, "cell.json")) as f:
        rec = json.load(f)
    rec["packed"] = {"removed": removed, "bytes_before": before}
    with open(os.path.join(cell_dir, "cell.json.tmp"), "w") as f:
        json.dump(rec, f, indent=1)
    os.replace(os.path.join(cell_dir, "cell.json.tmp"), os.path.join(cell_dir, "cell.json"))
    return before, _size(cell_dir)


def _size(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
