"""proctools: a process is found by the job tag in its environment and swept,
and a process's TCP ports are read from /proc."""
import json
import os
import socket
import select
import shutil
import subprocess
import unittest

import launch_util  # noqa: F401  (puts the package on sys.path)
from relaxps_launch import proctools


class ProctoolsTest(unittest.TestCase):
    def test_tagged_and_sweep(self):
        tag = f"proctools-test-{os.getpid()}"
        p = subprocess.Popen(["sleep", "60"], env=dict(os.environ, RELAXPS_JOB_TAG=tag))
        other = subprocess.Popen(["sleep", "60"], env=dict(os.environ, RELAXPS_JOB_TAG=tag + "x"))
        try:
            self.assertEqual(proctools.tagged(tag), [p.pid])
            self.assertEqual(proctools.sweep(tag), [p.pid])
            self.assertEqual(p.wait(timeout=10), -9)
            self.assertIsNone(other.poll(), "a process of another job was killed")
            self.assertEqual(proctools.tagged(tag), [])
        finally:
            other.kill()
            other.wait()

    def test_tcp_ports_of_a_process(self):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname())
        try:
            ports = proctools.tcp_ports(os.getpid())
            self.assertIn(listener.getsockname()[1], ports)
            self.assertIn(client.getsockname()[1], ports)
        finally:
            client.close()
            listener.close()

    def test_iptables_rules_spare_ssh(self):
        rules = proctools.iptables_rules(ports=[5000], addr="10.0.0.3")
        self.assertIn(["INPUT", "-p", "tcp", "--dport", "5000", "-j", "DROP"], rules)
        host = [r for r in rules if "10.0.0.3" in r]
        self.assertEqual(len(host), 2)
        self.assertTrue(all("22" in r for r in host))

    @unittest.skipUnless(os.geteuid() == 0 and shutil.which("iptables") and shutil.which("unshare"),
                         "needs root, iptables and unshare (a private network namespace)")
    def test_host_partition_drops_all_but_ssh(self):
        # The rules applied for real, in a private network namespace: a host's
        # address cut off, its ssh port (the launcher's control channel) not.
        script = (
            "import json, socket, subprocess, sys\n"
            "from relaxps_launch import proctools\n"
            "subprocess.run(['ip', 'link', 'set', 'lo', 'up'], check=True)\n"
            "subprocess.run(['ip', 'addr', 'add', '127.0.0.3/8', 'dev', 'lo'], check=True)\n"
            "for r in proctools.iptables_rules(addr='127.0.0.3'):\n"
            "    subprocess.run(['iptables', '-A'] + r, check=True)\n"
            "result = {}\n"
            "for port in (22, 5000):\n"
            "    listener = socket.create_server(('127.0.0.3', port))\n"
            "    try:\n"
            "        socket.create_connection(('127.0.0.3', port), timeout=1).close()\n"
            "        result[port] = 'connected'\n"
            "    except OSError as e:\n"
            "        result[port] = type(e).__name__\n"
            "    listener.close()\n"
            "print(json.dumps(result))\n")
        out = subprocess.run(["unshare", "-n", "/usr/bin/python3", "-c", script],
                             capture_output=True, text=True, timeout=30,
                             env=dict(os.environ, PYTHONPATH=launch_util.LAUNCHER))
        self.assertEqual(out.returncode, 0, out.stderr)
        result = json.loads(out.stdout)
        self.assertEqual(result["22"], "connected", result)
        self.assertNotEqual(result["5000"], "connected", result)

    def test_pdeathsig_child_dies_with_its_parent(self):
        # A parent that starts a child with pdeathsig, prints its pid and is killed.
        code = ("import subprocess, sys, time; from relaxps_launch import proctools; "
                "c = subprocess.Popen(['sleep', '60'], preexec_fn=proctools.pdeathsig); "
                "print(c.pid, flush=True); time.sleep(60)")
        parent = subprocess.Popen(["/usr/bin/python3", "-c", code], stdout=subprocess.PIPE,
                                  text=True, env=dict(os.environ, PYTHONPATH=launch_util.LAUNCHER))
        child = int(parent.stdout.readline())
        pidfd = os.pidfd_open(child)  # Readable once the child has exited.
        try:
            parent.kill()
            parent.wait()
            exited, _, _ = select.select([pidfd], [], [], 5)
        finally:
            os.close(pidfd)
        alive = not exited
        self.assertFalse(alive, "the child outlived its killed parent")


if __name__ == "__main__":
    unittest.main()
