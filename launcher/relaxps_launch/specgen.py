"""`relaxps-launch make-spec KIND [flags...]`: the job spec that the shell
wrappers' flags describe, printed as JSON (the wrappers then run it):

  run_local  scripts/run_local.sh's flags (one host, local backend)
  hostfile   scripts/launch.sh's flags and hostfile (ssh backend)
  slurm      scripts/slurm/relaxps.sbatch's flags inside an allocation
             (slurm backend; hosts from SLURM_JOB_NODELIST)

A bad flag exits 2 with one line. `make-spec KIND --help` prints the flags."""
import json
import os
import re
import subprocess
import sys
import time

RUN_LOCAL_HELP = """\
scripts/run_local.sh: a complete relaxps job on this machine (coordinator,
--servers parameter servers, --workers training workers on 127.0.0.1), run by
relaxps-launch (docs/launch.md). Output: a progress line every --progress_s
(5) seconds, the workers' final lines and the final test accuracy; logs,
metrics CSVs, events.jsonl, events.csv and summary.json in runs/<time>/.

  scripts/run_local.sh [--servers=2] [--workers=2] [--model=cnn] [--duration_s=120]
                       [--epochs=N] [--consistency=async|ssp|bsp] [--staleness=2]
                       [--out_dir=runs/<time>] [--port=0] [worker flags...]

Coordinator flags: --consistency, --staleness, --recovery, --heartbeat_timeout_ms,
  --replicas, --checkpoint_every_clocks, --checkpoint_every_s; --coordinator.X=Y
  passes any other. Server flags: --store, --cache_mb, --wal_per_update,
  --flush_every_clocks, --keep_checkpoints, --restore_from=latest; --server.X=Y
  passes any other (RocksDB data under <out_dir>/data/server-<i>). Every other
  --flag goes to the workers (--lr, --batch, --optimizer, --seed, --device...).
--recovery=P: what the policy registry says (relaxps-ctl policies) decides
  which dead servers are restarted (--restart_after_s=1 later, with the
  policy's restart flags) and the store; under none a dead server fails the job.
--security=curve: fresh CurveZMQ keys under <out_dir>/keys for every process.
--metrics: a Prometheus port per process; <out_dir>/prometheus.yml, metrics.txt.
--no_logs: every process's output goes to /dev/null (no value is read from logs:
  summary.json, events.csv and the printed lines are the same without them).
--evaluator_every_s=S: relaxps-worker --role=evaluator evaluates the model every
  S s into <out_dir>/evaluator.csv; the workers then do not evaluate.
--trainer=FILE.py: workers run `/usr/bin/python3 FILE.py` (PYTHONPATH=<build>/python,
  RELAXPS_PYTHONPATH overrides it), e.g. examples/pytorch_cnn.py.
Faults (seconds after the workers start; events.csv and summary.json record them):
  --kill_server=ID[,ID...]@S        SIGKILL (several ids: at once)
  --stop_server=ID@S+D              SIGSTOP, SIGCONT D s later
  --partition_server=ID@S+D         iptables DROP on its TCP ports for D s (the
                                    job runs in its own network namespace; root)
  --kill_coordinator=ID@S           restarted --restart_after_s later
  --chaos=SEED                      a seeded schedule the policy tolerates
Elastic servers (docs/elastic.md; the servers' pushes in <out_dir>/servers.csv
  with --sample_servers_s=S, which needs --metrics):
  --add_server=S[,S...]             a new relaxps-server --join at S s each
  --drain_server=ID@S               relaxps-ctl drain-server ID at S s
Coordinator HA: --coordinators=N --coordination=zk (a local ZooKeeper, scripts/zk.sh).
Exit codes: those of relaxps-launch (0 done, 2 bad flags, 3 job failed,
  4 coordinator lost, 5 launch failed, 130 interrupted).
"""

HOSTFILE_HELP = """\
scripts/launch.sh: a relaxps job on several hosts named in a hostfile, over ssh
(or any command prefix, --exec), run by relaxps-launch (docs/launch.md).

  scripts/launch.sh --hostfile=FILE [--exec=CMD] [--out_dir=runs/launch-<time>]
                    [--bin=DIR] [--security=curve|plain] [--model=mlp]
                    [--duration_s=60] [--coordinator.X=Y] [--server.X=Y] [worker flags...]

Hostfile: one line per host ('#' starts a comment): HOST ROLES [key=value...]
  ROLES  comma-separated coordinator, server[xN], worker[xN], evaluator
  keys   addr=ADDR (advertised; default HOST without user@), bind=ADDR
         (default 0.0.0.0), port=N (the coordinator's), bin=DIR, workdir=DIR,
         metrics_port=N (first Prometheus port of that host's processes)
--exec: command prefix with {host} (default 'ssh -T -o BatchMode=yes {host}'),
  e.g. 'ip netns exec {host}'. --consistency, --staleness, --recovery,
  --replicas go to the coordinator; other --flags to the workers. Faults:
  --kill=TARGET@S, --stop=TARGET@S+D, --partition=TARGET@S+D (TARGET:
  server-N, worker-N, coordinator-0 or host:NAME), --chaos=SEED.
"""

SLURM_HELP = """\
scripts/slurm/relaxps.sbatch: a relaxps job inside a Slurm allocation, each
process an srun step on a node of the allocation, run by relaxps-launch.

  sbatch [--nodes=N --ntasks=T] scripts/slurm/relaxps.sbatch [--servers=S] [--workers=W]
         [--security=curve|plain] [--coordinator.X=Y] [--server.X=Y] [worker flags...]

Placement: the coordinator on the first node, servers and workers round-robin
over the nodes. --workers defaults to SLURM_NTASKS - 1 - S. Every process binds
0.0.0.0 and advertises its node's name (RELAXPS_ADVERTISE_<node>=ADDR overrides).
"""


class FlagError(Exception):
    pass


def _int(name, v, minimum=0):
    if not re.fullmatch(r"\d+", v) or int(v) < minimum:
        raise FlagError(f"--{name} must be a number >= {minimum}, got '{v}'")
    return int(v)


def _secs(name, v):
    if not re.fullmatch(r"\d+(\.\d+)?", v):
        raise FlagError(f"--{name} must be a number of seconds, got '{v}'")
    return float(v) if "." in v else int(v)


COORD_FLAGS = ("--staleness=", "--heartbeat_timeout_ms=", "--replicas=",
               "--checkpoint_every_clocks=", "--checkpoint_every_s=")
SERVER_FLAGS = ("--store=", "--cache_mb=", "--wal_per_update", "--flush_every_clocks=",
                "--keep_checkpoints=", "--restore_from=latest")


def _route(arg, s):
    """Coordinator / server / worker flags shared by every front end; True if taken."""
    if arg.startswith("--consistency="):
        s["consistency"] = arg.split("=", 1)[1]
    elif arg.startswith("--staleness="):
        s["staleness"] = _int("staleness", arg.split("=", 1)[1])
    elif arg.startswith("--recovery="):
        s["recovery"] = arg.split("=", 1)[1]
    elif arg.startswith(COORD_FLAGS):
        s["coordinator"].setdefault("flags", []).append(arg)
    elif arg.startswith(SERVER_FLAGS):
        s["servers"].setdefault("flags", []).append(arg)
    elif arg.startswith("--coordinator."):
        s["coordinator"].setdefault("flags", []).append("--" + arg[len("--coordinator."):])
    elif arg.startswith("--server."):
        s["servers"].setdefault("flags", []).append("--" + arg[len("--server."):])
    elif arg.startswith("--chaos="):
        s["chaos"] = {"seed": _int("chaos", arg.split("=", 1)[1])}
    elif arg.startswith("--model="):
        s["model"] = arg.split("=", 1)[1]
    elif arg.startswith("--duration_s="):
        s["duration_s"] = _secs("duration_s", arg.split("=", 1)[1])
    elif arg.startswith("--epochs="):
        s["epochs"] = _int("epochs", arg.split("=", 1)[1], 1)
    elif arg.startswith("--security="):
        s["security"] = arg.split("=", 1)[1]
    elif arg.startswith("--out_dir="):
        s["out_dir"] = os.path.abspath(arg.split("=", 1)[1])
    elif arg.startswith("--"):
        s["workers"].setdefault("flags", []).append(arg)
    else:
        raise FlagError(f"unexpected argument '{arg}' (see --help)")
    return True


def _fault(kind, value, servers, target_role="server"):
    """ID[,ID...]@S or ID@S+D (run_local) / TARGET@S[+D] (launch.sh)."""
    m = re.fullmatch(r"(.+)@(\d+(?:\.\d+)?)(?:\+(\d+(?:\.\d+)?))?", value)
    needs_for = kind in ("stop", "partition")
    if not m or bool(m.group(3)) != needs_for:
        form = "ID@SECONDS+SECONDS" if needs_for else "ID@SECONDS"
        raise FlagError(f"--{kind}...={value}: expected {form}")
    at = float(m.group(2))
    out = []
    for t in m.group(1).split(","):
        if target_role and re.fullmatch(r"\d+", t):
            if servers is not None and int(t) >= servers:
                raise FlagError(f"--{kind}_{target_role}={value}: id {t} >= --{target_role}s")
            t = f"{target_role}-{t}"
        f = {"at_s": at, "action": kind, "target": t}
        if needs_for:
            f["for_s"] = float(m.group(3))
        out.append(f)
    return out


def run_local(args, env):
    s = {"name": "run_local", "backend": "local", "model": "cnn", "servers": {"count": 2},
         "workers": {"count": 2}, "coordinator": {}, "progress_s": 5, "faults": []}
    faults, ckills, coordinators, zk, trainer, evaluator_s = [], [], 1, None, None, 0
    for a in args:
        k, _, v = a.partition("=")
        if k == "--servers":
            s["servers"]["count"] = _int("servers", v, 1)
        elif k == "--workers":
            s["workers"]["count"] = _int("workers", v, 1)
        elif k == "--port":
            s["coordinator"]["port"] = _int("port", v)
        elif k == "--progress_s":
            s["progress_s"] = _secs("progress_s", v)
        elif k == "--restart_after_s":
            s["restart_after_s"] = _secs("restart_after_s", v)
        elif k in ("--kill_server", "--stop_server", "--partition_server"):
            faults.append((k[2:].split("_")[0], v))
        elif k == "--kill_coordinator":
            ckills.append(v)
        elif k == "--add_server":
            s["faults"] += [{"at_s": _secs("add_server", t), "action": "add_server"}
                            for t in v.split(",")]
        elif k == "--drain_server":
            # The id may be of a server added earlier: the spec checks it.
            s["faults"] += _fault("drain", v, None)
        elif k == "--sample_servers_s":
            s["sample_servers_s"] = _secs("sample_servers_s", v)
        elif k == "--coordinators":
            coordinators = _int("coordinators", v, 1)
        elif k == "--coordination":
            if v not in ("none", "zk"):
                raise FlagError(f"--coordination must be none or zk, got '{v}'")
        elif k == "--zk":
            zk = v
        elif k == "--evaluator_every_s":
            evaluator_s = _secs("evaluator_every_s", v)
        elif k == "--trainer":
            trainer = v
        elif a == "--metrics":
            s["metrics"] = True
        elif a == "--no_logs":
            s["logs"] = False
        elif a == "--skip_build":
            pass
        else:
            _route(a, s)
    if coordinators > 1 and not zk:
        raise FlagError(f"--coordinators={coordinators} needs --coordination=zk "
                        "(one coordinator without)")
    s["coordinator"]["count"] = coordinators
    if zk:
        s["coordinator"].setdefault("flags", []).append(f"--coordination=zk://{zk}/relaxps")
    for kind, v in faults:
        s["faults"] += _fault(kind, v, s["servers"]["count"])
    for v in ckills:
        s["faults"] += _fault("kill", v, coordinators, "coordinator")
    if ckills:
        s["coordinator"]["restart"] = True
    if "duration_s" not in s and "epochs" not in s:
        s["duration_s"] = 120
    if evaluator_s:
        if trainer:
            raise FlagError("--evaluator_every_s runs relaxps-worker's model; not with --trainer")
        s["evaluator"] = {"flags": [f"--eval_every_s={evaluator_s:g}"]}
    if trainer:
        if not os.path.isfile(trainer):
            raise FlagError(f"--trainer={trainer}: no such file")
        py = env.get("RELAXPS_PYTHONPATH") or os.path.join(env["RELAXPS_BUILD"], "python")
        s["workers"]["command"] = ["/usr/bin/python3", os.path.abspath(trainer)]
        s["workers"]["env"] = {"PYTHONPATH": py + (":" + env["PYTHONPATH"]
                                                   if env.get("PYTHONPATH") else "")}
    s.setdefault("out_dir", os.path.join(env["RELAXPS_ROOT"], "runs",
                                         time.strftime("%Y%m%d-%H%M%S")))
    return s


def _hostfile(path):
    hosts, roles = [], {"coordinator": [], "server": [], "worker": [], "evaluator": []}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise FlagError(f"cannot read hostfile {path}: {e.strerror}") from None
    for n, line in enumerate(lines, 1):
        f = line.split("#", 1)[0].split()
        if not f:
            continue
        if len(f) < 2:
            raise FlagError(f"{path}:{n}: expected 'HOST ROLES [key=value...]'")
        h = {"name": f[0]}
        keys = {"addr": "addr", "bind": "bind", "bin": "bin_dir", "workdir": "workdir",
                "metrics_port": "metrics_port", "port": "port"}
        for kv in f[2:]:
            k, _, v = kv.partition("=")
            if k not in keys or not v:
                raise FlagError(f"{path}:{n}: unknown key '{kv}' ({', '.join(keys)})")
            h[keys[k]] = int(v) if k in ("metrics_port", "port") and v.isdigit() else v
        port = h.pop("port", None)
        hosts.append(h)
        for r in f[1].split(","):
            m = re.fullmatch(r"(coordinator|server|worker|evaluator)(?:x(\d+))?", r)
            if not m:
                raise FlagError(f"{path}:{n}: unknown role '{r}' (coordinator, server[xN], "
                                "worker[xN], evaluator)")
            roles[m.group(1)] += [f[0]] * int(m.group(2) or 1)
            if m.group(1) == "coordinator" and port:
                roles["port"] = port
    if len(roles["coordinator"]) != 1:
        raise FlagError(f"{path}: needs exactly one coordinator, found "
                        f"{len(roles['coordinator'])}")
    if not roles["server"] or not roles["worker"]:
        raise FlagError(f"{path}: needs at least one server and one worker")
    return hosts, roles


def hostfile(args, env):
    s = {"name": "launch", "backend": "ssh", "model": "mlp", "duration_s": 60,
         "security": "curve", "coordinator": {}, "servers": {}, "workers": {}, "faults": []}
    path = None
    for a in args:
        k, _, v = a.partition("=")
        if k == "--hostfile":
            path = v
        elif k == "--exec":
            if "{host}" not in v:
                raise FlagError("--exec must contain {host}, e.g. 'ssh {host}'")
            # ssh runs a command line in a remote shell; other prefixes
            # (ip netns exec {host}) execute an argv.
            s["ssh"] = {"command": v.split(), "shell": os.path.basename(v.split()[0]) == "ssh"}
        elif k == "--bin":
            s["bin_dir"] = os.path.abspath(v)
        elif k in ("--kill", "--stop", "--partition"):
            s["faults"] += _fault(k[2:], v, None, None)
        else:
            _route(a, s)
    if not path:
        raise FlagError("--hostfile=FILE is required (see --help)")
    hosts, roles = _hostfile(path)
    s["hosts"] = hosts
    for role, key in (("coordinator", "coordinator"), ("server", "servers"),
                      ("worker", "workers")):
        s[key].update(count=len(roles[role]), hosts=roles[role])
    if roles.get("port"):
        s["coordinator"]["port"] = roles["port"]
    if roles["evaluator"]:
        s["evaluator"] = {"hosts": roles["evaluator"][:1]}
    s.setdefault("out_dir", os.path.join(env["RELAXPS_ROOT"], "runs",
                                         "launch-" + time.strftime("%Y%m%d-%H%M%S")))
    return s


def slurm(args, env):
    nodes = env.get("SLURM_JOB_NODELIST")
    ntasks = env.get("SLURM_NTASKS")
    if not nodes or not ntasks:
        raise FlagError("run it inside a Slurm allocation (sbatch, salloc): "
                        "SLURM_JOB_NODELIST / SLURM_NTASKS are not set")
    try:
        names = subprocess.run(["scontrol", "show", "hostnames", nodes], check=True,
                               stdout=subprocess.PIPE, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as e:
        raise FlagError(f"scontrol show hostnames {nodes} failed: {e}") from None
    s = {"name": "slurm", "backend": "slurm", "model": "mlp", "duration_s": 60,
         "security": "curve", "coordinator": {"hosts": names[:1]}, "servers": {"count": 2},
         "workers": {}, "faults": []}
    workers = None
    for a in args:
        k, _, v = a.partition("=")
        if k == "--servers":
            s["servers"]["count"] = _int("servers", v, 1)
        elif k == "--workers":
            workers = _int("workers", v, 1)
        else:
            _route(a, s)
    if workers is None:
        workers = int(ntasks) - 1 - s["servers"]["count"]
        if workers < 1:
            raise FlagError(f"{ntasks} tasks cannot hold a coordinator, "
                            f"{s['servers']['count']} server(s) and a worker")
    s["workers"]["count"] = workers
    s["hosts"] = [{"name": n, "addr": env.get(f"RELAXPS_ADVERTISE_{n}", n)} for n in names]
    s.setdefault("out_dir", os.path.join(env.get("SLURM_SUBMIT_DIR", os.getcwd()), "runs",
                                         f"slurm-{env.get('SLURM_JOB_ID', 'local')}"))
    return s


KINDS = {"run_local": (run_local, RUN_LOCAL_HELP), "hostfile": (hostfile, HOSTFILE_HELP),
         "slurm": (slurm, SLURM_HELP)}


def main(argv, name="relaxps-launch"):
    if not argv or argv[0] not in KINDS:
        print(f"{name}: make-spec KIND [flags...], KIND one of {', '.join(KINDS)}",
              file=sys.stderr)
        return 2
    fn, text = KINDS[argv[0]]
    if "--help" in argv[1:] or "-h" in argv[1:]:
        print(text, end="")
        return 0
    env = dict(os.environ)
    # Default run folders go under the source tree's runs/ (or ./runs when installed).
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    if not os.path.isdir(os.path.join(root, "scripts")):
        root = os.getcwd()
    env.setdefault("RELAXPS_ROOT", root)
    env.setdefault("RELAXPS_BUILD", os.path.join(root, env.get("BUILD_DIR", "build")))
    try:
        print(json.dumps(fn(argv[1:], env), indent=1))
    except FlagError as e:
        print(f"{env.get('RELAXPS_SCRIPT', name)}: {e}", file=sys.stderr)
        return 2
    return 0
