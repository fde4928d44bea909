"""A killed server: under checkpoint the launcher restarts it by the
registry's restart rule (same id, --restore_from=latest once it wrote a
checkpoint) and the job finishes; under none the job ends with the
job-failed code (3), naming the server."""
import unittest

from launch_util import SCALE, Run, spec


class ServerKillTest(unittest.TestCase):
    def test_checkpoint_restarts_the_server_and_the_job_finishes(self):
        run = Run(spec(duration_s=14 * SCALE, recovery="checkpoint", restart_after_s=1,
                       coordinator={"flags": ["--checkpoint_every_s=1"]},
                       faults=[{"at_s": 5 * SCALE, "action": "kill", "target": "server-1"}]))
        code = run.run()
        self.assertEqual(code, 0, run.output)
        s = run.summary()
        self.assertEqual(s["verdict"], "done", s["reason"])
        self.assertEqual([f["target"] for f in s["faults"]], ["server-1"])
        self.assertEqual(len(s["restarts"]), 1, s["restarts"])
        r = s["restarts"][0]
        self.assertEqual(r["process"], "server-1")
        self.assertEqual(r["flags"], ["--restore_from=latest"])
        server1 = next(p for p in s["processes"] if p["name"] == "server-1")
        self.assertEqual(server1["exit_codes"][0], 137)
        self.assertEqual(server1["restarts"], 1)
        self.assertEqual(len(server1["pids"]), 2)
        # Each incarnation's events once: the restarted server appends to
        # its predecessor's file, which is not read again.
        self.assertEqual([e["restored"] for e in run.events_of("server-1", "server_started")],
                         [False, True])
        self.assertEqual(sorted(w["worker"] for w in s["workers"]), [0, 1])
        self.assertFalse(any(w["stopped"] for w in s["workers"]))
        self.assertEqual(run.left(), [])

    def test_none_fails_the_job_naming_the_server(self):
        run = Run(spec(duration_s=60, recovery="none",
                       faults=[{"at_s": 3 * SCALE, "action": "kill", "target": "server-1"}]))
        code = run.run()
        self.assertEqual(code, 3, run.output)
        s = run.summary()
        self.assertEqual(s["verdict"], "failed")
        self.assertIn("server 1", s["reason"])
        self.assertEqual(s["restarts"], [])
        self.assertIn("job failed: server 1", run.output)
        self.assertEqual(run.left(), [])


if __name__ == "__main__":
    unittest.main()
