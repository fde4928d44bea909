"""The launcher killed with SIGKILL mid-job (no clean-up of its own runs)
leaves no process carrying the job's tag: its local children die with it
(PR_SET_PDEATHSIG). Checked in /proc/<pid>/environ."""
import os
import signal
import time
import unittest

from launch_util import Run, spec, wait_for


class Kill9Test(unittest.TestCase):
    def test_nothing_with_the_tag_is_left(self):
        run = Run(spec(duration_s=120))
        launcher = run.start()
        try:
            wait_for(lambda: os.path.exists(os.path.join(run.out, "events", "worker-1.jsonl"))
                     and os.path.getsize(os.path.join(run.out, "events", "worker-1.jsonl")) > 0,
                     60, "worker 1's first events")
            tagged = run.left()
            self.assertGreaterEqual(len(tagged), 5, tagged)  # coordinator, 2+2
        finally:
            launcher.send_signal(signal.SIGKILL)
            launcher.wait()
        def alive(pid):  # Not yet reaped and not a zombie (a dying one's environ reads empty).
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                return False
        deadline = time.monotonic() + 5
        while (run.left() or any(alive(p) for p in tagged)) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(run.left(), [], "processes with the job tag survived the launcher")
        self.assertEqual([p for p in tagged if alive(p)], [])

if __name__ == "__main__":
    unittest.main()
