"""The supervisor: starts the job's processes through a backend, reads their
events, applies the fault schedule, restarts what the recovery policy's
restart rule says, ends the job and stops every process it started. One
thread, one loop (every POLL_S); no process is waited on blockingly."""
import os
import signal
import socket
import subprocess
import time
import traceback

from relaxps_launch import backends, plan, proctools, registry, summary
from relaxps_launch.faults import FaultInjector
from relaxps_launch.events import JobState
from relaxps_launch.sampler import ServerSampler
from relaxps_launch.scaling import Scaler

POLL_S = 0.2

# Exit codes (docs/launch.md).
EXIT_DONE = 0
EXIT_INTERNAL_ERROR = 1
EXIT_BAD_SPEC = 2
EXIT_JOB_FAILED = 3
EXIT_COORDINATOR_LOST = 4
EXIT_LAUNCH_FAILED = 5
EXIT_INTERRUPTED = 130


class LaunchFailed(Exception):
    pass


def _free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Supervisor:
    def __init__(self, spec, policy, bin_dir, out_dir, tag, prog="relaxps-launch", echo=print):
        self.spec = spec
        self.policy = policy
        self.bin_dir = bin_dir
        self.out = out_dir
        self.tag = tag
        self.prog = prog
        self.echo = echo
        self.planner = plan.Planner(spec, policy, bin_dir)
        self.backend = backends.make(spec, {**os.environ, proctools.TAG_VAR: tag}
                                     if spec.backend == "local" else {proctools.TAG_VAR: tag})
        self.procs = plan.all_procs(spec)
        self.state = None
        self.faults = FaultInjector(self, spec.faults)
        self.scaler = Scaler(self)
        self.sampler = None         # ServerSampler once the run folder exists.
        self.restarts = []          # summary rows of restarts
        self.csv_rows = []          # events.csv rows (time_s, event, server, detail)
        self.interrupted = None     # Signal name once SIGINT/SIGTERM arrived.
        self.t0 = None              # Monotonic time the workers started.
        self.start_unix = None
        self.started_unix = time.time()
        self.coordinators = ""
        self.verdict = None
        self.reason = None
        self.exit_code = None
        self.kill_times = {}        # server id -> unix ms of its last lone kill
        self.coordinator_kill_ms = None
        self.last_progress = 0.0
        self.lost_hosts = set()     # Hosts killed as a whole: nothing restarts there.

    # ---- helpers ------------------------------------------------------------------
    def say(self, msg, at=True):
        prefix = f"[{self.elapsed():.0f}s] " if at and self.t0 is not None else ""
        self.echo(f"{prefix}{self.prog}: {msg}")

    def elapsed(self):
        return 0.0 if self.t0 is None else time.monotonic() - self.t0

    def role(self, role):
        return [p for p in self.procs if p.role == role]

    def csv(self, event, server, detail="", t=None):
        self.csv_rows.append((self.elapsed() if t is None else t, event, server, detail))

    def _on_signal(self, signum, _frame):
        if self.interrupted is None:
            self.interrupted = signal.Signals(signum).name

    # ---- starting -------------------------------------------------------------------
    def _prepare(self):
        os.makedirs(os.path.join(self.out, "events"), exist_ok=True)
        self.state = JobState(os.path.join(self.out, "events.jsonl"))
        for p in self.procs:
            p.workdir = self.backend.workdir(p.host, self.out, self.tag)
            p.events_path = plan.events_path(p, self.spec.backend, self.out)
        for h in {p.host.name: p.host for p in self.procs}.values():
            wd = self.backend.workdir(h, self.out, self.tag)
            try:
                self.backend.prepare(h, os.path.join(wd, "data"))
            except (OSError, subprocess.SubprocessError) as e:
                raise LaunchFailed(str(e)) from None
        if self.spec.security == "curve":
            self._keys()
        if self.spec.metrics or any(h.metrics_port for h in self.spec.hosts.values()):
            self._metrics_ports()
        if self.spec.sample_servers_s:
            self.sampler = ServerSampler(self, self.spec.sample_servers_s,
                                         os.path.join(self.out, "servers.csv"))

    def _keys(self):
        keys = os.path.join(self.out, "keys")
        ctl = os.path.join(self.bin_dir, "relaxps-ctl")
        r = subprocess.run([ctl, "keygen", keys, f"--servers={self.spec.servers.count}",
                            f"--workers={self.spec.workers.count}"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise LaunchFailed(f"relaxps-ctl keygen failed: {r.stderr.strip()[-200:]}")
        os.chmod(keys, 0o700)
        for p in self.procs:
            if p.workdir == self.out and self.spec.backend != "ssh":
                continue  # The run folder's keys are its own.
            # The coordinator's host also runs relaxps-ctl for the launcher.
            mine = {"coordinator": ["coordinator", "router", "ctl"],
                    "server": [f"server-{p.index}", "router"],
                    "worker": [f"worker-{p.index}"], "evaluator": []}[p.role]
            for f in sorted(os.listdir(keys)):
                if f.endswith(".pub") or f[:-4] in mine:
                    with open(os.path.join(keys, f), "rb") as fh:
                        try:
                            self.backend.put_file(p.host, os.path.join(p.workdir, "keys", f),
                                                  fh.read())
                        except (OSError, subprocess.SubprocessError) as e:
                            raise LaunchFailed(str(e)) from None

    def _metrics_ports(self, procs=None, quiet=False):
        """Prometheus ports of `procs` (default: every process that serves
        metrics), then prometheus.yml and metrics.txt for every process."""
        serving = [p for p in (self.procs if procs is None else procs)
                   if not (p.role == "worker" and self.spec.workers.command)
                   and not (p.role == "coordinator" and p.index > 0)
                   and p.role != "evaluator"]
        if self.spec.backend == "local" and not any(p.host.metrics_port for p in self.procs):
            for p, port in zip(serving, _free_ports(len(serving))):
                p.metrics_port = port
        else:
            used = {}
            for p in self.procs:
                if p.host.metrics_port and p.metrics_port and p not in serving:
                    used[p.host.name] = used.get(p.host.name, 0) + 1
            for p in serving:
                if p.host.metrics_port:
                    p.metrics_port = p.host.metrics_port + used.get(p.host.name, 0)
                    used[p.host.name] = used.get(p.host.name, 0) + 1
        summary.write_prometheus(self, quiet)

    def add_proc(self, p):
        """A process the job was not started with (an add_server): its folder,
        events file, host and metrics port like the others'."""
        p.workdir = self.backend.workdir(p.host, self.out, self.tag)
        p.events_path = plan.events_path(p, self.spec.backend, self.out)
        if p.host.name not in {q.host.name for q in self.procs}:
            self.backend.prepare(p.host, os.path.join(p.workdir, "data"))
        self.procs.append(p)
        if any(q.metrics_port for q in self.procs):
            self._metrics_ports([p], quiet=True)

    def start_server(self, p, join=False):
        self._start(p, self.planner.server(p, self.coordinators, join=join))

    def _start(self, p, argv):
        if p.handle is not None:  # A restart: what the last incarnation wrote first.
            self.state.feed(p.name, p.handle.events.read())
        env = self.planner.env(p)
        log = os.path.join(self.out, f"{p.name}.log") if self.spec.logs else os.devnull
        try:
            p.handle = self.backend.start(p.host, argv, env, log, p.events_path)
        except OSError as e:
            raise LaunchFailed(f"cannot start {p.name}: {argv[0]}: {e.strerror or e}") from None
        p.pids.append(p.handle.pid)
        p.expected_exit = False
        p.fault_killed = False
        p.stopped = False
        p.argv = argv

    def _start_coordinator(self, p):
        port = getattr(p, "bind_port", 0) or (self.spec.coordinator.port if p.index == 0 else 0)
        self._start(p, self.planner.coordinator(p, port))

    def _wait_for_coordinators(self):
        deadline = time.monotonic() + self.spec.start_timeout_s
        while True:
            self._read_events()
            pending = [p for p in self.role("coordinator")
                       if p.name not in self.state.coordinator_endpoint]
            if not pending:
                break
            for p in pending:
                rc = p.handle.poll()
                if rc is not None:
                    raise LaunchFailed(f"{p.name} exited at start-up with code {rc}; see "
                                       f"{os.path.join(self.out, p.name + '.log')}")
            if time.monotonic() > deadline or self.interrupted:
                raise LaunchFailed(f"{pending[0].name} did not start within "
                                   f"{self.spec.start_timeout_s:g} s (no coordinator_started "
                                   f"event); see {os.path.join(self.out, pending[0].name + '.log')}")
            time.sleep(POLL_S / 2)
        eps = []
        for p in self.role("coordinator"):
            # coordinator_started has the bound endpoint; the others reach it
            # at the address the planner advertised (--advertise=HOST keeps
            # the bound port).
            p.bind_port = int(self.state.coordinator_endpoint[p.name].rsplit(":", 1)[1])
            eps.append(self.planner.advertised_endpoint(p, p.bind_port))
        self.coordinators = ",".join(eps)
        with open(os.path.join(self.out, "coordinator.endpoint"), "w") as f:
            f.write(eps[0] + "\n")

    def _launch(self):
        self._prepare()
        for p in self.role("coordinator"):
            self._start_coordinator(p)
        self._wait_for_coordinators()
        for p in self.role("server"):
            self._start(p, self.planner.server(p, self.coordinators))
        self.t0 = time.monotonic()
        self.start_unix = time.time()
        with open(os.path.join(self.out, "start_unix"), "w") as f:
            f.write(f"{self.start_unix:.6f}\n")
        for p in self.role("worker"):
            self._start(p, self.planner.worker(p, self.coordinators))
        for p in self.role("evaluator"):
            self._start(p, self.planner.evaluator(p, self.coordinators, self.start_unix))
        s = self.spec
        self.say(f"coordinator {self.coordinators}, {s.servers.count} server(s), "
                 f"{s.workers.count} worker(s), model {s.model}, recovery {s.recovery}, "
                 f"backend {s.backend}, job tag {self.tag}; logs in {self.out}", at=False)
        for f in self.faults.faults:
            self.say(f"fault scheduled: {f.action} {f.target} at {f.at_s:g} s"
                     + (f" for {f.for_s:g} s" if f.for_s is not None else "")
                     + (f" ({f.origin})" if f.origin != "schedule" else ""), at=False)

    # ---- events and progress --------------------------------------------------------
    def _read_events(self):
        for p in self.procs:
            if p.handle is not None:
                self.state.feed(p.name, p.handle.events.read())

    def _progress(self):
        if self.t0 is None or time.monotonic() - self.last_progress < self.spec.progress_s:
            return
        self.last_progress = time.monotonic()
        for w in sorted(k for k in self.state.progress if k is not None):
            e = self.state.progress[w]
            self.echo(f"[{self.elapsed():.0f}s] progress worker={w} step={e.get('step')} "
                      f"samples={e.get('samples')} samples_per_s={_fmt(e.get('samples_per_s'))} "
                      f"loss={_fmt(e.get('loss'), 4)} test_acc={_fmt(e.get('test_acc'), 4)}")
        e = self.state.evaluator_progress
        if e:
            self.echo(f"[{self.elapsed():.0f}s] evaluator params_clock={e.get('params_clock')} "
                      f"test_acc={_fmt(e.get('test_acc'), 4)}")

    # ---- exits and restarts -----------------------------------------------------------
    def _reap(self, p):
        """Returns p's exit status if it just exited (events drained)."""
        rc = p.handle.poll()
        if rc is None:
            return None
        self.state.feed(p.name, p.handle.events.read())
        self.backend.close(p.handle)
        p.exit_codes.append(rc)
        p.last_pid = p.handle.pid
        p.handle = None
        return rc

    def _restart(self, p):
        p.restart_at = None
        p.restarts += 1
        if p.role == "coordinator":
            self._start_coordinator(p)
            self.csv("restart_coordinator", p.index)
            flags = []
        else:
            flags = registry.restart_flags(self.policy)
            if p.index not in self.state.checkpoints_written:
                # --restore_from only for a server that wrote a checkpoint part.
                flags = [f for f in flags if not f.startswith("--restore_from")]
            self._start(p, self.planner.server(p, self.coordinators, flags))
            self.csv("restart", p.index)
        self.restarts.append({"process": p.name, "time_s": round(self.elapsed(), 3),
                              "pid": p.handle.pid, "flags": flags})
        self.say(f"restarted {p.role} {p.index} (pid {p.handle.pid})")

    def _check_exits(self):
        """Returns an ending (verdict, reason, exit code) or None."""
        for p in self.procs:
            if p.restart_at is not None and time.monotonic() >= p.restart_at:
                self._restart(p)
        for p in self.procs:
            if p.handle is None:
                continue
            rc = self._reap(p)
            if rc is None:
                continue
            pid = p.last_pid
            if p.role == "worker":
                if rc != 0:
                    self.say(f"worker {p.index} (pid {pid}) exited with code {rc}; the others "
                             "continue")
                continue
            if p.role == "evaluator":
                if rc != 0:
                    self.say(f"the evaluator (pid {pid}) exited with code {rc}")
                continue
            if p.role == "server":
                ending = self._server_exit(p, pid, rc)
            else:
                ending = self._coordinator_exit(p, pid, rc)
            if ending:
                return ending
        return None

    def _server_exit(self, p, pid, rc):
        if self.state.job_end is not None:
            return None  # The coordinator ended the job; it let the servers go.
        if rc == 0 and (p.drained or p.index in self.state.servers_left):
            self.scaler.left(p, rc)
            return None
        if p.joining and p.joined_unix is None:
            self.scaler.join_failed(p, rc)
            return None
        if registry.restarts_servers(self.policy) and p.host.name in self.lost_hosts:
            self.say(f"server {p.index} (pid {pid}) exited with code {rc}; not restarted: its "
                     f"host {p.host.name} is lost")
            self.csv("down", p.index)
            return None
        if registry.restarts_servers(self.policy) and p.restarts >= self.spec.max_restarts:
            reason = (f"server {p.index} (pid {pid}) exited with code {rc} after "
                      f"{p.restarts} restarts (max_restarts); see {p.name}.log")
            self.say(reason)
            return ("failed", reason, EXIT_JOB_FAILED)
        if registry.restarts_servers(self.policy):
            p.restart_at = time.monotonic() + self.spec.restart_after_s
            self.say(f"server {p.index} (pid {pid}) exited with code {rc}; restarting it in "
                     f"{self.spec.restart_after_s:g} s (restart rule "
                     f"{self.policy['needs']['restart']})")
            self.csv("down", p.index)
            return None
        reason = (f"server {p.index} (pid {pid}) died with exit code {rc}; recovery "
                  f"{self.spec.recovery} does not restart servers (restart rule never)")
        self.say(reason)
        return ("failed", reason, EXIT_JOB_FAILED)

    def _coordinator_exit(self, p, pid, rc):
        end = self.state.job_end
        if end is not None and not p.fault_killed and not any(
                q.running for q in self.role("coordinator")):
            verdict = end.get("verdict")
            code = EXIT_DONE if verdict in ("done", "stopped") else EXIT_JOB_FAILED
            return (verdict, f"the coordinator ended the job: {end.get('reason')}", code)
        if p.host.name in self.lost_hosts and any(q.running for q in self.role("coordinator")):
            self.say(f"coordinator {p.index} (pid {pid}) exited with code {rc}; not restarted: "
                     f"its host {p.host.name} is lost")
            return None
        if (self.planner.coordinator_restarts() and p.host.name not in self.lost_hosts
                and p.restarts < self.spec.max_restarts):
            p.restart_at = time.monotonic() + self.spec.restart_after_s
            self.say(f"coordinator {p.index} (pid {pid}) exited with code {rc}; restarting it "
                     f"in {self.spec.restart_after_s:g} s")
            return None
        reason = f"the coordinator (pid {pid}) died with exit code {rc} and no standby leads"
        if self.state.job_failed:
            reason += f"; the job had failed: {self.state.job_failed.get('reason')}"
        self.say(reason)
        return ("coordinator_lost", reason, EXIT_COORDINATOR_LOST)

    # ---- ending -------------------------------------------------------------------------
    def _stop(self, procs, grace_s):
        procs = [p for p in procs if p.running]
        for p in procs:
            p.expected_exit = True
            self.backend.signal(p.handle, signal.SIGCONT)
            self.backend.signal(p.handle, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(p.running for p in procs):
            for p in procs:
                if p.running:
                    self._reap(p)
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        left = [p for p in procs if p.running]
        for p in left:
            self.backend.signal(p.handle, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(p.running for p in left) and time.monotonic() < deadline:
            for p in left:
                if p.running:
                    self._reap(p)
            time.sleep(0.05)

    def _leader(self):
        """The coordinator that last reported leading (leader_elected), else the first."""
        names = [name for name, _ in self.state.leaders]
        for p in self.role("coordinator"):
            if names and p.name == names[-1] and p.running:
                return p
        return self.role("coordinator")[0]

    def _ctl_argv(self, *args):
        """(host, argv) of relaxps-ctl ARGS on the leading coordinator's host
        (the launcher's host may not reach the job's network), with the job's
        operator key (ctl) under curve."""
        c = self._leader()
        argv = [os.path.join(c.host.bin_dir or self.bin_dir, "relaxps-ctl"),
                f"--coordinator={self.planner.advertised_endpoint(c, c.bind_port)}"]
        if self.spec.security == "curve":
            argv += ["--security=curve", f"--keys_dir={c.workdir}/keys"]
        return c.host, argv + list(args)

    def _ctl(self, *args, timeout=20):
        """relaxps-ctl ARGS, waited for; returns (exit code, stdout, stderr)."""
        host, argv = self._ctl_argv(*args)
        r = self.backend.run(host, argv, input_data=b"", timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")

    def spawn_ctl(self, *args):
        """relaxps-ctl ARGS started, not waited for (a Popen: poll it)."""
        host, argv = self._ctl_argv(*args)
        return self.backend.spawn(host, argv)

    def _finish_normally(self):
        """Every worker exited: counters, the evaluator's last evaluation, then
        `relaxps-ctl shutdown` ends the job (servers flush and exit)."""
        if self.spec.collect_stats:
            try:
                code, out, err = self._ctl("--json", "stats")
                with open(os.path.join(self.out, "counters.json"), "w") as f:
                    f.write(out)
                if code != 0:
                    self.say(f"relaxps-ctl stats failed: {err.strip()[-200:]}")
            except (OSError, subprocess.SubprocessError) as e:
                self.say(f"relaxps-ctl stats failed: {e}")
        self._stop(self.role("evaluator"), 60)  # Its last evaluation needs the servers.
        try:
            self._ctl("shutdown", timeout=10)
        except (OSError, subprocess.SubprocessError):
            pass
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(
                p.running for p in self.role("coordinator")):
            self._read_events()
            for p in self.role("coordinator"):
                if p.running:
                    self._reap(p)
            time.sleep(POLL_S / 2)
        self._stop(self.role("server"), 10)
        self._stop(self.role("coordinator"), self.spec.stop_grace_s)

    def _stop_everything(self):
        g = self.spec.stop_grace_s
        self._stop(self.role("worker") + self.role("evaluator"), g)
        self._stop(self.role("server"), g)
        self._stop(self.role("coordinator"), g)

    def _wait_for_job_failure(self):
        """After a lost server the policy does not restart: the coordinator's
        own verdict (job_failed), for up to failure_grace_s."""
        deadline = time.monotonic() + self.spec.failure_grace_s
        while (time.monotonic() < deadline and self.state.job_failed is None
               and self.state.job_end is None and not self.interrupted):
            self._read_events()
            time.sleep(POLL_S / 2)

    def _sweep(self):
        left = []
        for h in {p.host.name: p.host for p in self.procs}.values():
            try:
                left += [f"{h.name}:{pid}" for pid in self.backend.sweep(h, self.tag)]
            except (OSError, subprocess.SubprocessError) as e:
                self.say(f"could not check {h.name} for processes left: {e}")
        if left:
            self.say(f"killed {len(left)} process(es) still carrying the job tag: "
                     f"{' '.join(left)}")
        return left

    def run(self):
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        ending = None
        try:
            try:
                self._launch()
            except LaunchFailed as e:
                if self.interrupted:
                    ending = ("interrupted", f"{self.interrupted} to the launcher during "
                              "start-up", EXIT_INTERRUPTED)
                else:
                    ending = ("launch_failed", str(e), EXIT_LAUNCH_FAILED)
                self.say(str(e), at=False)
            while ending is None:
                if self.interrupted:
                    self.say(f"interrupted ({self.interrupted}); stopping every process")
                    ending = ("interrupted", f"{self.interrupted} to the launcher",
                              EXIT_INTERRUPTED)
                    break
                self._read_events()
                self.faults.apply_due()
                self.scaler.poll()
                if self.sampler:
                    self.sampler.poll()
                ending = self._check_exits()
                if ending:
                    if ending[0] == "failed":
                        self._wait_for_job_failure()
                        if self.state.job_failed:
                            ending = (ending[0], f"{ending[1]}; the coordinator: "
                                      f"{self.state.job_failed.get('reason')}", ending[2])
                    break
                if not any(p.running for p in self.role("worker")):
                    ending = "workers_done"
                    break
                self._progress()
                time.sleep(POLL_S)
            if ending == "workers_done":
                self._finish_normally()
                ending = self._normal_verdict()
            else:
                self._stop_everything()
        except Exception as e:  # A launcher bug: still stop everything, say what happened.
            traceback.print_exc()
            ending = ("error", f"{self.prog} internal error: {e!r}", EXIT_INTERNAL_ERROR)
        finally:
            self._stop_everything()
            self.faults.heal_all()
            left = self._sweep()
            self._read_events_after_end()
            for s, h in old.items():
                signal.signal(s, h)
        self.verdict, self.reason, self.exit_code = ending
        summary.finish(self, left)
        return self.exit_code

    def _read_events_after_end(self):
        if self.state is None:
            return
        for p in self.procs:
            if p.handle is not None:
                self.state.feed(p.name, p.handle.events.read())

    def _normal_verdict(self):
        end = self.state.job_end
        failed = [p for p in self.role("worker") if p.exit_codes and p.exit_codes[-1] != 0]
        if failed and len(failed) == len(self.role("worker")):
            return ("failed", "every worker failed: " + ", ".join(
                f"{p.name} exit code {p.exit_codes[-1]}" for p in failed), EXIT_JOB_FAILED)
        if end is not None and end.get("verdict") not in ("done", "stopped"):
            return (end.get("verdict"), f"the coordinator ended the job: {end.get('reason')}",
                    EXIT_JOB_FAILED)
        reason = "every worker finished"
        if failed:
            reason += " (" + ", ".join(f"{p.name} exit code {p.exit_codes[-1]}"
                                       for p in failed) + ")"
        return ("done", reason, EXIT_DONE)


def _fmt(v, digits=1):
    if v is None:
        return "nan"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)
