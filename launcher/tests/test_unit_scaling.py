"""Elastic servers in the job spec (add_server, drain: docs/launch.md): the
schedule names added servers by the ids they will get, bad schedules are
refused with one line naming the field, a joining server's argv, and the
servers' counters sampled from their Prometheus text."""
import json
import unittest

from launch_util import tempdir  # noqa: F401  (puts the launcher on sys.path)
from relaxps_launch import plan, sampler, scaling, spec as specmod

BASE = {"servers": {"count": 1}, "workers": {"count": 2}, "duration_s": 100}


def with_faults(faults, **changes):
    s = json.loads(json.dumps(BASE))
    s["faults"] = faults
    s.update(changes)
    return s


class ScalingSpecTest(unittest.TestCase):
    def assertSpecError(self, raw, needle):
        with self.assertRaises(specmod.SpecError) as cm:
            specmod.parse(raw)
        self.assertIn(needle, str(cm.exception))
        self.assertNotIn("\n", str(cm.exception))

    def test_adds_get_the_next_ids_and_later_faults_may_name_them(self):
        s = specmod.parse(with_faults([
            {"at_s": 90, "action": "drain", "target": "server-0"},
            {"at_s": 30, "action": "add_server"},
            {"at_s": 60, "action": "add_server"},
            {"at_s": 70, "action": "kill", "target": "server-2"}]))
        by_action = [(f.at_s, f.action, f.target) for f in s.faults]
        self.assertEqual(by_action, [(90, "drain", "server-0"), (30, "add_server", "server-1"),
                                     (60, "add_server", "server-2"), (70, "kill", "server-2")])
        self.assertEqual(s.faults[1].host, "localhost")
        self.assertEqual(s.faults[1].describe(), {
            "at_s": 30, "action": "add_server", "target": "server-1", "origin": "schedule",
            "host": "localhost"})

    def test_an_added_server_continues_the_servers_host_rotation(self):
        s = specmod.parse(with_faults([{"at_s": 5, "action": "add_server"},
                                       {"at_s": 6, "action": "add_server", "host": "a"}],
                                      hosts=["a", "b"], servers={"count": 1, "hosts": ["a", "b"]}))
        self.assertEqual([f.host for f in s.faults], ["b", "a"])

    def test_bad_schedules(self):
        cases = [
            (with_faults([{"at_s": 5, "action": "add_server", "target": "server-1"}]),
             "faults[0].target: an add_server takes no target: the new server gets the next "
             "free id (server-1 here)"),
            (with_faults([{"at_s": 5, "action": "add_server", "for_s": 3}]),
             "faults[0].for_s: an add_server has no duration"),
            (with_faults([{"at_s": 5, "action": "add_server", "host": "nope"}]),
             "faults[0].host: unknown host 'nope'"),
            (with_faults([{"at_s": 5, "action": "kill", "target": "server-0", "host": "x"}]),
             "faults[0].host: only an add_server takes a host"),
            (with_faults([{"at_s": 5, "action": "drain", "target": "worker-0"}]),
             "faults[0].target: a drain takes a server (server-N), got 'worker-0'"),
            (with_faults([{"at_s": 5, "action": "drain", "target": "server-0", "for_s": 1}]),
             "faults[0].for_s: a drain has no duration"),
            (with_faults([{"at_s": 5, "action": "drain", "target": "server-0"}]),
             "faults[0].target: draining server-0 would leave no server serving"),
            # The add comes after the drain that names its server.
            (with_faults([{"at_s": 50, "action": "add_server"},
                          {"at_s": 40, "action": "drain", "target": "server-1"}]),
             "faults[1].target: 'server-1': the job has 1 server(s)"),
            (with_faults([{"at_s": 10, "action": "add_server"},
                          {"at_s": 20, "action": "drain", "target": "server-1"},
                          {"at_s": 30, "action": "drain", "target": "server-1"}]),
             "faults[2].target: server-1 is drained twice"),
            (with_faults([{"at_s": 10, "action": "add_server"},
                          {"at_s": 20, "action": "kill", "target": "server-2"}]),
             "faults[1].target: 'server-2': the job has 2 server(s) by then (1 + 1 added)"),
            (with_faults([{"at_s": 10, "action": "add_server"}], security="curve"),
             "faults[0].action: add_server under security curve"),
            (with_faults([{"at_s": "soon", "action": "add_server"}]),
             "faults[0].at_s: expected a number"),
            (with_faults(["add"]), "faults[0]: expected an object, got str"),
            (with_faults([], sample_servers_s=2), "sample_servers_s: sampling the servers' "
             "counters needs \"metrics\": true"),
            (with_faults([], sample_servers_s=-1, metrics=True), "sample_servers_s: must be >= 0"),
        ]
        for raw, needle in cases:
            with self.subTest(needle=needle):
                self.assertSpecError(raw, needle)

    def test_a_drain_under_curve_is_a_good_spec(self):
        s = specmod.parse(with_faults([{"at_s": 5, "action": "drain", "target": "server-1"}],
                                      servers={"count": 2}, security="curve"))
        self.assertEqual(s.faults[0].action, "drain")

    def test_a_joining_server_has_join_and_no_id(self):
        s = specmod.parse(with_faults([], servers={"count": 1, "flags": ["--cache_mb={id}"]}))
        p = plan.Proc("server", 3, s.hosts["localhost"], "server-3")
        p.workdir = "/run"
        p.events_path = "/run/events/server-3.jsonl"
        planner = plan.Planner(s, {"needs": {"store_kind": "any"}}, "/bin")
        argv = planner.server(p, "tcp://127.0.0.1:5", join=True)
        self.assertIn("--join", argv)
        self.assertFalse(any(a.startswith("--server_id") for a in argv), argv)
        self.assertIn("--data_dir=/run/data/server-3", argv)
        self.assertIn("--events_file=/run/events/server-3.jsonl", argv)
        self.assertIn("--cache_mb=3", argv)
        # Its restart (a registered server) takes its id like any other.
        self.assertIn("--server_id=3", planner.server(p, "tcp://127.0.0.1:5"))


class SamplerTest(unittest.TestCase):
    def test_counters_of_a_prometheus_text(self):
        text = ("# HELP relaxps_server_pushes_total Pushes received.\n"
                "# TYPE relaxps_server_pushes_total counter\n"
                "relaxps_server_pushes_total 1234\n"
                "relaxps_server_pulls_total 99\n"
                "relaxps_server_requests_total{type=\"PUSH\"} 5\n"
                "relaxps_server_shard_map_version 7\n"
                "relaxps_server_bytes_in_total 1.5e+06\n"
                "relaxps_server_updates_applied_total garbage\n")
        self.assertEqual(sampler.parse_metrics(text), {
            "relaxps_server_pushes_total": 1234.0, "relaxps_server_pulls_total": 99.0,
            "relaxps_server_shard_map_version": 7.0, "relaxps_server_bytes_in_total": 1.5e6})


if __name__ == "__main__":
    unittest.main()


class FakePopen:
    def __init__(self, rc, out=b"", err=b""):
        self.rc, self.out, self.err = rc, out, err

    def poll(self):
        return self.rc

    def communicate(self):
        return self.out, self.err


class FakeHandle:
    def __init__(self, pid):
        self.pid = pid


class FakeSup:
    """What Scaler uses of the supervisor: processes, events seen, starts."""

    def __init__(self, servers=1):
        self.spec = specmod.parse(with_faults([], servers={"count": servers}))
        self.procs = [plan.Proc("server", i, self.spec.hosts["localhost"], f"server-{i}")
                      for i in range(servers)]
        for p in self.procs:
            p.handle = FakeHandle(100 + p.index)
        self.state = type("State", (), {"server_joins": {}})()
        self.start_unix = 1000.0
        self.said, self.rows, self.started, self.ctl = [], [], [], []
        self.next_pid = 500
        self.ctl_result = FakePopen(0, b'{"server": "0", "moves": [{}, {}]}')

    def role(self, role):
        return [p for p in self.procs if p.role == role]

    def say(self, msg):
        self.said.append(msg)

    def csv(self, event, server, detail="", t=None):
        self.rows.append((event, server, detail))

    def elapsed(self):
        return 10.0

    def add_proc(self, p):
        self.procs.append(p)

    def start_server(self, p, join=False):
        self.next_pid += 1
        p.handle = FakeHandle(self.next_pid)
        self.started.append((p.name, join))

    def spawn_ctl(self, *args):
        self.ctl.append(args)
        return self.ctl_result

    def joined(self, p, sid):
        self.state.server_joins[p.handle.pid] = {"id": sid, "ts_unix_ms": 1012000}


class ScalerTest(unittest.TestCase):
    def add(self, sup, at):
        f = specmod.Fault(at, "add_server", "server-1", host="localhost")
        row = f.describe()
        row["time_s"] = at
        return f, row

    def test_joins_are_one_at_a_time_and_named_by_the_id_they_get(self):
        sup = FakeSup()
        sc = scaling.Scaler(sup)
        f1, r1 = self.add(sup, 5)
        f2, r2 = self.add(sup, 5)
        sc.apply(f1, r1)
        sc.apply(f2, r2)  # server-1 has not registered: the second waits.
        self.assertEqual(sup.started, [("server-1", True)])
        self.assertTrue(r2["waited_for_join"])
        sc.poll()
        self.assertEqual(len(sup.started), 1)
        sup.joined(sup.procs[1], 1)
        sc.poll()
        self.assertEqual(r1["joined_s"], 12.0)
        self.assertEqual(sup.started, [("server-1", True), ("server-2", True)])
        self.assertEqual((r2["target"], r2["server"], r2["time_s"]), ("server-2", 2, 10.0))
        self.assertIn(("joined", 1, "pid=501"), sup.rows)

    def test_a_failed_join_takes_no_id_and_its_record_is_reused(self):
        sup = FakeSup()
        sc = scaling.Scaler(sup)
        f1, r1 = self.add(sup, 5)
        sc.apply(f1, r1)
        p = sup.procs[1]
        p.handle = None  # It exited before it registered.
        sc.join_failed(p, 2)
        self.assertIn("server-1 exited with code 2 before it joined", r1["error"])
        f2, r2 = self.add(sup, 8)
        sc.apply(f2, r2)
        self.assertEqual(len(sup.procs), 2)  # The same record, a second incarnation.
        self.assertEqual(r2["server"], 1)
        self.assertNotIn("error", r2)

    def test_the_coordinators_id_wins_over_the_expected_one(self):
        sup = FakeSup()
        sc = scaling.Scaler(sup)
        f1, r1 = self.add(sup, 5)
        sc.apply(f1, r1)
        sup.joined(sup.procs[1], 4)  # Someone joined servers by hand meanwhile.
        sc.poll()
        self.assertEqual((sup.procs[1].index, r1["server"]), (4, 4))
        self.assertTrue(any("joined as server 4" in s for s in sup.said), sup.said)

    def test_a_drain_counts_its_moves_and_a_refused_one_serves_on(self):
        sup = FakeSup(servers=2)
        sc = scaling.Scaler(sup)
        f = specmod.Fault(9, "drain", "server-0")
        row = f.describe()
        sc.apply(f, row)
        self.assertEqual(sup.ctl, [("--json", "drain-server", "0")])
        self.assertTrue(sup.procs[0].drained)
        sc.poll()
        self.assertEqual(row["moves"], 2)
        sup.ctl_result = FakePopen(1, b"", b"relaxps-ctl: FailedPrecondition: no\n")
        f = specmod.Fault(9, "drain", "server-1")
        row = f.describe()
        sc.apply(f, row)
        sc.poll()
        self.assertEqual(row["error"], "relaxps-ctl drain-server 1: relaxps-ctl: "
                         "FailedPrecondition: no")
        self.assertFalse(sup.procs[1].drained)  # Its exit would be a failure again.
        sup.procs[0].handle = None
        row = specmod.Fault(12, "drain", "server-0").describe()
        sc.apply(specmod.Fault(12, "drain", "server-0"), row)
        self.assertEqual(row["skipped"], "no running process")
