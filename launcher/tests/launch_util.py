"""Shared by the launcher's tests: where the binaries are, running
relaxps-launch on a spec, and the /proc check for a job tag."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(HERE, "..")
sys.path.insert(0, LAUNCHER)
SOURCE = os.environ.get("RELAXPS_SOURCE_DIR", os.path.join(LAUNCHER, ".."))
BIN = os.environ.get("RELAXPS_BIN_DIR", os.path.join(SOURCE, "build", "bin"))
ENTRY = os.path.join(LAUNCHER, "relaxps-launch")
SCALE = int(os.environ.get("RELAXPS_TEST_TIME_SCALE", "1"))

from relaxps_launch import proctools  # noqa: E402

# Workers that train the small model quickly and report often.
WORKER_FLAGS = ["--eval_every_s=0", "--log_every_s=0.5"]


def spec(**kw):
    s = {"model": "mlp", "duration_s": 8 * SCALE, "progress_s": 2,
         "servers": {"count": 2}, "workers": {"count": 2, "flags": list(WORKER_FLAGS)}}
    s.update(kw)
    return s


def tempdir(prefix):
    """A temporary folder removed when the test process exits
    (RELAXPS_KEEP_TEST_DIRS=1 keeps it for a look)."""
    d = tempfile.mkdtemp(prefix=prefix)
    if os.environ.get("RELAXPS_KEEP_TEST_DIRS") != "1":
        atexit.register(shutil.rmtree, d, True)
    return d


class Run:
    def __init__(self, spec_obj, *args, tag=None):
        self.dir = tempdir("relaxps-launch-test-")
        self.spec_path = os.path.join(self.dir, "job.json")
        with open(self.spec_path, "w") as f:
            json.dump(spec_obj, f)
        self.out = os.path.join(self.dir, "run")
        self.tag = tag or f"launchtest-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
        self.argv = [ENTRY, self.spec_path, f"--bin={BIN}", f"--out_dir={self.out}",
                     f"--tag={self.tag}"] + list(args)

    def run(self, timeout=100):
        r = subprocess.run(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout * SCALE)
        self.output = r.stdout
        return r.returncode

    def start(self):
        self.log = open(os.path.join(self.dir, "launch.out"), "w")
        return subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)

    def summary(self):
        with open(os.path.join(self.out, "summary.json")) as f:
            return json.load(f)

    def left(self):
        return proctools.tagged(self.tag)

    def events_of(self, process, kind):
        """The `kind` events of `process` in the merged events.jsonl, in order."""
        with open(os.path.join(self.out, "events.jsonl")) as f:
            events = [json.loads(line) for line in f if line.strip()]
        return [e for e in events if e.get("process") == process and e.get("kind") == kind]


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s * SCALE
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s * SCALE} s waiting for {what}")
