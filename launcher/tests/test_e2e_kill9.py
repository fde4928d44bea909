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
        deadline = time.monotonic() + 5
        while run.left() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(run.left(), [], "processes with the job tag survived the launcher")
        for pid in tagged:
            self.assertFalse(os.path.exists(f"/proc/{pid}/environ") and
                             open(f"/proc/{pid}/stat").read().split()[2] != "Z", pid)


if __name__ == "__main__":
    unittest.main()
