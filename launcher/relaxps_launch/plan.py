"""Each process's argv, environment and files: the one place that knows the
binaries' flags, for every backend (a backend only starts what this plans).

A flag in the spec may use {dir} (the process's working folder on its host:
the run folder locally and under Slurm, /tmp/relaxps-<tag> over ssh unless
the host sets workdir), {id} and {name}."""
import ipaddress
import os


class Proc:
    """One process of the job, across its restarts."""

    def __init__(self, role, index, host, name):
        self.role = role          # coordinator, server, worker, evaluator
        self.index = index        # Its id within the role.
        self.host = host          # spec.Host
        self.name = name          # coordinator, coordinator-1, server-0, worker-1, evaluator
        self.workdir = None       # Its folder on its host.
        self.handle = None        # The backend's handle while it runs.
        self.pids = []            # Every incarnation's pid.
        self.exit_codes = []      # Every incarnation's exit status (128+N: signal N).
        self.restarts = 0
        self.restart_at = None    # Monotonic time of a pending restart.
        self.metrics_port = None
        self.expected_exit = False  # The launcher stopped it (or the job's end did).
        self.fault_killed = False   # The fault schedule killed it.
        self.stopped = False        # SIGSTOPped by the fault schedule.
        self.events_path = None
        self.joining = False        # Started with --join (an add_server).
        self.joined_unix = None     # When its member_joined was seen (a joining server).
        self.drained = False        # A drain was requested (relaxps-ctl drain-server).
        self.left = False           # It exited 0 after its drain: gone for good.
        self.scale_row = None       # summary row of its add_server or drain, if any.

    @property
    def running(self):
        return self.handle is not None

    def target_names(self):
        """Fault targets that name it (coordinator-0 is "coordinator")."""
        return {self.name, f"{self.role}-{self.index}"} | (
            {"evaluator"} if self.role == "evaluator" else set())


def process_name(role, index):
    if role == "coordinator":
        return "coordinator" if index == 0 else f"coordinator-{index}"
    if role == "evaluator":
        return "evaluator"
    return f"{role}-{index}"


def events_path(proc, backend, out_dir):
    """Where a process writes its events: beside its work over ssh (the
    watchdog streams them back), else the run folder's events/."""
    return os.path.join(proc.workdir if backend == "ssh" else out_dir, "events",
                        f"{proc.name}.jsonl")


def all_procs(spec):
    procs = []
    for role in ("coordinator", "server", "worker", "evaluator"):
        r = spec.role(role)
        for i in range(r.count):
            procs.append(Proc(role, i, spec.hosts[r.host_of(i)], process_name(role, i)))
    return procs


def _subst(flags, proc):
    return [f.replace("{dir}", proc.workdir).replace("{id}", str(proc.index))
            .replace("{name}", proc.name) for f in flags]


def _has(flags, name):
    return any(f == name or f.startswith(name + "=") for f in flags)


def _public(host):
    return not host.bind.startswith("127.") and host.bind != "localhost"


class Planner:
    """argv(proc, ...) for a spec, the registry's policy entry and the job's
    security/metrics choices."""

    def __init__(self, spec, policy, bin_dir):
        self.spec = spec
        self.needs = policy["needs"]
        self.bin_dir = bin_dir

    def _bin(self, proc, name):
        return os.path.join(proc.host.bin_dir or self.bin_dir, name)

    def _security(self, proc, binds):
        if self.spec.security == "curve":
            return ["--security=curve", f"--keys_dir={proc.workdir}/keys"]
        return ["--insecure_bind_public"] if binds and _public(proc.host) else []

    def _common(self, proc, binds):
        flags = [f"--events_file={proc.events_path}"] + self._security(proc, binds)
        if proc.metrics_port:
            flags.append(f"--metrics_port={proc.metrics_port}")
            if proc.role in ("worker", "evaluator") and _public(proc.host):
                flags.append(f"--metrics_bind={proc.host.bind}")
        return flags

    def _source(self, proc):
        """Away from local runs, a host bound to one numeric address also
        connects from it (--source_address), so that cutting that address off
        (a host partition) cuts its processes off both ways."""
        try:
            bound = ipaddress.ip_address(proc.host.bind)
        except ValueError:
            return []  # A name: the kernel picks the source.
        if self.spec.backend == "local" or bound.is_unspecified:
            return []
        return [f"--source_address={bound}"]

    def _addresses(self, proc):
        """A listening process's --advertise (away from local runs) and
        --source_address."""
        advertise = [] if self.spec.backend == "local" else [f"--advertise={proc.host.addr}"]
        return advertise + self._source(proc)

    def advertised_endpoint(self, proc, port):
        """Where the others reach a process bound on `port` (the host's addr;
        locally its bind address)."""
        host = proc.host.bind if self.spec.backend == "local" else proc.host.addr
        return f"tcp://{host}:{port}"

    def coordinator(self, proc, bind_port):
        s = self.spec
        c = s.coordinator
        argv = [self._bin(proc, "relaxps-coordinator"),
                f"--bind=tcp://{proc.host.bind}:{bind_port or '*'}"] + self._addresses(proc) + [
            f"--num_servers={s.servers.count}", f"--num_workers={s.workers.count}",
            "--exit_when_done=false", f"--consistency={s.consistency}",
            f"--staleness={s.staleness}", f"--recovery={s.recovery}"]
        if self.coordinator_restarts() and not _has(c.flags, "--coordination"):
            # A restarted coordinator resumes the job from its own state.
            argv.append(f"--data_dir={proc.workdir}/data/coordinator-{proc.index}")
        return argv + self._common(proc, True) + _subst(c.flags, proc)

    def coordinator_restarts(self):
        c = self.spec.coordinator
        if c.restart is not None:
            return c.restart
        return c.count > 1 or any(f.target.startswith("coordinator") for f in self.spec.faults)

    def server(self, proc, coordinators, restart_flags=(), join=False):
        """A server's argv: with its id, or (join) with --join and none: the
        coordinator gives it the next free id, which the launcher expects to
        be proc.index (docs/elastic.md, "Joining")."""
        s = self.spec
        flags = _subst(s.servers.flags, proc)
        identity = ["--join"] if join else [f"--server_id={proc.index}"]
        argv = [self._bin(proc, "relaxps-server"), f"--coordinator={coordinators}"] + identity + [
            f"--bind=tcp://{proc.host.bind}:*"] + self._addresses(proc) + [
            f"--data_dir={proc.workdir}/data/server-{proc.index}"]
        if self.needs["store_kind"] != "any" and not _has(flags, "--store"):
            argv.append(f"--store={self.needs['store_kind']}")
        return argv + self._common(proc, True) + flags + list(restart_flags)

    def worker(self, proc, coordinators):
        s = self.spec
        w = s.workers
        if w.command:
            argv = list(w.command)
        else:
            argv = [self._bin(proc, "relaxps-worker")] + self._source(proc)
        argv += [f"--coordinator={coordinators}", f"--worker_id={proc.index}",
                 f"--num_workers={w.count}", f"--model={s.model}",
                 f"--metrics_csv={proc.workdir}/worker-{proc.index}.csv",
                 f"--steps_csv={proc.workdir}/worker-{proc.index}.steps.csv"]
        if s.duration_s is not None:
            argv.append(f"--duration_s={s.duration_s:g}")
        if s.epochs is not None:
            argv.append(f"--epochs={s.epochs}")
        argv += self._common(proc, False) + _subst(w.flags, proc)
        if s.evaluator.count:
            argv += ["--eval_every_s=0", "--final_eval=false"]
        return argv

    def evaluator(self, proc, coordinators, time_origin_unix):
        s = self.spec
        return [self._bin(proc, "relaxps-worker"), "--role=evaluator",
                f"--coordinator={coordinators}", f"--model={s.model}"] + self._source(
            proc) + _subst(s.workers.flags, proc) + [
            f"--eval_every_s={s.evaluator.every_s:g}", "--duration_s=0",
            f"--time_origin_unix={time_origin_unix:.6f}",
            f"--metrics_csv={proc.workdir}/evaluator.csv"] + self._common(
            proc, False) + [f for f in _subst(s.evaluator.flags, proc)
                            if not f.startswith("--eval_every_s=")]

    def env(self, proc):
        return dict(self.spec.env, **self.spec.role(proc.role).env)
