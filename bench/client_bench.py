#!/usr/bin/python3
"""The data path through the public client API and the Python module, every
process separate, each figure next to a bare ZeroMQ echo between processes.

    bench/client_bench.py --bin=build/bin --pythonpath=build/python [--quick]

Starts (and stops) two echo servers (relaxps-bench-client --role=echo_server)
and two relaxps jobs of memory-store servers: A (1 server) and B (2 servers),
async consistency. Workers are long-lived processes that take commands on
stdin: relaxps-bench-client --role=worker (the public C++ API, linking only
librelaxps_client.so), bench/client_bench_py.py (the Python module) and echo
clients (relaxps-bench-client --role=echo_client). Each round measures, one
at a time and always the echo right before the relaxps figure it is the
yardstick of:
  w1s1  16 MiB push then pull (C++, Python) vs a 16 MiB echo;
        1 MiB PushPull vs a 1 MiB echo;
        4 KiB PushPull p50 latency (C++, Python) vs the 4 KiB echo's p50;
  w2s2  16 MiB push then pull, both workers at once, vs two echo clients at
        once, each to both echo servers (its total GB/s);
with each process's CPU seconds and minor page faults per GB moved (the
workers count their own with getrusage; the servers' are read from /proc
around the figure). The 16 MiB figures' rounds start once the workers'
memory for received messages has stopped growing (settle(): windows of the
same operation until no worker faults more than 50 per GB in two in a row,
at most 3 per round); what that took is reported as "settle" (in the document and on
the figures' client_faults_per_gb). A figure's value is the median over the rounds, its ratio
the median of the per-round ratios, and its spread max/min over the rounds
(next to the echo's own spread).

Prints one JSON document: {"bench":"client","load_avg":[..],"results":[{name,
value, unit, yardstick, yardstick_value, ratio, better, spread, ...}]}.
"""
import argparse
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20


class Proc:
    """A process of the benchmark, killed (TERM, then KILL) by stop()."""

    def __init__(self, argv, log, env=None, commands=False):
        self.argv = argv
        self.log = open(log, "w")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE if commands else subprocess.DEVNULL,
                                  stdout=subprocess.PIPE if commands else self.log,
                                  stderr=self.log, env=env, text=True, bufsize=1)

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def reply(self, timeout_s=120):
        ready, _, _ = select.select([self.p.stdout], [], [], timeout_s)
        if not ready:
            raise RuntimeError(f"{self.argv[0]}: no answer within {timeout_s} s")
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.argv[0]} exited (rc {self.p.poll()}); see {self.log.name}")
        return json.loads(line)

    def stop(self):
        if self.p.poll() is None:
            try:
                if self.p.stdin:
                    self.p.stdin.close()
            except OSError:
                pass
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(3)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def proc_usage(pid):
    """(CPU seconds, minor faults) of a process so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    # Fields after the command: state(3) ... minflt(10) ... utime(14) stime(15).
    return (int(fields[11]) + int(fields[12])) / tick, int(fields[7])


def wait_file(path, proc, timeout_s=20):
    end = time.time() + timeout_s
    while time.time() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path) as f:
                return f.read().strip()
        if proc.p.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"{proc.argv[0]} wrote no {path}; see {proc.log.name}")


class Bench:
    def __init__(self, args, work):
        self.args = args
        self.work = work
        self.procs = []

    def start(self, name, argv, commands=False, env=None):
        p = Proc(argv, os.path.join(self.work, name + ".log"), env=env, commands=commands)
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in reversed(self.procs):
            p.stop()

    def job(self, name, servers):
        b = self.args.bin
        ep_file = os.path.join(self.work, name + ".coordinator")
        coord = self.start(name + "-coordinator", [
            f"{b}/relaxps-coordinator", "--bind=tcp://127.0.0.1:*", f"--endpoint_file={ep_file}",
            f"--num_servers={servers}", "--consistency=async", "--exit_when_done=false"])
        ep = wait_file(ep_file, coord)
        pids = []
        for i in range(servers):
            s = self.start(f"{name}-server{i}", [
                f"{b}/relaxps-server", f"--coordinator={ep}", f"--server_id={i}", "--store=memory"])
            pids.append(s.p.pid)
        return ep, pids

    def echo_server(self, name):
        ep_file = os.path.join(self.work, name + ".endpoint")
        p = self.start(name, [f"{self.args.bin}/relaxps-bench-client", "--role=echo_server",
                              f"--endpoint_file={ep_file}"])
        return wait_file(ep_file, p), p.p.pid


def run_all(procs, op, nbytes, seconds, servers=()):
    """Runs one command on every process at once; returns their answers and
    the servers' (CPU s, faults) over the figure."""
    before = [proc_usage(pid) for pid in servers]
    for p in procs:
        p.send(f"run {op} {nbytes} {seconds}")
    out = [p.reply() for p in procs]
    after = [proc_usage(pid) for pid in servers]
    for r in out:
        if "error" in r:
            raise RuntimeError(f"{op} {nbytes}: {r['error']}")
    return out, [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before)]


# A window in which no process faulted more than this per GB it moved (or
# served) counts as settled.
SETTLED_FAULTS_PER_GB = 50


def settle(procs, op, nbytes, seconds, servers, max_windows):
    """Runs windows of `op` until two in a row in which every worker faulted
    at most SETTLED_FAULTS_PER_GB (at most `max_windows`). Returns the
    windows run, whether the last two settled, and each worker's and
    server's faults over them. (The servers settle in the same windows; one that faults later
    only lowers the client/server ratio.)

    A process's memory for received messages is ZeroMQ's: its I/O thread
    mallocs each incoming frame from that thread's glibc arena. The arena
    grows (pages touched for the first time) until it holds the most bytes
    received and not yet read, which happens when a reader was descheduled
    while a whole 16 MiB pull arrived: a few thousand faults in a process's
    first seconds of traffic, whenever they happen, then none. A window
    taken while that lasts measures when it happened, not a rate; the rounds
    start after it. (Faults that recur, such as the arena's top trimmed and
    faulted in again, stay in every window: docs/benchmarks.md, issue 41.)
    """
    client_faults = [0] * len(procs)
    server_faults = [0] * len(servers)
    windows, calm = 0, 0  # Windows run; settled windows in a row.
    while windows < max_windows and calm < 2:
        out, srv = run_all(procs, op, nbytes, seconds, servers)
        windows += 1
        rates = [per_gb(r["minflt"], r["moved_bytes"]) for r in out]
        calm = calm + 1 if all(x is not None and x <= SETTLED_FAULTS_PER_GB
                               for x in rates) else 0
        client_faults = [a + r["minflt"] for a, r in zip(client_faults, out)]
        server_faults = [a + s[1] for a, s in zip(server_faults, srv)]
    return {"windows": windows, "settled": calm >= 2, "client_faults": client_faults,
            "server_faults": server_faults}


def total_gbps(rs):
    return sum(r["gbps"] for r in rs)


def per_gb(count, moved_bytes):
    return count / (moved_bytes / 1e9) if moved_bytes else None


def served(r):
    """Bytes a worker moved while a server was watched: its warm-up and its
    timed window (the servers' usage is read around both)."""
    return r["moved_bytes"] + r.get("warmup_moved_bytes", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="directory of the relaxps binaries")
    ap.add_argument("--pythonpath", default="",
                    help="directory holding the relaxps Python module (empty: no Python figures)")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 0.3 s windows")
    ap.add_argument("--rounds", type=int, default=0, help="rounds (default 5, --quick 3)")
    ap.add_argument("--seconds", type=float, default=0, help="window per figure (default 0.6 s, "
                    "--quick 0.3)")
    args = ap.parse_args()
    rounds = args.rounds or (3 if args.quick else 5)
    seconds = args.seconds or (0.3 if args.quick else 0.6)
    work = tempfile.mkdtemp(prefix="relaxps-client-bench.")
    bench = Bench(args, work)
    samples = {}  # figure name -> list of per-round dicts

    def add(name, **kw):
        samples.setdefault(name, []).append(kw)

    python = None
    settled = {}  # figure -> what settle() returned
    try:
        (e0, e0_pid), (e1, e1_pid) = bench.echo_server("echo0"), bench.echo_server("echo1")
        a_ep, a_servers = bench.job("a", 1)
        b_ep, b_servers = bench.job("b", 2)
        cli = f"{args.bin}/relaxps-bench-client"
        echo_a = bench.start("echo-a", [cli, "--role=echo_client", f"--echo={e0}"], True)
        echo_b = [bench.start(f"echo-b{i}", [cli, "--role=echo_client", f"--echo={e0},{e1}"], True)
                  for i in range(2)]
        cpp_a = bench.start("cpp-a", [cli, "--role=worker", f"--coordinator={a_ep}",
                                      "--table_prefix=cpp"], True)
        cpp_b = [bench.start(f"cpp-b{i}", [cli, "--role=worker", f"--coordinator={b_ep}",
                                           "--table_prefix=w2s2"], True) for i in range(2)]
        if args.pythonpath:
            env = dict(os.environ, PYTHONPATH=args.pythonpath)
            python = bench.start("py-a", [
                "/usr/bin/python3", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "client_bench_py.py"),
                f"--coordinator={a_ep}", "--table_prefix=py"], True, env=env)
        big = 16 * MIB
        # Tables created and buffers warmed before the rounds: the first
        # round's figures (the servers' faults above all) would otherwise
        # include each table's creation.
        warm = 0.01
        run_all([cpp_a], "pushpull", MIB, warm)
        run_all([cpp_a], "pushpull_lat", 4096, warm)
        if python:
            run_all([python], "pushpull_lat", 4096, warm)
        # The 16 MiB figures run until every process's receive memory has
        # stopped growing (settle()): their page faults are a steady rate.
        settle_windows = max(4, 3 * rounds)
        settled["w1s1"] = settle([cpp_a], "push_then_pull", big, seconds, a_servers,
                                 settle_windows)
        settled["w2s2"] = settle(cpp_b, "push_then_pull", big, seconds, b_servers,
                                 settle_windows)
        if python:
            settled["python"] = settle([python], "push_then_pull", big, seconds, a_servers,
                                       settle_windows)
        for _ in range(rounds):
            # w1s1, 16 MiB.
            (echo,), (esrv,) = run_all([echo_a], "pushpull", big, seconds, [e0_pid])
            (cpp,), (srv,) = run_all([cpp_a], "push_then_pull", big, seconds, a_servers)
            add("w1s1/16MiB/push_then_pull", cpp=cpp, echo=echo, server=srv, echo_server=esrv)
            if python:
                (py,), _ = run_all([python], "push_then_pull", big, seconds)
                add("w1s1/16MiB/push_then_pull/python", cpp=cpp, py=py)
            # w1s1, 1 MiB PushPull.
            (echo,), _ = run_all([echo_a], "pushpull", MIB, seconds)
            (cpp,), _ = run_all([cpp_a], "pushpull", MIB, seconds)
            add("w1s1/1MiB/pushpull", cpp=cpp, echo=echo)
            # w1s1, 4 KiB PushPull latency.
            (echo,), _ = run_all([echo_a], "pushpull_lat", 4096, seconds)
            (cpp,), _ = run_all([cpp_a], "pushpull_lat", 4096, seconds)
            add("w1s1/4KiB/pushpull_lat", cpp=cpp, echo=echo)
            if python:
                (py,), _ = run_all([python], "pushpull_lat", 4096, seconds)
                add("w1s1/4KiB/pushpull_lat/python", cpp=cpp, py=py)
            # w2s2, 16 MiB: both workers at once.
            echos, esrvs = run_all(echo_b, "pushpull", big, seconds, [e0_pid, e1_pid])
            cpps, srvs = run_all(cpp_b, "push_then_pull", big, seconds, b_servers)
            add("w2s2/16MiB/push_then_pull", cpp=cpps, echo=echos, server=srvs,
                echo_server=esrvs)
        for p in [echo_a, *echo_b, cpp_a, *cpp_b] + ([python] if python else []):
            p.send("quit")
    finally:
        bench.stop_all()
    results = summarize(samples, rounds)
    for r in results:
        # What the settling cost, next to the steady rate it leads to.
        for key, fig_name in (("w1s1", "w1s1/16MiB/client_faults_per_gb"),
                              ("w2s2", "w2s2/16MiB/client_faults_per_gb")):
            if r["name"].endswith(fig_name) and key in settled:
                r["settle"] = settled[key]
    doc = {"bench": "client", "rounds": rounds, "seconds": seconds,
           "load_avg": list(os.getloadavg()), "settle": settled, "results": results}
    print(json.dumps(doc, indent=1))
    shutil.rmtree(work, ignore_errors=True)


def fig(name, value, unit, yardstick, yardstick_value, ratio, better="higher", **extra):
    f = {"name": name, "value": value, "unit": unit, "yardstick": yardstick,
         "yardstick_value": yardstick_value, "ratio": ratio, "better": better}
    f.update(extra)
    return f


def spread(values):
    values = [v for v in values if v]
    return max(values) / min(values) if values else None


def summarize(samples, rounds):
    med = statistics.median
    out = []
    pre = "client/dense"
    rs = samples.get("w1s1/16MiB/push_then_pull", [])
    if rs:
        v = [r["cpp"]["gbps"] for r in rs]
        e = [r["echo"]["gbps"] for r in rs]
        name = f"{pre}/push_then_pull/w1s1/16MiB"
        out.append(fig(name + "/gbps", med(v), "GB/s", "client/echo/w1s1/16MiB/gbps", med(e),
                       med([a / b for a, b in zip(v, e)]), spread=spread(v), echo_spread=spread(e),
                       per_round=v, echo_per_round=e,
                       ms_per_op=1e3 / med([r["cpp"]["ops"] / r["cpp"]["seconds"] for r in rs]),
                       echo_ms_per_op=1e3 / med([r["echo"]["ops"] / r["echo"]["seconds"]
                                                 for r in rs])))
        out.append(fig(name + "/spread", spread(v), "max/min", "client/echo/w1s1/16MiB/spread",
                       spread(e), spread(v) / spread(e) if spread(e) else None, "lower"))
        cf = [per_gb(r["cpp"]["minflt"], r["cpp"]["moved_bytes"]) for r in rs]
        sf = [per_gb(r["server"][1], served(r["cpp"])) for r in rs]
        out.append(fig(name + "/client_faults_per_gb", med(cf), "faults/GB",
                       name + "/server_faults_per_gb", med(sf), None, "lower"))
        out.append(fig(name + "/client_cpu_s_per_gb",
                       med([per_gb(r["cpp"]["cpu_s"], r["cpp"]["moved_bytes"]) for r in rs]),
                       "CPU s/GB", "client/echo/w1s1/16MiB/client_cpu_s_per_gb",
                       med([per_gb(r["echo"]["cpu_s"], r["echo"]["moved_bytes"]) for r in rs]),
                       None, "lower",
                       server_cpu_s_per_gb=med([per_gb(r["server"][0], served(r["cpp"]))
                                                for r in rs]),
                       echo_server_cpu_s_per_gb=med([per_gb(r["echo_server"][0],
                                                            served(r["echo"]))
                                                     for r in rs])))
    rs = samples.get("w1s1/1MiB/pushpull", [])
    if rs:
        v = [r["cpp"]["gbps"] for r in rs]
        e = [r["echo"]["gbps"] for r in rs]
        out.append(fig(f"{pre}/pushpull/w1s1/1MiB/gbps", med(v), "GB/s",
                       "client/echo/w1s1/1MiB/gbps", med(e), med([a / b for a, b in zip(v, e)]),
                       spread=spread(v), echo_spread=spread(e),
                       client_faults_per_gb=med([per_gb(r["cpp"]["minflt"],
                                                        r["cpp"]["moved_bytes"]) for r in rs])))
    rs = samples.get("w1s1/4KiB/pushpull_lat", [])
    if rs:
        v = [r["cpp"]["p50_us"] for r in rs]
        e = [r["echo"]["p50_us"] for r in rs]
        out.append(fig(f"{pre}/pushpull/w1s1/4KiB/p50_us", med(v), "us",
                       "client/echo/w1s1/4KiB/p50_us", med(e),
                       med([a / b for a, b in zip(v, e)]), "lower", spread=spread(v),
                       echo_spread=spread(e)))
    rs = samples.get("w1s1/16MiB/push_then_pull/python", [])
    if rs:
        v = [r["py"]["gbps"] for r in rs]
        c = [r["cpp"]["gbps"] for r in rs]
        out.append(fig(f"{pre}/push_then_pull/w1s1/16MiB/python_vs_cpp", med(v), "GB/s",
                       f"{pre}/push_then_pull/w1s1/16MiB/gbps", med(c),
                       med([a / b for a, b in zip(v, c)]),
                       python_faults_per_gb=med([per_gb(r["py"]["minflt"], r["py"]["moved_bytes"])
                                                 for r in rs])))
    rs = samples.get("w1s1/4KiB/pushpull_lat/python", [])
    if rs:
        v = [r["py"]["p50_us"] for r in rs]
        c = [r["cpp"]["p50_us"] for r in rs]
        # C++ p50 over Python p50: 1.0 when the module adds nothing.
        out.append(fig(f"{pre}/pushpull/w1s1/4KiB/python_vs_cpp", med(v), "us",
                       f"{pre}/pushpull/w1s1/4KiB/p50_us", med(c),
                       med([b / a for a, b in zip(v, c)]), "higher",
                       note="ratio = C++ p50 / Python p50"))
    rs = samples.get("w2s2/16MiB/push_then_pull", [])
    if rs:
        v = [total_gbps(r["cpp"]) for r in rs]
        e = [total_gbps(r["echo"]) for r in rs]
        name = f"{pre}/push_then_pull/w2s2/16MiB"
        out.append(fig(name + "/gbps", med(v), "GB/s", "client/echo/w2s2/16MiB/gbps", med(e),
                       med([a / b for a, b in zip(v, e)]), spread=spread(v),
                       echo_spread=spread(e), per_round=v, echo_per_round=e))
        out.append(fig(name + "/spread", spread(v), "max/min", "client/echo/w2s2/16MiB/spread",
                       spread(e), spread(v) / spread(e) if spread(e) else None, "lower"))
        moved = [sum(served(c) for c in r["cpp"]) for r in rs]
        # Each client's faults per GB it moved; each server's per GB it
        # served (half of the total with two servers).
        cf = [statistics.mean(per_gb(c["minflt"], c["moved_bytes"]) for c in r["cpp"])
              for r in rs]
        sf = [statistics.mean(per_gb(s[1], m / len(r["server"])) for s in r["server"])
              for r, m in zip(rs, moved)]
        # A fault per GB added to both sides: a server that faults not at all
        # leaves the ratio finite (client faults per GB + 1).
        out.append(fig(name + "/client_faults_per_gb", med(cf), "faults/GB",
                       name + "/server_faults_per_gb", med(sf),
                       (med(cf) + 1) / (med(sf) + 1), "lower",
                       note="ratio = (client + 1) / (server + 1) faults per GB",
                       per_round=cf, server_per_round=sf,
                       client_faults_per_round=[[c["minflt"] for c in r["cpp"]] for r in rs]))
        cc = [statistics.mean(per_gb(c["cpu_s"], c["moved_bytes"]) for c in r["cpp"]) for r in rs]
        sc = [statistics.mean(per_gb(s[0], m / len(r["server"])) for s in r["server"])
              for r, m in zip(rs, moved)]
        ec = [statistics.mean(per_gb(c["cpu_s"], c["moved_bytes"]) for c in r["echo"]) for r in rs]
        esc = [statistics.mean(per_gb(s[0], sum(served(c) for c in r["echo"]) /
                                      len(r["echo_server"])) for s in r["echo_server"])
               for r in rs]
        out.append(fig(name + "/client_cpu_s_per_gb", med(cc), "CPU s/GB",
                       "client/echo/w2s2/16MiB/client_cpu_s_per_gb", med(ec),
                       med(cc) / med(ec) if med(ec) else None, "lower",
                       server_cpu_s_per_gb=med(sc), echo_server_cpu_s_per_gb=med(esc)))
    return out


if __name__ == "__main__":
    sys.exit(main())
