#!/usr/bin/env python3
"""Merges the JSON printed by the relaxps benches into one document.

    bench/merge_results.py --quick=0|1 --out=FILE NAME=FILE.json ...

Every input becomes benches[NAME] verbatim; its figures are flattened into
`figures` (name, value, unit, yardstick, yardstick_value, ratio, better), and
the targets of docs/benchmarks.md are evaluated into `targets`. A missing or
unreadable input is recorded under `errors` instead of failing the merge.
The document is printed on stdout and written to FILE.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys


def figure(bench, name, value, unit, yardstick, yardstick_value, better="higher", **extra):
    ratio = None
    if isinstance(value, (int, float)) and isinstance(yardstick_value, (int, float)) \
            and yardstick_value:
        ratio = value / yardstick_value
    f = {"bench": bench, "name": name, "value": value, "unit": unit, "yardstick": yardstick,
         "yardstick_value": yardstick_value, "ratio": ratio, "better": better}
    f.update(extra)
    return f


def figures_of(bench, doc):
    out = []
    if bench == "zmq":
        best = {}
        for r in doc.get("results", []):
            if r.get("zero_copy"):
                best[(r["bytes"], r["in_flight"])] = r
        for r in doc.get("results", []):
            ref = best.get((r["bytes"], r["in_flight"]), r)
            yname = ref["name"]
            out.append(figure(bench, r["name"] + "/gbps", r["gbps"], "GB/s", yname + "/gbps",
                              ref["gbps"], round_trips_per_s=r["round_trips_per_s"]))
            if "p50_us" in r:
                out.append(figure(bench, r["name"] + "/p50_us", r["p50_us"], "us",
                                  yname + "/p50_us", ref.get("p50_us"), "lower",
                                  p99_us=r.get("p99_us")))
        return out
    if bench == "optimizer":
        dev = doc.get("device", "cpu")
        for r in doc.get("optimizer_update", []):
            out.append(figure(bench, f"optimizer/{dev}/{r['name']}/gbps", r["gbps"], "GB/s",
                              f"optimizer/{dev}/axpy/gbps", r["axpy_gbps"]))
            if r.get("apply_and_copy_speedup"):
                # A PUSH_PULL's update and reply snapshot: Apply then memcpy
                # (the yardstick, 1.0) over Optimizer::ApplyAndCopy.
                out.append(figure(bench, f"optimizer/{dev}/{r['name']}/apply_and_copy_speedup",
                                  r["apply_and_copy_speedup"], "x",
                                  f"optimizer/{dev}/{r['name']}/apply_then_copy", 1.0))
        p = doc.get("pushpull_passes")
        if p:
            # What a dense PushPull does to its bytes besides moving them (two
            # finiteness checks, the update with its reply copy, the client's
            # copy), per GB moved: no yardstick, derived_figures uses it.
            out.append(figure(bench, f"optimizer/{dev}/pushpull_passes/{p['bytes'] / 2**20:g}MiB/"
                              "cpu_s_per_gb", p["cpu_s_per_gb"], "CPU s/GB", None, None, "lower",
                              check_s=p["check_s"], apply_and_copy_s=p["apply_and_copy_s"],
                              copy_s=p["copy_s"]))
        if "memcpy_d2d_gbps" in doc:
            out.append(figure(bench, f"optimizer/{dev}/memcpy/gbps", doc["memcpy_d2d_gbps"], "GB/s",
                              f"optimizer/{dev}/memcpy/gbps", doc["memcpy_d2d_gbps"]))
        return out
    if bench == "checkpoint":
        c = doc.get("checkpoint", {})
        mb = c.get("bytes", 0) / 2**20
        for key, unit_of in (("checkpoint_s", "seq_write_fsync_s"), ("restore_s", "seq_write_fsync_s"),
                             ("flush_s", "seq_write_fsync_s"), ("async_stall_s", "memcpy_s")):
            if key in c:
                out.append(figure(bench, f"checkpoint/{mb:g}MiB/{key}", c[key], "s",
                                  f"checkpoint/{mb:g}MiB/{unit_of}", c.get(unit_of), "lower"))
        return out
    if bench.startswith("store") and doc.get("bench") == "store_flush_cost":
        # One flush of the store alone against a plain write + fdatasync of
        # the same bytes: what RocksDB adds to what any durable flush costs.
        table = f"{doc.get('push_mb', 0):g}MiB"
        for what, unit in (("cpu", "CPU ms"), ("wall", "ms")):
            out.append(figure(bench, f"store/flush_cost/{table}/{what}_ms_per_flush",
                              doc.get(f"{what}_ms_per_flush"), unit,
                              f"store/flush_cost/{table}/raw_write_fdatasync_{what}_ms",
                              doc.get(f"raw_write_{what}_ms"), "lower"))
        return out
    if bench.startswith("store"):
        mb = doc.get("mb")
        # A run whose pushes cover part of the table names it ("push4MiB").
        push = doc.get("push_mb")
        table = f"{mb:g}MiB" if push is None or push >= mb else f"{mb:g}MiB/push{push:g}MiB"
        mem = next((m for m in doc.get("results", []) if m["name"] == "memory"), {})
        noflush = next((m for m in doc.get("results", []) if m["name"] == "rocksdb/noflush"), {})
        for r in doc.get("results", []):
            if r["name"] == "memory":
                continue
            # The ratio is the median of per-round ratios, not value/yardstick.
            out.append(figure(bench, f"store/{table}/{r['name']}/iters_per_s",
                              r["iters_per_s"], "PushPull+Clock/s",
                              f"store/{table}/memory/iters_per_s", mem.get("iters_per_s")))
            out[-1]["ratio"] = r["ratio_to_memory"]
            if r["name"] != "rocksdb/noflush" and "ratio_to_noflush" in r and noflush:
                # What the flushes cost: against the same store never flushing.
                out.append(figure(bench, f"store/{table}/{r['name']}_vs_noflush/iters_per_s",
                                  r["iters_per_s"], "PushPull+Clock/s",
                                  f"store/{table}/rocksdb/noflush/iters_per_s",
                                  noflush.get("iters_per_s")))
                out[-1]["ratio"] = r["ratio_to_noflush"]
            if "flush_cpu_ms" in r and noflush.get("cpu_ms_per_iter"):
                # The CPU of one flush against that of the clocks it covers.
                every = r["flush_every_clocks"]
                out.append(figure(bench, f"store/{table}/{r['name']}/flush_cpu_ms",
                                  r["flush_cpu_ms"], "CPU ms",
                                  f"store/{table}/rocksdb/noflush/cpu_ms_per_{every}_iters",
                                  noflush["cpu_ms_per_iter"] * every, "lower"))
        return out
    # Generic: any list of objects carrying name + value (+ ratio).
    for key, rows in doc.items():
        if not isinstance(rows, list):
            continue
        for r in rows:
            if isinstance(r, dict) and "name" in r and ("value" in r or "ratio" in r):
                f = {"bench": bench}
                f.update(r)
                f.setdefault("unit", None)
                f.setdefault("ratio", None)
                out.append(f)
    return out


# The dense targets against the echo that a floor bounds, and their bounds.
FLOORED_TARGETS = (("pushpull", "PushPull", 0.9), ("push_then_pull", "push then pull", 0.85))


def floor_name(mode, bound):
    return f"dense/{mode}/w1s1/16MiB/if1/cores_needed_at_{bound:g}x_echo"


def derived_figures(figs, nproc):
    """The fewest cores on which a 16 MiB dense target against the echo can be met.

    Reaching `bound` x the echo's GB/s means moving the bytes at that rate
    while spending at least the echo's own CPU per GB (ZeroMQ and the kernel)
    plus the passes over the bytes measured by relaxps-bench-optimizer
    (pushpull_passes; push then pull makes at least these). Cores needed:
    (echo CPU s/GB + passes CPU s/GB) x bound x echo GB/s, with no overhead
    of relaxps' own and every core busy all the time (the echo itself keeps
    echo_cores busy). Against the host's cores: a ratio above 1 means the
    target cannot be met on this machine.
    """
    by_name = {f["name"]: f for f in figs}
    passes = by_name.get("optimizer/cpu/pushpull_passes/16MiB/cpu_s_per_gb")
    out = []
    for mode, _, bound in FLOORED_TARGETS:
        gbps = by_name.get(f"dense/{mode}/w1s1/16MiB/if1/gbps")
        cpu = by_name.get(f"dense/{mode}/w1s1/16MiB/if1/cpu_s_per_gb")
        if not (passes and gbps and cpu and gbps.get("yardstick_value")
                and cpu.get("yardstick_value")):
            continue
        echo_gbps, echo_cpu = gbps["yardstick_value"], cpu["yardstick_value"]
        out.append(figure("derived", floor_name(mode, bound),
                          (echo_cpu + passes["value"]) * bound * echo_gbps, "cores",
                          "host/nproc", nproc, "lower", echo_gbps=echo_gbps,
                          echo_cpu_s_per_gb=echo_cpu, passes_cpu_s_per_gb=passes["value"],
                          echo_cores=echo_cpu * echo_gbps))
    return out


def targets_of(figs):
    by_name = {f["name"]: f for f in figs}
    out = []

    def target(what, name, op, bound, field="ratio", why=""):
        f = by_name.get(name)
        v = f.get(field) if f else None
        met = None if v is None else (v >= bound if op == ">=" else v <= bound)
        out.append({"target": what, "figure": name, "measure": field, "value": v,
                    "op": op, "bound": bound, "met": met, "note": why})

    for size in ("16MiB", "64MiB"):
        for inflight in ("if1",):
            target(f"dense {size} PushPull, 1 server 1 worker, {inflight}: >= 0.8x bare ZeroMQ "
                   "round trip", f"dense/pushpull/w1s1/{size}/{inflight}/gbps", ">=", 0.8)
            target(f"dense {size} Push then Pull, 1 server 1 worker, {inflight}: >= 0.8x bare "
                   "ZeroMQ round trip", f"dense/push_then_pull/w1s1/{size}/{inflight}/gbps",
                   ">=", 0.8)
    target("4 KiB Pull p50 <= 1.3x bare ZeroMQ round trip", "dense/pull/w1s1/4KiB/if1/p50_us",
           "<=", 1.3)
    # Pipelining pays off where a round trip is latency-bound, i.e. small
    # messages; at 1 MiB and up the link is already busy with one in flight.
    target("ops/s with 8 in flight >= 4x with 1 (4 KiB PushPull, w1s1)",
           "dense/pushpull/w1s1/4KiB/ops_speedup_if8_vs_if1", ">=", 4.0, field="value",
           why="the echo's own speedup is the figure's yardstick_value")
    for f in figs:
        if f["name"].startswith("optimizer/") and f["name"].endswith("/gbps") \
                and "/axpy/" not in f["name"] and "/memcpy/" not in f["name"]:
            target("optimizer update >= 0.7x axpy", f["name"], ">=", 0.7)
    for f in figs:
        # The throughput figure only: the same prefix also names the flush's
        # CPU cost (flush_cpu_ms, lower is better), which this bound does not fit.
        if f["bench"].startswith("store") and "/rocksdb/flush1/" in f["name"] \
                and f["name"].endswith("/iters_per_s"):
            target("rocksdb store, flush every clock: PushPull+Clock >= 0.9x memory store",
                   f["name"], ">=", 0.9)
    for f in figs:
        if f["bench"] == "checkpoint" and f["name"].endswith("/async_stall_s"):
            target("checkpoint stalls writers no longer than the snapshot copy (<= 1.5x memcpy)",
                   f["name"], "<=", 1.5)
    target("chain R=2 vs R=1, dense 16 MiB PushPull (w1s3): >= 0.5x",
           "chain/r2/dense_16MiB_pushpull_w1s3/gbps", ">=", 0.5)
    target("chain R=2 vs R=1, 4 KiB PushPull p50 latency (w1s3): <= 2x",
           "chain/r2/dense_4KiB_pushpull_w1s3/p50_us", "<=", 2.0)
    target("chain R=2 vs R=1, cnn training samples/s (1 worker, 3 servers): >= 0.9x",
           "chain/r2/cnn_async_w1s3/samples_per_s", ">=", 0.9)
    target("training overhead (1 worker, async, cnn) <= 15% slower than local",
           "training/cnn/ps_async_w1s1/samples_per_s", ">=", 0.85)

    # Issue 15: against the bare ZeroMQ echo of the same run.
    for mode, label, bound in FLOORED_TARGETS:
        floor = by_name.get(floor_name(mode, bound))
        why = "" if floor is None else \
            f"needs at least {floor['value']:.2f} of this host's {floor['yardstick_value']} cores"
        target(f"issue 15: dense 16 MiB {label} w1s1 >= {bound:g}x echo",
               f"dense/{mode}/w1s1/16MiB/if1/gbps", ">=", bound, why=why)
    target("issue 15: dense 1 MiB PushPull w1s1 >= 0.7x echo",
           "dense/pushpull/w1s1/1MiB/if1/gbps", ">=", 0.7)
    # The same bound for the PushPull that hands the caller the received
    # frame instead of copying it into `out` (the issue's "or hands the
    # caller the frame"); reported next to the copying one, not instead.
    target("issue 15: dense 1 MiB PushPullZeroCopy w1s1 >= 0.7x echo",
           "dense/pushpull_zero_copy/w1s1/1MiB/if1/gbps", ">=", 0.7)
    target("issue 15: 4 KiB PushPull ops/s w1s1, 1 in flight >= 0.9x echo",
           "dense/pushpull/w1s1/4KiB/if1/gbps", ">=", 0.9)
    target("issue 15: 4 KiB pushes/s w1s1, 8 in flight >= 0.9x echo",
           "dense/push/w1s1/4KiB/if8/ops_per_s", ">=", 0.9)
    # The multi-worker collapse: cost per byte at 2x2 against 1x1.
    for mode in ("push_then_pull", "pushpull"):
        fig = f"dense/{mode}/w2s2/16MiB/if1"
        target(f"issue 15: w2s2 16 MiB {mode}: CPU s per GB <= 1.2x w1s1",
               fig + "/cpu_s_per_gb", "<=", 1.2)
        target(f"issue 15: w2s2 16 MiB {mode}: page faults per GB <= 2x w1s1",
               fig + "/faults_per_gb", "<=", 2.0)
        target(f"issue 15: w2s2 16 MiB {mode}: aggregate GB/s >= w1s1",
               fig + "/gbps_vs_w1s1", ">=", 1.0)
    for f in figs:
        if f["name"].startswith("wal/group_commit/"):
            target("issue 15: --wal_per_update, 2 workers x 8 in flight: group commit >= 3x "
                   "one sync per push", f["name"], ">=", 3.0)
    for f in figs:
        if f["bench"].startswith("store") and f["name"].endswith("/rocksdb/flush10_vs_noflush/iters_per_s"):
            target("issue 15: rocksdb store flushing every 10 clocks (dirty-chunk flushes): "
                   "PushPull+Clock >= 0.95x the same store not flushing", f["name"], ">=", 0.95)
    for f in figs:
        if f["name"].startswith("sparse/") and "/w1s1/" in f["name"] \
                and f["name"].endswith("/rows_per_s"):
            target("issue 15: sparse rows w1s1 >= 0.5x the bare ZeroMQ echo of the same bytes "
                   "(ids out and rows back, or ids + rows out and an ack back)",
                   f["name"], ">=", 0.5)
    target("issue 15: cnn through the PS (w1s1, async) >= 0.9x --local",
           "training/cnn/ps_async_w1s1/samples_per_s", ">=", 0.9)

    # Issue 41: through the public client library and the Python module,
    # every process separate (bench/client_bench.py), against a bare ZeroMQ
    # echo between processes measured right before each figure.
    c = "client/dense"
    target("issue 41: 16 MiB push then pull, 1 server 1 worker, public API / echo of the same "
           "bytes >= 1.0", f"{c}/push_then_pull/w1s1/16MiB/gbps", ">=", 1.0)
    target("issue 41: 16 MiB push then pull, 2 servers 2 workers, total / two concurrent echo "
           "pairs >= 0.9", f"{c}/push_then_pull/w2s2/16MiB/gbps", ">=", 0.9)
    for cfg in ("w1s1", "w2s2"):
        target(f"issue 41: round-to-round spread of 16 MiB push then pull {cfg} (max/min over "
               "the rounds) / the echo's own spread <= 1.3",
               f"{c}/push_then_pull/{cfg}/16MiB/spread", "<=", 1.3)
    target("issue 41: 1 MiB PushPull / echo >= 0.8", f"{c}/pushpull/w1s1/1MiB/gbps", ">=", 0.8)
    target("issue 41: 4 KiB PushPull p50 latency / echo p50 <= 1.15",
           f"{c}/pushpull/w1s1/4KiB/p50_us", "<=", 1.15)
    target("issue 41: Python module / C++ API, 16 MiB push then pull >= 0.9",
           f"{c}/push_then_pull/w1s1/16MiB/python_vs_cpp", ">=", 0.9)
    target("issue 41: Python module / C++ API, 4 KiB PushPull (C++ p50 / Python p50) >= 0.9",
           f"{c}/pushpull/w1s1/4KiB/python_vs_cpp", ">=", 0.9)
    target("issue 41: client page faults per GB / server's, 2x2 <= 2",
           f"{c}/push_then_pull/w2s2/16MiB/client_faults_per_gb", "<=", 2.0)
    target("issue 41: CURVE's added CPU per GB / libsodium enc+dec per GB, same run <= 1.3",
           "curve/16MiB_pushpull_added_cpu_s_per_gb", "<=", 1.3)
    target("issue 41: bench.sh --quick wall time <= 180 s", "bench/quick_wall_s", "<=", 180.0,
           field="value")
    target("issue 43: dense range migration GB/s >= 0.5x the one-way ZeroMQ echo of its pieces",
           "range_move/dense", ">=", 0.5)
    target("issue 41: PyTorch CNN through relaxps / the same model in plain PyTorch, same "
           "threads, samples/s >= 0.95", "training_pytorch_cnn/cnn/ps_async_w1s1/samples_per_s",
           ">=", 0.95)
    target("issue 41: cnn job samples/s with CURVE / plain >= 0.6",
           "training/cnn/ps_async_w1s1_curve/samples_per_s", ">=", 0.6)
    for what, name in (("GPU Adam / device memcpy >= 0.8", "gpu/optimizer/adam_vs_memcpy"),
                       ("cnn samples/s --device=cuda / cpu (reported)", "gpu/cnn/cuda_vs_cpu")):
        target(f"issue 41: {what}", name, ">=", 0.8 if "Adam" in what else 0.0,
               why="runs on a GPU machine only: scripts/gpu_check.sh --bundle here, --run there")
    durability_targets(target)
    return out


def durability_targets(target):
    """Issue 41 point 5 (bench.sh's durability_figures)."""
    target("issue 41: mlp samples/s with --wal_per_update / without >= 0.5",
           "training/mlp/ps_async_w1s1_wal_per_update/samples_per_s", ">=", 0.5)
    target("issue 41: incremental checkpoint, 10% of chunks dirty, bytes / full <= 0.15",
           "checkpoint/incremental_10pct/bytes", "<=", 0.15)
    target("issue 41: incremental checkpoint, 10% of chunks dirty, time / full <= 0.15",
           "checkpoint/incremental_10pct/seconds", "<=", 0.15)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", default="0")
    ap.add_argument("--out", required=True)
    ap.add_argument("--wall_s", type=float, default=None,
                    help="bench.sh's wall time so far (a figure of its own)")
    ap.add_argument("inputs", nargs="*")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    doc = {"timestamp": datetime.datetime.now().isoformat(timespec="seconds"),
           "quick": args.quick == "1", "git_commit": commit,
           "host": {"nproc": os.cpu_count(), "machine": platform.machine(),
                    "load_avg_at_end": list(os.getloadavg())},
           "note": "Absolute figures vary with machine load; compare `ratio` (figure / "
                   "yardstick measured in the same run).",
           "benches": {}, "errors": {}, "figures": [], "targets": []}
    for item in args.inputs:
        name, _, path = item.partition("=")
        try:
            with open(path) as f:
                text = f.read()
            try:  # One JSON document (curve_bench.sh prints it indented) ...
                data = json.loads(text)
            except ValueError:
                # ... or log lines before it: take the last JSON line.
                lines = [l for l in text.splitlines() if l.strip().startswith("{")]
                data = json.loads(lines[-1])
        except (OSError, ValueError, IndexError) as e:
            doc["errors"][name] = f"{path}: {e}"
            continue
        doc["benches"][name] = data
        doc["figures"].extend(figures_of(name, data))
    doc["figures"].extend(derived_figures(doc["figures"], os.cpu_count()))
    if args.wall_s is not None:
        doc["wall_s"] = args.wall_s
        if args.quick == "1":
            doc["figures"].append(figure("bench", "bench/quick_wall_s", args.wall_s, "s", None,
                                         None, "lower"))
    doc["targets"] = targets_of(doc["figures"])
    text = json.dumps(doc, indent=1)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
