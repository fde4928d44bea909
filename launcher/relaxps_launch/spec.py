"""The job spec: one JSON file (docs/launch.md, "Job spec"), loaded and
validated into plain objects. A bad spec raises SpecError with one line that
names the field; nothing here starts a process."""
import json
import re

BACKENDS = ("local", "ssh", "slurm")
CONSISTENCY = ("bsp", "ssp", "async")
SECURITY = ("plain", "curve")
ACTIONS = ("kill", "stop", "partition", "add_server", "drain")
SCALE_ACTIONS = ("add_server", "drain")  # Elastic servers (docs/elastic.md), not failures.
ROLES = ("coordinator", "server", "worker", "evaluator")


class SpecError(Exception):
    """A spec that cannot run; str() is one line naming the field."""


class Host:
    def __init__(self, name, addr, bind, bin_dir, workdir, metrics_port):
        self.name = name                  # What the backend reaches it by (ssh: [user@]host).
        self.addr = addr                  # The address other hosts reach it at; advertised.
        self.bind = bind                  # The interface its processes bind.
        self.bin_dir = bin_dir            # relaxps binaries there (None: the spec's).
        self.workdir = workdir            # Data, keys and CSVs there (None: the backend's).
        self.metrics_port = metrics_port  # First Prometheus port there (None: off or chosen).


class Role:
    def __init__(self, name, count, hosts, flags, env, command):
        self.name = name          # coordinator, server, worker, evaluator
        self.count = count
        self.hosts = hosts        # Host names, one per process or round-robin.
        self.flags = flags        # Extra flags, after the launcher's own.
        self.env = env            # Extra environment.
        self.command = command    # Workers: a trainer's argv instead of relaxps-worker.

    def host_of(self, index):
        return self.hosts[index % len(self.hosts)]


class Fault:
    def __init__(self, at_s, action, target, for_s=None, origin="schedule", host=None):
        self.at_s = at_s          # Seconds after the workers start.
        # kill, stop (SIGSTOP, then SIGCONT), partition; add_server (a new
        # relaxps-server --join), drain (relaxps-ctl drain-server).
        self.action = action
        # server-1, worker-0, coordinator-0, evaluator, host:NAME; add_server:
        # server-<the id it is expected to get>.
        self.target = target
        self.for_s = for_s        # stop / partition: seconds until SIGCONT / heal.
        self.origin = origin      # "schedule" or "chaos:SEED".
        self.host = host          # add_server: the host it starts on.

    def describe(self):
        d = {"at_s": self.at_s, "action": self.action, "target": self.target,
             "origin": self.origin}
        if self.for_s is not None:
            d["for_s"] = self.for_s
        if self.host is not None:
            d["host"] = self.host
        return d


class Spec:
    """A validated job spec. Attributes are documented in docs/launch.md."""


_TOP_KEYS = {"name", "backend", "bin_dir", "out_dir", "tag", "hosts", "coordinator", "servers",
             "workers", "evaluator", "consistency", "staleness", "recovery", "model",
             "duration_s", "epochs", "restart_after_s", "security", "metrics", "progress_s",
             "faults", "chaos", "collect_stats", "stop_grace_s", "failure_grace_s", "ssh",
             "slurm", "env", "start_timeout_s", "logs", "max_restarts", "sample_servers_s"}
_ROLE_KEYS = {"count", "hosts", "flags", "env", "command", "port", "restart"}
_HOST_KEYS = {"name", "addr", "bind", "bin_dir", "workdir", "metrics_port"}
_FAULT_KEYS = {"at_s", "action", "target", "for_s", "host"}
_CHAOS_KEYS = {"seed", "faults", "from_s", "to_s", "down_s", "min_gap_s", "untolerated"}


def _fail(where, msg):
    raise SpecError(f"{where}: {msg}")


def _check_keys(d, allowed, where):
    if not isinstance(d, dict):
        _fail(where, f"expected an object, got {type(d).__name__}")
    unknown = sorted(set(d) - allowed)
    if unknown:
        _fail(where, f"unknown key '{unknown[0]}' (known: {', '.join(sorted(allowed))})")


def _num(d, key, where, default, minimum=0, integer=False, allow_none=False):
    v = d.get(key, default)
    if v is None and allow_none:
        return None
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok:
        _fail(f"{where}.{key}", f"expected {'an integer' if integer else 'a number'}, got {v!r}")
    if v < minimum:
        _fail(f"{where}.{key}", f"must be >= {minimum}, got {v!r}")
    return v


def _str(d, key, where, default, choices=None, allow_none=False):
    v = d.get(key, default)
    if v is None and allow_none:
        return None
    if not isinstance(v, str) or not v:
        _fail(f"{where}.{key}", f"expected a non-empty string, got {v!r}")
    if choices and v not in choices:
        _fail(f"{where}.{key}", f"must be one of {', '.join(choices)}, got '{v}'")
    return v


def _bool(d, key, where, default):
    v = d.get(key, default)
    if not isinstance(v, bool):
        _fail(f"{where}.{key}", f"expected true or false, got {v!r}")
    return v


def _str_list(d, key, where, flags=False):
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        _fail(f"{where}.{key}", "expected a list of non-empty strings")
    if flags:
        for x in v:
            if not x.startswith("--"):
                _fail(f"{where}.{key}", f"'{x}' is not a --flag")
    return list(v)


def _env(d, key, where):
    v = d.get(key, {})
    if not isinstance(v, dict) or not all(
            isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) and isinstance(x, str)
            for k, x in v.items()):
        _fail(f"{where}.{key}", "expected an object of NAME: \"value\" strings")
    return dict(v)


def _parse_hosts(raw, backend):
    if raw is None:
        if backend != "local":
            _fail("hosts", f"the {backend} backend needs a host list")
        raw = [{"name": "localhost", "addr": "127.0.0.1"}]
    if not isinstance(raw, list) or not raw:
        _fail("hosts", "expected a non-empty list of hosts")
    hosts = {}
    for i, h in enumerate(raw):
        where = f"hosts[{i}]"
        if isinstance(h, str):
            h = {"name": h}
        _check_keys(h, _HOST_KEYS, where)
        name = _str(h, "name", where, None)
        if name in hosts:
            _fail(where, f"host '{name}' listed twice")
        default_addr = name.split("@")[-1]
        if backend == "local":
            default_addr = "127.0.0.1"
        addr = _str(h, "addr", where, default_addr)
        bind = _str(h, "bind", where, "127.0.0.1" if backend == "local" else "0.0.0.0")
        port = _num(h, "metrics_port", where, None, 1, integer=True, allow_none=True)
        hosts[name] = Host(name, addr, bind, _str(h, "bin_dir", where, None, allow_none=True),
                           _str(h, "workdir", where, None, allow_none=True), port)
    return hosts


def _parse_role(raw, name, hosts, default_count):
    where = name if name != "server" else "servers"
    where = "workers" if name == "worker" else where
    if raw is None:
        raw = {}
    _check_keys(raw, _ROLE_KEYS, where)
    count = _num(raw, "count", where, default_count, 1 if name != "evaluator" else 0, integer=True)
    if name == "evaluator" and count > 1:
        _fail(f"{where}.count", "a job has at most one evaluator")
    hl = raw.get("hosts", list(hosts))
    if isinstance(hl, str):
        hl = [hl]
    if not isinstance(hl, list) or not hl:
        _fail(f"{where}.hosts", "expected a non-empty list of host names")
    for h in hl:
        if h not in hosts:
            _fail(f"{where}.hosts", f"unknown host '{h}' (not in hosts)")
    command = raw.get("command")
    if command is not None:
        if name != "worker":
            _fail(f"{where}.command", "only workers take a command (a trainer)")
        command = _str_list(raw, "command", where)
        if not command:
            _fail(f"{where}.command", "expected a non-empty argv list")
    role = Role(name, count, list(hl), _str_list(raw, "flags", where, flags=True),
                _env(raw, "env", where), command)
    role.port = _num(raw, "port", where, 0, 0, integer=True)
    role.restart = raw.get("restart")
    if role.restart is not None and not isinstance(role.restart, bool):
        _fail(f"{where}.restart", f"expected true or false, got {role.restart!r}")
    return role


def _parse_target(t, spec, where, servers=None):
    if not isinstance(t, str):
        _fail(where, f"expected a target string, got {t!r}")
    if t.startswith("host:"):
        if t[5:] not in spec.hosts:
            _fail(where, f"unknown host '{t[5:]}'")
        return t
    if t == "evaluator":
        if spec.evaluator.count == 0:
            _fail(where, "the job has no evaluator")
        return t
    m = re.fullmatch(r"(coordinator|server|worker)-(\d+)", t)
    if not m:
        _fail(where, f"'{t}' is not server-N, worker-N, coordinator-N, evaluator or host:NAME")
    role = spec.role(m.group(1))
    count = servers if servers is not None and role.name == "server" else role.count
    if int(m.group(2)) >= count:
        added = count - role.count
        _fail(where, f"'{t}': the job has {count} {m.group(1)}(s)"
              + (f" by then ({role.count} + {added} added)" if added else ""))
    return t


def parse_fault(raw, spec, where, servers=None):
    """One fault of the schedule; `servers`: how many server ids exist at its
    time (the job's and those added before it; default the job's)."""
    _check_keys(raw, _FAULT_KEYS, where)
    action = _str(raw, "action", where, None, ACTIONS)
    at_s = _num(raw, "at_s", where, None)
    if action == "add_server":
        return _parse_add_server(raw, spec, where, at_s,
                                 spec.servers.count if servers is None else servers)
    if "host" in raw:
        _fail(f"{where}.host", "only an add_server takes a host")
    target = _parse_target(raw.get("target"), spec, f"{where}.target", servers)
    if action == "drain":
        if not target.startswith("server-"):
            _fail(f"{where}.target", f"a drain takes a server (server-N), got '{target}'")
        if "for_s" in raw:
            _fail(f"{where}.for_s", "a drain has no duration (the server leaves for good)")
        return Fault(at_s, action, target)
    for_s = _num(raw, "for_s", where, None, allow_none=True)
    if action in ("stop", "partition") and for_s is None:
        _fail(f"{where}.for_s", f"a {action} needs for_s (seconds until it ends)")
    if action == "kill" and for_s is not None:
        _fail(f"{where}.for_s", "a kill has no duration")
    if action == "partition" and target.split("-")[0] in ("worker", "evaluator"):
        _fail(f"{where}.target", "partitions cut servers, coordinators or hosts off")
    return Fault(at_s, action, target, for_s)


def _parse_add_server(raw, spec, where, at_s, servers):
    if "target" in raw:
        _fail(f"{where}.target", "an add_server takes no target: the new server gets the next "
              f"free id (server-{servers} here)")
    if "for_s" in raw:
        _fail(f"{where}.for_s", "an add_server has no duration (drain it to take it out)")
    if spec.security == "curve":
        _fail(f"{where}.action", "add_server under security curve: a server's key binds its id "
              "and a joining server (relaxps-server --join) takes the next free id, so the "
              "coordinator would refuse it; run the job with security plain")
    host = _str(raw, "host", where, spec.servers.host_of(servers))
    if host not in spec.hosts:
        _fail(f"{where}.host", f"unknown host '{host}' (not in hosts)")
    return Fault(at_s, "add_server", f"server-{servers}", host=host)


def _parse_faults(raw, spec):
    """The schedule in time order (a stable sort: equal times keep the spec's
    order). A server added at T is server-<next id> for every fault after it;
    at least one server must serve after every drain."""
    if not isinstance(raw, list):
        _fail("faults", "expected a list")
    for i, f in enumerate(raw):
        if not isinstance(f, dict):
            _fail(f"faults[{i}]", f"expected an object, got {type(f).__name__}")
        _num(f, "at_s", f"faults[{i}]", None)
    order = sorted(range(len(raw)), key=lambda i: raw[i]["at_s"])
    servers = spec.servers.count
    serving = set(range(servers))
    out = [None] * len(raw)
    for i in order:
        where = f"faults[{i}]"
        f = parse_fault(raw[i], spec, where, servers)
        if f.action == "add_server":
            serving.add(servers)
            servers += 1
        elif f.action == "drain":
            sid = int(f.target.split("-")[1])
            if sid not in serving:
                _fail(f"{where}.target", f"{f.target} is drained twice")
            if len(serving) == 1:
                _fail(f"{where}.target", f"draining {f.target} would leave no server serving")
            serving.discard(sid)
        out[i] = f
    return out


def parse(raw, origin="spec"):
    """Validates a spec object (already JSON-decoded); returns a Spec."""
    _check_keys(raw, _TOP_KEYS, origin)
    s = Spec()
    s.name = _str(raw, "name", "name", "relaxps")
    s.backend = _str(raw, "backend", "backend", "local", BACKENDS)
    s.bin_dir = _str(raw, "bin_dir", "bin_dir", None, allow_none=True)
    s.out_dir = _str(raw, "out_dir", "out_dir", None, allow_none=True)
    s.tag = _str(raw, "tag", "tag", None, allow_none=True)
    if s.tag is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", s.tag):
        _fail("tag", "letters, digits, '.', '_' and '-' only")
    s.hosts = _parse_hosts(raw.get("hosts"), s.backend)
    s.coordinator = _parse_role(raw.get("coordinator"), "coordinator", s.hosts, 1)
    s.servers = _parse_role(raw.get("servers"), "server", s.hosts, 1)
    s.workers = _parse_role(raw.get("workers"), "worker", s.hosts, 1)
    ev = raw.get("evaluator")
    if ev is not None and not isinstance(ev, dict):
        _fail("evaluator", "expected an object")
    s.evaluator = _parse_role(ev if ev is not None else {"count": 0}, "evaluator", s.hosts,
                              1 if ev is not None else 0)
    s.evaluator.every_s = 0
    if s.evaluator.count:
        s.evaluator.every_s = 5.0
        for f in s.evaluator.flags:
            if f.startswith("--eval_every_s="):
                s.evaluator.every_s = float(f.split("=", 1)[1] or 0)
    s.consistency = _str(raw, "consistency", "consistency", "async", CONSISTENCY)
    s.staleness = _num(raw, "staleness", "staleness", 2, integer=True)
    s.recovery = _str(raw, "recovery", "recovery", "none")
    s.model = _str(raw, "model", "model", "mlp")
    s.duration_s = _num(raw, "duration_s", "duration_s", None, allow_none=True)
    s.epochs = _num(raw, "epochs", "epochs", None, 1, integer=True, allow_none=True)
    if s.duration_s is None and s.epochs is None:
        s.duration_s = 60
    s.restart_after_s = _num(raw, "restart_after_s", "restart_after_s", 1)
    # A process restarted this often that exits again fails the job (a
    # binary that cannot start is not restarted forever).
    s.max_restarts = _num(raw, "max_restarts", "max_restarts", 20, integer=True)
    s.security = _str(raw, "security", "security", "plain", SECURITY)
    s.metrics = _bool(raw, "metrics", "metrics", False)
    s.progress_s = _num(raw, "progress_s", "progress_s", 5)
    s.collect_stats = _bool(raw, "collect_stats", "collect_stats", True)
    # false: every process's output goes to /dev/null (nothing is read from it).
    s.logs = _bool(raw, "logs", "logs", True)
    s.stop_grace_s = _num(raw, "stop_grace_s", "stop_grace_s", 3)
    s.failure_grace_s = _num(raw, "failure_grace_s", "failure_grace_s", 5)
    s.start_timeout_s = _num(raw, "start_timeout_s", "start_timeout_s", 30, 1)
    s.env = _env(raw, "env", "env")
    ssh = raw.get("ssh", {})
    _check_keys(ssh, {"command", "shell"}, "ssh")
    s.ssh_command = _str_list(ssh, "command", "ssh") or ["ssh", "-T", "-o", "BatchMode=yes",
                                                        "{host}"]
    # true: the prefix hands its arguments to a remote shell as one command
    # line (ssh); false: it executes them as argv (ip netns exec, sudo -u).
    s.ssh_shell = _bool(ssh, "shell", "ssh", True)
    if "{host}" not in s.ssh_command:
        _fail("ssh.command", "must contain a \"{host}\" element")
    slurm = raw.get("slurm", {})
    _check_keys(slurm, {"srun"}, "slurm")
    s.srun_command = _str_list(slurm, "srun", "slurm") or ["srun"]
    if s.coordinator.count > 1 and not any(f.startswith("--coordination=")
                                           for f in s.coordinator.flags):
        _fail("coordinator.count", "more than one coordinator needs --coordination=zk://... "
              "in coordinator.flags")
    s.faults = _parse_faults(raw.get("faults", []), s)
    # Seconds between samples of every server's counters (Prometheus) into
    # servers.csv; 0: none. Needs metrics.
    s.sample_servers_s = _num(raw, "sample_servers_s", "sample_servers_s", 0)
    if s.sample_servers_s and not (s.metrics or any(h.metrics_port for h in s.hosts.values())):
        _fail("sample_servers_s", "sampling the servers' counters needs \"metrics\": true "
              "(their Prometheus ports)")
    chaos = raw.get("chaos")
    s.chaos = None
    if chaos is not None:
        _check_keys(chaos, _CHAOS_KEYS, "chaos")
        s.chaos = {"seed": _num(chaos, "seed", "chaos", None, integer=True),
                   "faults": _num(chaos, "faults", "chaos", 2, integer=True),
                   "from_s": _num(chaos, "from_s", "chaos", 5),
                   "to_s": _num(chaos, "to_s", "chaos", None, allow_none=True),
                   "down_s": _num(chaos, "down_s", "chaos", 3),
                   "min_gap_s": _num(chaos, "min_gap_s", "chaos", 8),
                   "untolerated": _bool(chaos, "untolerated", "chaos", False)}
    return s


def role_of(spec, name):
    return {"coordinator": spec.coordinator, "server": spec.servers, "worker": spec.workers,
            "evaluator": spec.evaluator}[name]


Spec.role = role_of


def load(path):
    """Reads and validates the spec file at `path` (/dev/fd/N and pipes too);
    returns (Spec, its text). SpecError on any problem."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SpecError(f"cannot read {path}: {e.strerror}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
    return parse(raw), text


def check_policy(spec, registry):
    """What the recovery policy registry says about this spec (registry.Registry)."""
    policy = registry.get(spec.recovery)
    if policy is None:
        _fail("recovery", f"unknown policy '{spec.recovery}' (registered: "
              f"{', '.join(registry.names())})")
    needs = policy["needs"]
    if spec.servers.count < needs["min_servers"]:
        _fail("servers.count", f"recovery {spec.recovery} needs at least "
              f"{needs['min_servers']} servers, got {spec.servers.count}")
    return policy
