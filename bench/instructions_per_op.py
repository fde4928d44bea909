#!/usr/bin/python3
"""Instructions per 4 KiB PushPull on the application threads, against the echo.

The 4 KiB figures of relaxps-bench-ps swing by 20-40% between runs on a
shared 2-core host, so a change worth a few percent cannot be seen in them.
This counts instead: it runs relaxps-bench-ps under Valgrind's callgrind
(which executes the threads one at a time and counts every user-space
instruction) for one 4 KiB PushPull in flight and its echo yardstick, and
divides each thread's instructions by the operations that thread served:

  relaxps server thread  (RpcServer::Run)       / DenseShardState::PushPull calls
  relaxps client thread  (the bench's driver)   / DataPath::Dense calls
  echo server thread     (EchoServer::Loop)     / zmq_msg_send calls / 2 (identity + payload)
  echo client thread     (RunEcho's client)     / zmq_msg_send calls (one frame per request)

ZeroMQ's I/O threads and the kernel are left out: they do the same work for
both (docs/benchmarks.md, the system-call counts of the earlier stops), and
callgrind sees no kernel time. The figures are instruction counts, not time:
a cache miss or a context switch costs no instruction. Setup (the cluster,
the table) is in the totals: under a hundred instructions per operation in
the default run (about 3,000 operations; a run half as long counts about
150 more per operation on the server).

Prints one JSON document (bench.sh's "instructions" section; merged like the
other benches). Without valgrind it prints the document with "skipped" set
and no figures.

  bench/instructions_per_op.py [--bin=build/bin] [--seconds=4] [--keep=DIR]
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SIZE = 4096
NAME = "instructions/dense/pushpull/w1s1/4KiB/if1"
ECHO = "instructions/zmq_echo/zerocopy/w1s1/4KiB/if1"


def parse_thread(path):
    """Returns (total instructions, {function name: calls into it}, {function names})."""
    names = {}  # Compressed id -> name.
    calls = {}
    functions = set()
    total = 0
    pending_callee = None

    def resolve(spec):
        m = re.match(r"\((\d+)\)(?: (.*))?$", spec)
        if not m:
            return spec
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), spec)

    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("fn="):
                functions.add(resolve(line[3:].rstrip("\n")))
            elif line.startswith("cfn="):
                pending_callee = resolve(line[4:].rstrip("\n"))
            elif line.startswith("calls=") and pending_callee is not None:
                n = int(line[6:].split()[0])
                calls[pending_callee] = calls.get(pending_callee, 0) + n
                pending_callee = None
            elif line.startswith("summary:") or line.startswith("totals:"):
                total = max(total, int(line.split(":", 1)[1].split()[0]))
    return total, calls, functions


def calls_to(calls, prefix):
    return sum(n for name, n in calls.items() if name.startswith(prefix))


def has(functions, needle):
    return any(needle in f for f in functions)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--bin", default=os.environ.get("BIN", os.path.join(root, "build", "bin")))
    ap.add_argument("--seconds", type=float, default=4.0,
                    help="time box of each measurement (wall seconds under callgrind)")
    ap.add_argument("--keep", default="", help="keep the callgrind files in this folder")
    args = ap.parse_args()

    doc = {"bench": "instructions", "size_bytes": SIZE, "in_flight": 1, "results": []}
    valgrind = shutil.which("valgrind")
    bench = os.path.join(args.bin, "relaxps-bench-ps")
    if valgrind is None or not os.access(bench, os.X_OK):
        doc["skipped"] = "valgrind not installed" if valgrind is None else bench + " not built"
        print(json.dumps(doc))
        return 0

    work = args.keep or tempfile.mkdtemp(prefix="relaxps-instructions-")
    try:
        return measure(args, valgrind, bench, work, doc)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def measure(args, valgrind, bench, work, doc):
    os.makedirs(work, exist_ok=True)
    for old in glob.glob(os.path.join(work, "cg.out*")):
        os.remove(old)
    cmd = [valgrind, "--tool=callgrind", "--separate-threads=yes",
           "--callgrind-out-file=" + os.path.join(work, "cg.out"),
           bench, "--configs=1x1", f"--sizes={SIZE}", "--in_flight=1", "--reps=1",
           f"--seconds={args.seconds}", "--sparse=false", "--dense_modes=pushpull",
           "--echo=true", "--logtostderr"]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr[-4000:])
        print(f"instructions_per_op.py: relaxps-bench-ps under callgrind exited with "
              f"{run.returncode}", file=sys.stderr)
        return 1

    # Thread files in creation order: the first echo pair is the 4 KiB echo
    # (the push echo, 4 KiB to 16 bytes, runs after it).
    files = sorted(glob.glob(os.path.join(work, "cg.out-*")),
                   key=lambda p: int(p.rsplit("-", 1)[1]))
    per_op = {}
    for path in files:
        total, calls, functions = parse_thread(path)
        pushpulls = calls_to(calls, "relaxps::server_internal::DenseShardState::PushPull")
        if has(functions, "relaxps::RpcServer::Run") and pushpulls > 0:
            per_op.setdefault("server", (total / pushpulls, pushpulls))
        elif has(functions, "Driver::Step"):
            ops = calls_to(calls, "relaxps::client_internal::DataPath::Dense(")
            if ops > 0:
                per_op.setdefault("client", (total / ops, ops))
        elif has(functions, "EchoServer::Loop"):
            sends = calls_to(calls, "zmq_msg_send")
            if sends > 0:
                per_op.setdefault("echo_server", (total / (sends / 2), sends // 2))
        elif any("RunEcho" in f and "_M_run" in f for f in functions):
            # The client thread RunEcho starts (the main thread only calls
            # RunEcho, and sends requests of its own while setting up).
            sends = calls_to(calls, "zmq_msg_send")
            if sends > 0:
                per_op.setdefault("echo_client", (total / sends, sends))
    missing = [k for k in ("server", "client", "echo_server", "echo_client") if k not in per_op]
    if missing:
        print(f"instructions_per_op.py: no thread found for {', '.join(missing)} in {work}",
              file=sys.stderr)
        return 1

    def fig(what, value, yardstick_value, ops, echo_ops):
        return {"name": f"{NAME}/{what}_instructions_per_op", "value": round(value),
                "unit": "instructions/op", "yardstick": f"{ECHO}/{what}_instructions_per_op",
                "yardstick_value": round(yardstick_value), "ratio": value / yardstick_value,
                "better": "lower", "ops": ops, "yardstick_ops": echo_ops}

    s, c = per_op["server"], per_op["client"]
    es, ec = per_op["echo_server"], per_op["echo_client"]
    doc["results"] = [
        fig("server", s[0], es[0], s[1], es[1]),
        fig("client", c[0], ec[0], c[1], ec[1]),
        fig("app", s[0] + c[0], es[0] + ec[0], min(s[1], c[1]), min(es[1], ec[1])),
    ]
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
