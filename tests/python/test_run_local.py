"""examples/pytorch_cnn.py as scripts/run_local.sh's --trainer: a short job of
2 Python workers and 2 servers that loses a server and rides through it
(--recovery=checkpoint restarts it from its checkpoint), reported like the
C++ worker: progress and final lines, metrics CSVs, events (the launcher's
summary.json: final accuracy, finals, the restart) and events.csv."""
import csv
import json
import os
import re
import subprocess
import tempfile

from conftest import BIN_DIR, TIME_SCALE

SOURCE = os.environ.get("RELAXPS_SOURCE_DIR",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def run_local(out_dir, *flags, timeout_s=240):
    env = dict(os.environ, RELAXPS_SKIP_BUILD="1", RELAXPS_BIN=BIN_DIR,
               RELAXPS_PYTHONPATH=os.environ["PYTHONPATH"].split(":")[0])
    cmd = [os.path.join(SOURCE, "scripts", "run_local.sh"),
           "--trainer=" + os.path.join(SOURCE, "examples", "pytorch_cnn.py"),
           f"--out_dir={out_dir}"] + list(flags)
    # run_local.sh stops every process it started on any exit, SIGTERM included.
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, timeout=timeout_s * TIME_SCALE)


def test_two_python_workers_ride_through_a_killed_server():
    with tempfile.TemporaryDirectory(prefix="relaxps-run-") as out:
        # The kill comes 25 s after the launch, the workers' end 30 s after
        # their own start: so even a slow start (importing torch on a loaded
        # machine) leaves rows on both sides of it.
        r = run_local(out, "--workers=2", "--servers=2", "--duration_s=30",
                      "--recovery=checkpoint", "--checkpoint_every_s=2", "--kill_server=1@25",
                      "--eval_every_s=10", "--eval_examples=1000", "--log_every_s=2")
        print(r.stdout)
        assert r.returncode == 0, r.stdout
        # What the launcher read from the trainers' events (--events_file).
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        assert summary["verdict"] == "done", summary["reason"]
        assert summary["final_accuracy"] > 0.5, summary
        finals = summary["workers"]
        assert sorted(w["worker"] for w in finals) == [0, 1], finals
        assert all(w["samples"] > 0 and not w["stopped"] for w in finals), finals
        assert [r["process"] for r in summary["restarts"]] == ["server-1"], summary["restarts"]
        with open(os.path.join(out, "events.csv")) as f:
            events = [row["event"] for row in csv.DictReader(f)]
        assert events[:3] == ["kill", "down", "restart"], events
        with open(os.path.join(out, "start_unix")) as f:
            launched = float(f.read())
        restart_unix = launched + float(next(r for r in csv.DictReader(
            open(os.path.join(out, "events.csv"))) if r["event"] == "restart")["time_s"])
        for w in ("0", "1"):
            with open(os.path.join(out, f"worker-{w}.log")) as f:
                started = float(re.search(r"start_unix=([0-9.]+)", f.read()).group(1))
            with open(os.path.join(out, f"worker-{w}.csv")) as f:
                rows = list(csv.DictReader(f))
            times = [started + float(r["time_s"]) for r in rows]
            # Training on both sides of the server's restart.
            before = [r for r, t in zip(rows, times) if t < restart_unix]
            after = [r for r, t in zip(rows, times) if t > restart_unix]
            assert before and after, (restart_unix, times)
            assert int(after[-1]["samples"]) > int(before[-1]["samples"]), rows
            assert float(rows[-1]["loss"]) < float(rows[0]["loss"]), rows
            assert int(rows[-1]["bytes_sent"]) > 0
        with open(os.path.join(out, "worker-1.log")) as f:
            assert "moved to" in f.read(), "worker 1 did not resend to the restarted server"


def test_bad_flags_exit_2_and_a_dead_coordinator_exits_3():
    trainer = os.path.join(SOURCE, "examples", "pytorch_cnn.py")
    r = subprocess.run(["/usr/bin/python3", trainer, "--local", "--batch=0"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 2 and "--batch" in r.stdout, r.stdout
    r = subprocess.run(["/usr/bin/python3", trainer, "--coordinator=tcp://127.0.0.1:9",
                        "--request_timeout_ms=500"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 3, r.stdout
    assert re.search(r"^error worker=-1 code=(Unavailable|DeadlineExceeded) exit=3$", r.stdout,
                     re.M), r.stdout
