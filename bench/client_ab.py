#!/usr/bin/python3
"""A/B of client_bench's 1 MiB PushPull and 4 KiB PushPull p50 rows: two
relaxps jobs (binaries of tree A and tree B) and one echo, alternated.

  bench/client_ab.py --a=BIN_A --b=BIN_B [--rounds=6] [--seconds=0.6]

Also prints the 1 MiB row's server CPU per request: the relaxps-server
process's CPU seconds (all threads, from /proc) over the requests it served
in the window, warm-up included.

BIN_A/../lib may hold the librelaxps_client.so.0 of tree A (its RUNPATH names
its own build tree): the worker of A then loads that one.
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_bench as cb  # noqa: E402

MIB = 1 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=0.6)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ab-small.")
    benches = {}
    res = {"a": {"1MiB": [], "4KiB": [], "cpu_us": []}, "b": {"1MiB": [], "4KiB": [], "cpu_us": []}}
    server_pids = {}
    try:
        procs = {}
        for name in ("a", "b"):
            ns = argparse.Namespace(bin=getattr(args, name))
            benches[name] = cb.Bench(ns, work)
            ep, server_pids[name] = benches[name].job(name, 1)
            cli = f"{getattr(args, name)}/relaxps-bench-client"
            lib = os.path.join(os.path.dirname(getattr(args, name)), "lib")
            env = dict(os.environ)
            if os.path.exists(os.path.join(lib, "librelaxps_client.so.0")):
                env["LD_LIBRARY_PATH"] = lib  # RUNPATH names the build tree's.
            procs[name] = benches[name].start(name + "-worker", [
                cli, "--role=worker", f"--coordinator={ep}", "--table_prefix=" + name], True,
                env=env)
        e0, _ = benches["a"].echo_server("echo0")
        echo = benches["a"].start("echo-client", [f"{args.a}/relaxps-bench-client",
                                                  "--role=echo_client", f"--echo={e0}"], True)
        for name in ("a", "b"):
            cb.run_all([procs[name]], "pushpull", MIB, 0.05)
            cb.run_all([procs[name]], "pushpull_lat", 4096, 0.05)
        for r in range(args.rounds):
            order = ("a", "b") if r % 2 == 0 else ("b", "a")
            (e,), _ = cb.run_all([echo], "pushpull", MIB, args.seconds)
            for name in order:
                (x,), usage = cb.run_all([procs[name]], "pushpull", MIB, args.seconds,
                                         server_pids[name])
                res[name]["1MiB"].append(x["gbps"] / e["gbps"])
                requests = cb.served(x) / (2 * MIB)  # A PushPull moves its bytes twice.
                res[name]["cpu_us"].append(usage[0][0] / requests * 1e6 if requests else 0)
            (e,), _ = cb.run_all([echo], "pushpull_lat", 4096, args.seconds)
            for name in order:
                (x,), _ = cb.run_all([procs[name]], "pushpull_lat", 4096, args.seconds)
                res[name]["4KiB"].append(x["p50_us"] / e["p50_us"])
            print(f"round {r}: " + "  ".join(
                f"{n}: 1MiB {res[n]['1MiB'][-1]:.3f} ({res[n]['cpu_us'][-1]:.0f} us server CPU"
                f" per request) 4KiB {res[n]['4KiB'][-1]:.3f}"
                for n in ("a", "b")), flush=True)
        for p in [echo] + list(procs.values()):
            p.send("quit")
    finally:
        for b in benches.values():
            b.stop_all()
    for n in ("a", "b"):
        print(f"{n}: 1MiB PushPull / echo GB/s median {statistics.median(res[n]['1MiB']):.3f} "
              f"{['%.3f' % v for v in res[n]['1MiB']]}")
        print(f"{n}: 1MiB server CPU us per request median "
              f"{statistics.median(res[n]['cpu_us']):.0f} {['%.0f' % v for v in res[n]['cpu_us']]}")
        print(f"{n}: 4KiB PushPull p50 / echo p50 median {statistics.median(res[n]['4KiB']):.3f} "
              f"{['%.3f' % v for v in res[n]['4KiB']]}")


if __name__ == "__main__":
    main()
