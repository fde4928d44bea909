#!/usr/bin/python3
"""The Python module's side of bench/client_bench.py: the same worker as
relaxps-bench-client --role=worker (same stdin commands, same JSON lines),
through relaxps.Client with numpy arrays handed over in place.

    PYTHONPATH=build/python client_bench_py.py --coordinator=EP
"""
import argparse
import functools
import json
import resource
import sys
import time

import numpy as np

import relaxps


def self_usage():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_minflt


def measure(name, nbytes, seconds, moved, op):
    """Times `op()` as relaxps-bench-client's Measure does: the latency of
    an operation is the time around the call alone (the clock reads
    bracketing it, as in C++), and the loop keeps the raw nanosecond stamps
    for after the window, so that the loop's own Python adds as little as
    the C++ loop's does to the time between calls."""
    for _ in range(2):
        op()
    clock = time.perf_counter_ns
    stamps = []
    stamp = stamps.append
    cpu0, flt0 = self_usage()
    t0 = clock()
    end = t0 + int(seconds * 1e9)
    ops = 0
    while True:
        s = clock()
        if s >= end and ops >= 3:
            break
        op()
        stamp(clock() - s)
        ops += 1
    elapsed = (clock() - t0) / 1e9
    cpu1, flt1 = self_usage()
    lat = sorted(ns / 1e3 for ns in stamps)
    return {"op": name, "bytes": nbytes, "ops": ops, "seconds": elapsed,
            "gbps": moved * ops / elapsed / 1e9, "p50_us": lat[ops // 2],
            "cpu_s": cpu1 - cpu0, "minflt": flt1 - flt0, "moved_bytes": moved * ops,
            "warmup_moved_bytes": 2 * moved}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--table_prefix", default="bench")
    args = ap.parse_args()
    client = relaxps.Client(args.coordinator)
    for line in sys.stdin:
        words = line.split()
        if words == ["quit"]:
            break
        try:
            cmd, op, nbytes, seconds = words[0], words[1], int(words[2]), float(words[3])
            if cmd != "run" or nbytes < 4 or seconds <= 0:
                raise ValueError(line)
        except (IndexError, ValueError):
            print(json.dumps({"error": "bad command %r" % line.strip()}), flush=True)
            continue
        n = nbytes // 4
        table = "%s_%d" % (args.table_prefix, nbytes)
        client.create_table(table, n, optimizer="sgd", lr=1e-6)
        grads = np.full(n, 1e-3, np.float32)
        out = np.zeros(n, np.float32)
        if op == "push_then_pull":
            def run():
                client.push(table, grads)
                client.pull(table, out)
        elif op in ("pushpull", "pushpull_lat"):
            # The call a trainer makes, bound once: no Python frame of the
            # driver's own between the clock reads.
            run = functools.partial(client.push_pull, table, grads, out)
        else:
            print(json.dumps({"op": op, "error": "unknown op"}), flush=True)
            continue
        try:
            result = measure(op, nbytes, seconds, 2 * nbytes, run)
        except relaxps.Error as e:
            result = {"op": op, "bytes": nbytes, "error": str(e)}
        print(json.dumps(result), flush=True)
    client.close()


if __name__ == "__main__":
    main()
