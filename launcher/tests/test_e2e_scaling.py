"""Elastic servers from the fault schedule (docs/launch.md, docs/elastic.md):
a one-server job gets a second server (relaxps-server --join) and then its
first server is drained; the drained server's exit 0 is its leaving, not a
failure; the job finishes and summary.json, events.csv and servers.csv show
the add, the join, the moves with their map versions, the drain and the
leaving. Under curve, the drain runs relaxps-ctl with the job's operator
key."""
import csv
import os
import unittest

from launch_util import SCALE, Run, spec


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class ScalingTest(unittest.TestCase):
    def test_add_a_server_then_drain_the_first(self):
        # Faults count from the workers' start; the worker's table must exist
        # before server 1 joins (a table created after the join is spread
        # over both servers at once, and the join moves nothing): on a loaded
        # host a worker took more than 2 s to create it.
        run = Run(spec(duration_s=14 * SCALE, recovery="none", servers={"count": 1},
                       metrics=True, sample_servers_s=0.5,
                       faults=[{"at_s": 4 * SCALE, "action": "add_server"},
                               {"at_s": 8 * SCALE, "action": "drain", "target": "server-0"}]))
        code = run.run()
        self.assertEqual(code, 0, run.output)
        s = run.summary()
        self.assertEqual(s["verdict"], "done", s["reason"])
        add, drain = s["faults"]
        self.assertEqual((add["action"], add["target"], add["server"]),
                         ("add_server", "server-1", 1), add)
        self.assertNotIn("error", add)
        self.assertGreaterEqual(add["joined_s"], add["time_s"])
        self.assertEqual((drain["action"], drain["target"], drain["server"]),
                         ("drain", "server-0", 0), drain)
        self.assertNotIn("error", drain)
        self.assertGreaterEqual(drain["moves"], 1)
        self.assertGreater(drain["drained_s"], drain["time_s"])
        procs = {p["name"]: p for p in s["processes"]}
        self.assertEqual(procs["server-0"]["exit_codes"], [0])
        self.assertTrue(procs["server-0"]["drained"])
        self.assertEqual(procs["server-0"]["restarts"], 0)
        self.assertTrue(procs["server-1"]["joined"])
        self.assertEqual(procs["server-1"]["role"], "server")
        self.assertEqual(len(procs["server-1"]["pids"]), 1)
        self.assertTrue(os.path.getsize(os.path.join(run.out, "server-1.log")) > 0)
        # The join moved half of every dense range to server 1, the drain the
        # rest: every move is published with a newer map than the one before.
        moves = s["range_moves"]
        self.assertTrue(moves, s)
        self.assertTrue(all(m["kind"] == "range_move_done" for m in moves), moves)
        self.assertTrue(all(m["destination"] == 1 and m["source"] == 0 for m in moves), moves)
        versions = [m["map_version"] for m in moves]
        self.assertEqual(versions, sorted(set(versions)))
        self.assertTrue(any(m["time_s"] < drain["time_s"] for m in moves), moves)
        self.assertTrue(any(m["time_s"] > drain["time_s"] for m in moves), moves)
        self.assertEqual(sorted(w["worker"] for w in s["workers"]), [0, 1])
        self.assertFalse(any(w["stopped"] for w in s["workers"]))
        events = [r["event"] for r in read_csv(os.path.join(run.out, "events.csv"))]
        for e in ("add_server", "joined", "drain", "drained", "range_move_done"):
            self.assertIn(e, events)
        self.assertLess(events.index("add_server"), events.index("joined"))
        self.assertLess(events.index("drain"), events.index("drained"))
        # The servers' counters: server 1 takes pushes once it holds ranges,
        # server 0 is sampled no more once it left.
        samples = read_csv(os.path.join(run.out, "servers.csv"))
        last = {}
        for r in samples:
            last[r["server"]] = r
        self.assertIn("0", last)
        self.assertGreater(float(last["1"]["pushes_total"]), 0)
        self.assertLessEqual(float(last["0"]["time_s"]), drain["drained_s"] + 1)
        self.assertEqual(run.left(), [])

    def test_a_drain_under_curve_uses_the_operator_key(self):
        # The drain must find the worker's table placed (then server 1 holds
        # part of it): under CURVE on a loaded host a worker took more than
        # 3 s from its start to create it.
        run = Run(spec(duration_s=10 * SCALE, recovery="none", security="curve",
                       faults=[{"at_s": 6 * SCALE, "action": "drain", "target": "server-1"}]))
        code = run.run()
        self.assertEqual(code, 0, run.output)
        s = run.summary()
        drain = s["faults"][0]
        self.assertNotIn("error", drain)
        self.assertGreaterEqual(drain["moves"], 1)
        self.assertIn("drained_s", drain)
        procs = {p["name"]: p for p in s["processes"]}
        self.assertEqual(procs["server-1"]["exit_codes"], [0])
        self.assertTrue(procs["server-1"]["drained"])
        self.assertTrue(s["range_moves"])
        self.assertTrue(all(m["source"] == 1 and m["destination"] == 0
                            for m in s["range_moves"]), s["range_moves"])
        self.assertEqual(run.left(), [])


if __name__ == "__main__":
    unittest.main()
