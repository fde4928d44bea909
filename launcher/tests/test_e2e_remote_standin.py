"""The ssh backend's code path without sshd: ssh.command is a stand-in that
runs the remote command line with a local sh. Two "hosts" (each its own
workdir), CurveZMQ keys installed per host, a server kill restarted under
checkpoint and a SIGSTOP/SIGCONT through the watchdog's control channel,
events streamed back; then the launcher killed -9 mid-job: the watchdogs
see their stdin close and stop every process."""
import os
import signal
import time
import unittest

from launch_util import SCALE, Run, spec, tempdir, wait_for

STANDIN = ["sh", "-c", "eval \"$1\"", "{host}"]


def remote_spec(tmp, **kw):
    hosts = [{"name": h, "addr": "127.0.0.1", "bind": "127.0.0.1",
              "workdir": os.path.join(tmp, h)} for h in ("h1", "h2")]
    return spec(backend="ssh", hosts=hosts, ssh={"command": STANDIN}, security="curve",
                coordinator={"hosts": ["h1"], "flags": ["--checkpoint_every_s=1"]},
                servers={"count": 2, "hosts": ["h1", "h2"]},
                workers={"count": 2, "hosts": ["h2"], "flags": ["--eval_every_s=0",
                                                               "--log_every_s=0.5"]}, **kw)


def describe(pids):
    """The command lines of `pids`, for a failure message."""
    lines = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode(errors="replace")
            lines.append(f"{pid}: {argv}")
        except OSError:
            lines.append(f"{pid}: gone")
    return "left running: " + "; ".join(lines)


class RemoteStandinTest(unittest.TestCase):
    def test_job_with_faults_through_the_watchdog(self):
        tmp = tempdir("relaxps-launch-hosts-")
        run = Run(remote_spec(tmp, recovery="checkpoint", duration_s=12 * SCALE,
                              faults=[{"at_s": 4 * SCALE, "action": "kill",
                                       "target": "server-1"},
                                      {"at_s": 7 * SCALE, "action": "stop",
                                       "target": "server-0", "for_s": 1}]))
        code = run.run()
        self.assertEqual(code, 0, run.output)
        s = run.summary()
        self.assertEqual(s["backend"], "ssh")
        self.assertEqual([r["process"] for r in s["restarts"]], ["server-1"])
        # Streamed back once per incarnation (the watchdog of the restart
        # skips what its predecessor's had sent).
        self.assertEqual([e["restored"] for e in run.events_of("server-1", "server_started")],
                         [False, True])
        self.assertIsNotNone(s["final_accuracy"])
        self.assertEqual(sorted(w["worker"] for w in s["workers"]), [0, 1])
        # Keys: each host holds its own processes' secret keys only.
        h1 = os.listdir(os.path.join(tmp, "h1", "keys"))
        self.assertIn("coordinator.key", h1)
        self.assertNotIn("worker-0.key", h1)
        self.assertIn("worker-0.key", os.listdir(os.path.join(tmp, "h2", "keys")))
        self.assertIn("continuing server 0 (SIGCONT)", run.output)
        self.assertEqual(run.left(), [])

    def test_kill9_leaves_nothing_on_the_hosts(self):
        run = Run(remote_spec(tempdir("relaxps-launch-hosts-"), duration_s=120))
        launcher = run.start()
        try:
            wait_for(lambda: os.path.exists(os.path.join(run.out, "start_unix")) and
                     len(run.left()) >= 10, 90, "the job's processes and watchdogs")
        finally:
            launcher.send_signal(signal.SIGKILL)
            launcher.wait()
        # The watchdogs TERM their process at once and KILL it after 10 s;
        # then the watchdog itself ends (its tail notices within a second).
        # Under load (two such tests beside each other on 2 cores) that took
        # just over 15 s, so the bound is 30.
        deadline = time.monotonic() + 30 * SCALE
        while run.left() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = run.left()
        self.assertEqual(left, [], describe(left))


if __name__ == "__main__":
    unittest.main()
