"""Fixtures of the relaxps Python tests: a job of the built binaries.

RELAXPS_BIN_DIR names the folder of relaxps-coordinator and relaxps-server
(ctest sets it, and PYTHONPATH to the build tree's python/ folder). Every
process a test starts is stopped by the fixture's finalizer, failed test or
not; every endpoint is tcp://127.0.0.1 with an OS-chosen port.
"""
import os
import re
import signal
import subprocess
import tempfile
import time

import pytest

BIN_DIR = os.environ.get("RELAXPS_BIN_DIR", "")
# Sanitizer and loaded-machine builds stretch waits (as test::TimeScale()).
TIME_SCALE = float(os.environ.get("RELAXPS_TEST_TIME_SCALE", "1"))


def _wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s * TIME_SCALE
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"{what} within {timeout_s * TIME_SCALE:.0f} s")


class Cluster:
    """A coordinator and `servers` servers; kill_server() / stop() them."""

    def __init__(self, tmp, servers=1, workers=0, consistency="async", coordinator_args=()):
        if not BIN_DIR or not os.path.exists(os.path.join(BIN_DIR, "relaxps-server")):
            raise RuntimeError(f"RELAXPS_BIN_DIR ({BIN_DIR!r}) has no relaxps-server")
        self.tmp = tmp
        self.procs = []
        self.servers = []
        try:
            self._start_all(servers, workers, consistency, coordinator_args)
        except BaseException:
            self.stop()
            raise

    def _start_all(self, servers, workers, consistency, coordinator_args):
        tmp = self.tmp
        endpoint_file = os.path.join(tmp, "coordinator.endpoint")
        args = [f"--endpoint_file={endpoint_file}", f"--num_servers={servers}",
                f"--consistency={consistency}", "--exit_when_done=false"]
        if workers:
            args.append(f"--num_workers={workers}")
        self.coordinator_proc = self._start("coordinator", "relaxps-coordinator",
                                            args + list(coordinator_args))
        self.endpoint = _wait_for(
            lambda: self._read(endpoint_file) or self._alive(self.coordinator_proc),
            20, "coordinator endpoint")
        for i in range(servers):
            self.servers.append(self._start_server(i))

    def _read(self, path):
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return ""

    def _alive(self, proc):
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        return ""

    def _start(self, name, binary, args):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        proc = subprocess.Popen([os.path.join(BIN_DIR, binary)] + args,
                                stdout=log, stderr=subprocess.STDOUT)
        log.close()
        proc.log_path = os.path.join(self.tmp, name + ".log")
        self.procs.append(proc)
        return proc

    def _start_server(self, i):
        proc = self._start(f"server-{i}", "relaxps-server",
                           [f"--coordinator={self.endpoint}", f"--server_id={i}",
                            "--store=memory"])
        _wait_for(lambda: re.search(r"listening on", self._read(proc.log_path))
                  or self._alive(proc), 30, f"server {i} listening")
        return proc

    def kill_server(self, i):
        self.servers[i].kill()
        self.servers[i].wait()

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)  # a test may have stopped it
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def make_cluster():
    """make_cluster(servers=1, workers=0, consistency="async") -> Cluster."""
    made = []
    tmp = tempfile.TemporaryDirectory(prefix="relaxps-py-")

    def make(**kwargs):
        sub = tempfile.mkdtemp(dir=tmp.name)
        cluster = Cluster(sub, **kwargs)  # Stops what it started if it fails.
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for c in made:
            c.stop()
        tmp.cleanup()


@pytest.fixture
def cluster(make_cluster):
    """One coordinator and one server, async."""
    return make_cluster(servers=1)
