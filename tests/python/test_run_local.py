"""examples/pytorch_cnn.py as scripts/run_local.sh's --trainer: a short job of
2 Python workers and 2 servers that loses a server and rides through it
(--recovery=checkpoint restarts it from its checkpoint), reported like the
C++ worker: progress and final lines, metrics CSVs, events (the launcher's
summary.json: final accuracy, finals, the restart; the client library's own
events; each worker's report of its end) and events.csv."""
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
            rows = list(csv.DictReader(f))
        kinds = [r["event"] for r in rows]
        # The launcher's own rows in order (rows derived from events may
        # come between them on a loaded machine).
        assert [k for k in kinds if k in ("kill", "restart")][:2] == ["kill", "restart"], kinds
        with open(os.path.join(out, "start_unix")) as f:
            launched = float(f.read())
        restart_unix = launched + float(next(r["time_s"] for r in rows if r["event"] == "restart"))
        with open(os.path.join(out, "events.jsonl")) as f:
            events = [json.loads(line) for line in f]
        # Each worker reported its end (report_finished): a goodbye lost on a
        # loaded machine cannot turn the job into workers_lost.
        finished = [e["id"] for e in events if e["kind"] == "member_finished"]
        assert sorted(finished) == [0, 1], finished
        for w in (0, 1):
            mine = [e for e in events if e["process"] == f"worker-{w}"]
            progress = [e for e in mine if e["kind"] == "progress"]
            final = next(e for e in mine if e["kind"] == "final")
            # Its requests to the killed server waited for it (parked), and
            # the first acknowledged one after its restart is in the events.
            parked = [e for e in mine if e["kind"] == "client_request_parked" and e["server"] == 1]
            assert parked and parked[0]["until"] == "restart", mine
            acked = [e for e in mine if e["kind"] == "client_failover_acked" and e["server"] == 1]
            assert acked and acked[0]["ts_unix_ms"] / 1000.0 > restart_unix, (acked, restart_unix)
            # (Same process: its monotonic clock; both may fall in one ms.)
            assert acked[0]["mono_ms"] >= parked[0]["mono_ms"], (parked, acked)
            # It trained after the restart: more samples at the end than at
            # its last progress row before it (whenever its rows came).
            before = [e["samples"] for e in progress if e["ts_unix_ms"] / 1000.0 < restart_unix]
            assert final["samples"] > max(before, default=0), (before, final)
            assert final["acked_updates"] > 0, final
            with open(os.path.join(out, f"worker-{w}.csv")) as f:
                csv_rows = list(csv.DictReader(f))
            assert float(csv_rows[-1]["loss"]) < float(csv_rows[0]["loss"]), csv_rows
            assert int(csv_rows[-1]["bytes_sent"]) > 0


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
