#!/usr/bin/python3
"""Instructions per 4 KiB push_pull: the Python module's worker against the
C++ one, counted by callgrind (the steady measure behind bench/client_bench.py's
client/dense/pushpull/w1s1/4KiB/python_vs_cpp, whose p50 swings by tens of
percent on a shared 2-core host).

Starts a 1-server job (as client_bench.py's job A) and the two workers of
client_bench.py (relaxps-bench-client --role=worker and client_bench_py.py),
each under valgrind --tool=callgrind --separate-threads=yes. For each worker:
a warm-up window, callgrind_control --zero, one `run pushpull_lat 4096 S`
window, callgrind_control --dump; then every thread's instructions divided by
the operations of that window. The calling thread (thread 1) is where the
two differ: the module's argument handling and the interpreter's loop around
the call; the client library's own threads do the same work for both.
Callgrind runs the threads one at a time, so the latencies it prints are
not the figure; the counts are.

  bench/python_instructions.py --bin=build/bin --pythonpath=build/python
      [--seconds=2] [--keep=DIR]

Prints one JSON document: {"bench":"python_instructions","workers":{"cpp":
{"ops":..,"threads":[instructions per op, thread 1 first]},"python":{..}},
"results":[{name, value, unit, yardstick, yardstick_value, ratio, better}]}
with one figure, instructions/python/pushpull/w1s1/4KiB/calling_thread
(the C++ worker's calling thread as its yardstick, lower is better), which
bench/merge_results.py takes as it is. Without valgrind: "skipped".
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client_bench  # noqa: E402  (Bench, run_all: the same processes)

SIZE = 4096


def thread_totals(prefix):
    """Instructions of each thread of a callgrind dump, thread 1 first."""
    totals = {}
    for path in glob.glob(prefix + "-*"):
        thread = int(path.rsplit("-", 1)[1])
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("summary:") or line.startswith("totals:"):
                    totals[thread] = max(totals.get(thread, 0), int(line.split()[1]))
    return [totals[t] for t in sorted(totals)]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--pythonpath", default="build/python")
    ap.add_argument("--seconds", type=float, default=2.0, help="counted window per worker")
    ap.add_argument("--keep", default="", help="keep the callgrind files in this folder")
    args = ap.parse_args()
    doc = {"bench": "python_instructions", "bytes": SIZE}
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        doc["skipped"] = "valgrind not installed"
        print(json.dumps(doc))
        return
    work = args.keep or tempfile.mkdtemp(prefix="relaxps-python-instructions.")
    os.makedirs(work, exist_ok=True)
    args.bin = os.path.abspath(args.bin)
    bench = client_bench.Bench(args, work)

    def callgrind(name):
        return ["valgrind", "--tool=callgrind", "--separate-threads=yes",
                f"--callgrind-out-file={work}/{name}.cg.%p"]

    workers = {}
    try:
        endpoint, _ = bench.job("a", 1)
        workers["cpp"] = bench.start("cpp", callgrind("cpp") + [
            f"{args.bin}/relaxps-bench-client", "--role=worker", f"--coordinator={endpoint}",
            "--table_prefix=cpp"], True)
        env = dict(os.environ, PYTHONPATH=os.path.abspath(args.pythonpath))
        workers["python"] = bench.start("python", callgrind("python") + [
            "/usr/bin/python3",
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "client_bench_py.py"),
            f"--coordinator={endpoint}", "--table_prefix=py"], True, env=env)
        doc["workers"] = {}
        for name, proc in workers.items():
            client_bench.run_all([proc], "pushpull_lat", SIZE, 0.2)  # table, connection, caches
            pid = str(proc.p.pid)
            subprocess.run(["callgrind_control", "--zero", pid], check=True, capture_output=True)
            (r,), _ = client_bench.run_all([proc], "pushpull_lat", SIZE, args.seconds)
            subprocess.run(["callgrind_control", "--dump=window", pid], check=True,
                           capture_output=True)
            ops = r["ops"] + 2  # Measure's two warm-up calls are in the window too.
            threads = thread_totals(f"{work}/{name}.cg.{pid}.1")
            doc["workers"][name] = {"ops": ops, "threads": [round(t / ops) for t in threads]}
        for proc in workers.values():
            proc.send("quit")
    finally:
        bench.stop_all()
    cpp, py = doc["workers"]["cpp"]["threads"][0], doc["workers"]["python"]["threads"][0]
    doc["results"] = [{
        "name": "instructions/python/pushpull/w1s1/4KiB/calling_thread", "value": py,
        "unit": "instructions/op",
        "yardstick": "instructions/cpp/pushpull/w1s1/4KiB/calling_thread",
        "yardstick_value": cpp, "ratio": round(py / cpp, 3), "better": "lower"}]
    print(json.dumps(doc))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
