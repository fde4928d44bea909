#!/usr/bin/python3
"""Where the cnn job's time goes under CURVE: a 1-server 1-worker async cnn job,
plain and under --security=curve alternated twice, each printing samples/s and
the CPU seconds of the worker (wait4) and the server (/proc, over the worker's
life), as CPU ms per step (batch 32) and cores used.

    bench/curve_cnn_cpu.py [--bin=build/bin] [--duration_s=15]

One JSON line per run. The worker's CPU includes its start (dataset load),
the same in both. docs/benchmarks.md, issue 41."""
import argparse, os, subprocess, sys, time, tempfile, signal, re, json, shutil
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--bin", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin"))
ap.add_argument("--duration_s", type=float, default=15)
args = ap.parse_args()
B = args.bin
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def run(curve, dur):
    d = tempfile.mkdtemp(prefix="cv.")
    sec = []
    if curve:
        subprocess.run([f"{B}/relaxps-ctl", "keygen", f"{d}/keys", "--servers=1", "--workers=1"], check=True, capture_output=True)
        sec = ["--security=curve", f"--keys_dir={d}/keys"]
    log = lambda n: open(f"{d}/{n}.log", "w")
    c = subprocess.Popen([f"{B}/relaxps-coordinator", "--bind=tcp://127.0.0.1:*", f"--endpoint_file={d}/ep", "--num_servers=1", "--num_workers=1", "--exit_when_done=false", "--consistency=async"] + sec, stdout=log("c"), stderr=subprocess.STDOUT)
    while not (os.path.exists(f"{d}/ep") and os.path.getsize(f"{d}/ep")): time.sleep(0.05)
    ep = open(f"{d}/ep").read().strip()
    s = subprocess.Popen([f"{B}/relaxps-server", f"--coordinator={ep}", "--server_id=0"] + sec, stdout=log("s"), stderr=subprocess.STDOUT)
    wsec = sec + (["--worker_id=0"] if curve else [])
    w = subprocess.Popen([f"{B}/relaxps-worker", f"--coordinator={ep}", "--model=cnn", "--num_workers=1", "--worker_index=0", f"--duration_s={dur}", "--eval_every_s=0", "--final_eval=false", "--log_every_s=5", "--seed=1"] + wsec, stdout=log("w"), stderr=subprocess.STDOUT)
    s0 = cpu(s.pid)
    _, st, ru = os.wait4(w.pid, 0)
    s1 = cpu(s.pid); c1 = cpu(c.pid)
    for p in (s, c): p.send_signal(signal.SIGTERM)
    for p in (s, c): p.wait()
    text = open(f"{d}/w.log").read()
    found = re.findall(r"samples_per_s[=:]\s*([0-9.]+)", text)
    if st != 0 or not found:
        sys.exit(f"curve_cnn_cpu: the worker failed (status {st}); see {d}/w.log")
    sps = float(found[-1])
    wcpu = ru.ru_utime + ru.ru_stime
    return dict(curve=curve, samples_per_s=sps, worker_cpu_s=round(wcpu, 2), server_cpu_s=round(s1 - s0, 2), coord_cpu_s=c1, dur=dur, dir=d)
dur = args.duration_s
for curve in (False, True, False, True):
    r = run(curve, dur)
    samples = r["samples_per_s"] * dur
    r["cpu_ms_per_step"] = round(1e3 * (r["worker_cpu_s"] + r["server_cpu_s"]) / (samples / 32), 2)
    r["cores_used"] = round((r["worker_cpu_s"] + r["server_cpu_s"]) / dur, 2)
    shutil.rmtree(r.pop("dir"), ignore_errors=True)
    print(json.dumps(r), flush=True)
