"""A local job end to end: exit 0, summary.json with the final accuracy and
every process's exit code, events.jsonl valid against docs/events.schema.json,
no process with the job's tag left."""
import json
import os
import unittest

import jsonschema

from launch_util import SOURCE, Run, spec


class LocalJobTest(unittest.TestCase):
    def test_job_finishes_with_summary_and_valid_events(self):
        run = Run(spec(evaluator={"flags": ["--eval_every_s=2"]}))
        code = run.run()
        self.assertEqual(code, 0, run.output)
        s = run.summary()
        self.assertEqual(s["verdict"], "done", s)
        self.assertEqual(s["exit_code"], 0)
        self.assertEqual(s["job_end"]["verdict"], "done")
        self.assertEqual(s["job_end"]["exit_code"], 0)
        self.assertEqual(s["accuracy_from"], "evaluator")
        self.assertGreater(s["final_accuracy"], 0.5)
        self.assertGreater(s["samples_per_s"], 0)
        names = {p["name"]: p for p in s["processes"]}
        self.assertEqual(sorted(names), ["coordinator", "evaluator", "server-0", "server-1",
                                         "worker-0", "worker-1"])
        for p in s["processes"]:
            self.assertEqual(p["exit_codes"], [0], p)
        self.assertEqual(sorted(w["worker"] for w in s["workers"]), [0, 1])
        self.assertEqual(s["faults"], [])
        self.assertIn("final test accuracy", run.output)
        self.assertIn("] progress worker=", run.output)

        with open(os.path.join(SOURCE, "docs", "events.schema.json")) as f:
            schema = json.load(f)
        kinds = set()
        with open(os.path.join(run.out, "events.jsonl")) as f:
            for n, line in enumerate(f, 1):
                ev = json.loads(line)
                jsonschema.validate(ev, schema)
                kinds.add(ev["kind"])
        for k in ("coordinator_started", "server_started", "progress", "final",
                  "evaluator_final", "job_end"):
            self.assertIn(k, kinds)
        self.assertEqual(run.left(), [])


if __name__ == "__main__":
    unittest.main()
