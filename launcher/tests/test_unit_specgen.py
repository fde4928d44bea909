"""make-spec: the wrappers' flags become specs that validate (run_local.sh's
flags, launch.sh's hostfile, the Slurm allocation); a bad flag is exit 2
with one line."""
import json
import os
import subprocess
import tempfile
import unittest

from launch_util import ENTRY
from relaxps_launch import spec as specmod, specgen

ENV = {"RELAXPS_ROOT": "/src", "RELAXPS_BUILD": "/src/build"}


class SpecgenTest(unittest.TestCase):
    def test_run_local_flags_are_routed(self):
        s = specgen.run_local([
            "--servers=3", "--workers=1", "--model=mlp", "--duration_s=20", "--recovery=chain",
            "--replicas=2", "--consistency=ssp", "--staleness=3", "--store=memory",
            "--server.keep_checkpoints=1", "--coordinator.seed_rule=average", "--lr=0.1",
            "--kill_server=0,1@5", "--stop_server=2@8+4", "--partition_server=1@9+2",
            "--evaluator_every_s=2", "--progress_s=1", "--restart_after_s=3", "--metrics",
            "--chaos=4", "--out_dir=/tmp/x", "--no_logs"], ENV)
        parsed = specmod.parse(s)
        self.assertEqual((parsed.servers.count, parsed.workers.count), (3, 1))
        self.assertEqual(parsed.consistency, "ssp")
        self.assertEqual(parsed.staleness, 3)
        self.assertEqual(parsed.coordinator.flags, ["--replicas=2", "--seed_rule=average"])
        self.assertEqual(parsed.servers.flags, ["--store=memory", "--keep_checkpoints=1"])
        self.assertEqual(parsed.workers.flags, ["--lr=0.1"])
        self.assertEqual([(f.action, f.target, f.at_s, f.for_s) for f in parsed.faults],
                         [("kill", "server-0", 5, None), ("kill", "server-1", 5, None),
                          ("stop", "server-2", 8, 4), ("partition", "server-1", 9, 2)])
        self.assertEqual(parsed.evaluator.every_s, 2)
        self.assertEqual(parsed.chaos["seed"], 4)
        self.assertTrue(parsed.metrics)
        self.assertFalse(parsed.logs)
        self.assertEqual(parsed.out_dir, "/tmp/x")

    def test_run_local_elastic_servers(self):
        s = specgen.run_local(["--servers=1", "--add_server=30,60", "--drain_server=0@90",
                               "--sample_servers_s=1", "--metrics"], ENV)
        parsed = specmod.parse(s)
        self.assertEqual([(f.at_s, f.action, f.target) for f in parsed.faults], [
            (30, "add_server", "server-1"), (60, "add_server", "server-2"),
            (90, "drain", "server-0")])
        self.assertEqual(parsed.sample_servers_s, 1)
        # A drain of a server added earlier is the spec's to check.
        s = specgen.run_local(["--servers=1", "--drain_server=2@9"], ENV)
        with self.assertRaises(specmod.SpecError) as cm:
            specmod.parse(s)
        self.assertIn("'server-2': the job has 1 server(s)", str(cm.exception))
        for flags, needle in ((["--add_server=soon"], "--add_server must be a number"),
                              (["--drain_server=0"], "expected ID@SECONDS")):
            with self.assertRaises(specgen.FlagError) as cm:
                specgen.run_local(flags, ENV)
            self.assertIn(needle, str(cm.exception))

    def test_run_local_defaults_and_ha(self):
        s = specmod.parse(specgen.run_local([], ENV))
        self.assertEqual((s.servers.count, s.workers.count, s.model, s.duration_s),
                         (2, 2, "cnn", 120))
        self.assertTrue(s.out_dir.startswith("/src/runs/"))
        s = specmod.parse(specgen.run_local(["--coordinators=2", "--zk=127.0.0.1:2181",
                                             "--kill_coordinator=1@10"], ENV))
        self.assertEqual(s.coordinator.count, 2)
        self.assertIn("--coordination=zk://127.0.0.1:2181/relaxps", s.coordinator.flags)
        self.assertEqual([(f.action, f.target) for f in s.faults], [("kill", "coordinator-1")])

    def test_run_local_bad_flags(self):
        for args, needle in [(["--servers=0"], "--servers must be a number >= 1"),
                             (["--kill_server=2@5"], "id 2 >= --servers"),
                             (["--stop_server=0@5"], "expected ID@SECONDS+SECONDS"),
                             (["--coordinators=2"], "needs --coordination=zk"),
                             (["stray"], "unexpected argument 'stray'")]:
            with self.subTest(args=args), self.assertRaises(specgen.FlagError) as cm:
                specgen.run_local(args, ENV)
            self.assertIn(needle, str(cm.exception))

    def test_hostfile(self):
        with tempfile.NamedTemporaryFile("w", suffix=".hosts", delete=False) as f:
            f.write("# host roles keys\n"
                    "node1 coordinator,server addr=10.0.0.1 port=7000 metrics_port=9100\n"
                    "u@node2 server,workerx2 addr=10.0.0.2 bin=/opt/bin\n")
        s = specgen.hostfile([f"--hostfile={f.name}", "--exec=ip netns exec {host}",
                              "--kill=host:u@node2@20", "--recovery=chain"], ENV)
        os.unlink(f.name)
        p = specmod.parse(s)
        self.assertEqual(p.backend, "ssh")
        self.assertFalse(p.ssh_shell)
        self.assertEqual(p.security, "curve")
        self.assertEqual(p.coordinator.hosts, ["node1"])
        self.assertEqual(p.coordinator.port, 7000)
        self.assertEqual(p.servers.hosts, ["node1", "u@node2"])
        self.assertEqual(p.workers.hosts, ["u@node2", "u@node2"])
        self.assertEqual(p.hosts["u@node2"].bin_dir, "/opt/bin")
        self.assertEqual(p.hosts["node1"].metrics_port, 9100)
        self.assertEqual([(x.action, x.target) for x in p.faults], [("kill", "host:u@node2")])
        with self.assertRaises(specgen.FlagError) as cm:
            specgen.hostfile(["--hostfile=/dev/null"], ENV)
        self.assertIn("needs exactly one coordinator, found 0", str(cm.exception))

    def test_slurm_outside_an_allocation(self):
        with self.assertRaises(specgen.FlagError) as cm:
            specgen.slurm([], {})
        self.assertIn("inside a Slurm allocation", str(cm.exception))

    def test_cli_exit_2_one_line(self):
        r = subprocess.run([ENTRY, "make-spec", "hostfile", "--hostfile=/nonexistent"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("cannot read hostfile /nonexistent", r.stderr)
        r = subprocess.run([ENTRY, "make-spec", "run_local", "--model=mlp"],
                           stdout=subprocess.PIPE, text=True, timeout=30)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(json.loads(r.stdout)["model"], "mlp")


if __name__ == "__main__":
    unittest.main()
