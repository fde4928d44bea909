"""Spec validation: every bad spec is exit code 2 with one clear line naming
the field, before anything starts (no binaries needed for these)."""
import json
import os
import subprocess
import tempfile
import unittest

from launch_util import ENTRY
from relaxps_launch import spec as specmod

GOOD = {"servers": {"count": 2}, "workers": {"count": 2}}


def bad(**changes):
    s = json.loads(json.dumps(GOOD))
    s.update(changes)
    return s


class SpecTest(unittest.TestCase):
    def assertSpecError(self, raw, needle):
        with self.assertRaises(specmod.SpecError) as cm:
            specmod.parse(raw)
        self.assertIn(needle, str(cm.exception))
        self.assertNotIn("\n", str(cm.exception))

    def test_good_spec_defaults(self):
        s = specmod.parse(GOOD)
        self.assertEqual(s.backend, "local")
        self.assertEqual(list(s.hosts), ["localhost"])
        self.assertEqual(s.hosts["localhost"].addr, "127.0.0.1")
        self.assertEqual((s.coordinator.count, s.servers.count, s.workers.count), (1, 2, 2))
        self.assertEqual(s.duration_s, 60)
        self.assertEqual(s.evaluator.count, 0)

    def test_field_errors(self):
        cases = [
            (bad(backend="k8s"), "backend: must be one of local, ssh, slurm"),
            (bad(servers={"count": 0}), "servers.count: must be >= 1"),
            (bad(servers={"count": "2"}), "servers.count: expected an integer"),
            (bad(workers={"count": 1, "flags": ["lr=1"]}), "'lr=1' is not a --flag"),
            (bad(consistency="eventual"), "consistency: must be one of bsp, ssp, async"),
            (bad(colour="red"), "unknown key 'colour'"),
            (bad(backend="ssh"), "hosts: the ssh backend needs a host list"),
            (bad(hosts=["a", "a"]), "host 'a' listed twice"),
            (bad(hosts=["a"], servers={"hosts": ["b"]}), "unknown host 'b'"),
            (bad(faults=[{"at_s": 1, "action": "explode", "target": "server-0"}]),
             "faults[0].action: must be one of kill, stop, partition"),
            (bad(faults=[{"at_s": 1, "action": "kill", "target": "server-7"}]),
             "'server-7': the job has 2 server(s)"),
            (bad(faults=[{"at_s": 1, "action": "stop", "target": "server-0"}]),
             "a stop needs for_s"),
            (bad(faults=[{"at_s": 1, "action": "kill", "target": "host:nope"}]),
             "unknown host 'nope'"),
            (bad(faults=[{"at_s": 1, "action": "partition", "target": "worker-0",
                          "for_s": 2}]), "partitions cut servers"),
            (bad(coordinator={"count": 2}), "more than one coordinator needs --coordination"),
            (bad(evaluator={"count": 2}), "at most one evaluator"),
            (bad(chaos={"seed": "x"}), "chaos.seed: expected an integer"),
            (bad(ssh={"command": ["ssh"]}), "must contain a \"{host}\" element"),
            (bad(tag="a b"), "tag: letters, digits"),
        ]
        for raw, needle in cases:
            with self.subTest(needle=needle):
                self.assertSpecError(raw, needle)

    def test_policy_checked_against_the_registry(self):
        class Reg:
            def get(self, name):
                return {"chain": {"name": "chain", "needs": {"min_servers": 2}}}.get(name)

            def names(self):
                return ["chain"]
        s = specmod.parse(bad(recovery="chain", servers={"count": 1}))
        with self.assertRaises(specmod.SpecError) as cm:
            specmod.check_policy(s, Reg())
        self.assertIn("recovery chain needs at least 2 servers, got 1", str(cm.exception))
        s = specmod.parse(bad(recovery="raid"))
        with self.assertRaises(specmod.SpecError) as cm:
            specmod.check_policy(s, Reg())
        self.assertIn("unknown policy 'raid' (registered: chain)", str(cm.exception))

    def test_cli_bad_spec_exits_2_with_one_line(self):
        with tempfile.TemporaryDirectory() as d:
            cases = {"notjson.json": "{servers: 2", "bad.json": json.dumps(bad(backend="x"))}
            for name, text in cases.items():
                p = os.path.join(d, name)
                with open(p, "w") as f:
                    f.write(text)
                r = subprocess.run([ENTRY, p], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, timeout=30)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(r.stdout, "")
                lines = r.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertTrue(lines[0].startswith("relaxps-launch: bad spec: "), lines[0])
            r = subprocess.run([ENTRY, os.path.join(d, "missing.json")], stderr=subprocess.PIPE,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 2)
            self.assertIn("cannot read", r.stderr)
            self.assertIn("notjson.json:1:2: not JSON", subprocess.run(
                [ENTRY, os.path.join(d, "notjson.json")], stderr=subprocess.PIPE, text=True,
                timeout=30).stderr)


if __name__ == "__main__":
    unittest.main()
