#!/usr/bin/python3
"""The Python module's side of bench/client_bench.py: the same worker as
relaxps-bench-client --role=worker (same stdin commands, same JSON lines),
through relaxps.Client with numpy arrays handed over in place.

    PYTHONPATH=build/python client_bench_py.py --coordinator=EP
"""
import argparse
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
    for _ in range(2):
        op()
    lat = []
    cpu0, flt0 = self_usage()
    t0 = time.perf_counter()
    end = t0 + seconds
    while True:
        s = time.perf_counter()
        if len(lat) >= 3 and s >= end:
            break
        op()
        lat.append((time.perf_counter() - s) * 1e6)
    elapsed = time.perf_counter() - t0
    cpu1, flt1 = self_usage()
    lat.sort()
    ops = len(lat)
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
            def run():
                client.push_pull(table, grads, out)
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
