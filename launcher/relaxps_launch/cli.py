"""relaxps-launch's command line (docs/launch.md):

  relaxps-launch SPEC.json [--out_dir=DIR] [--bin=DIR] [--chaos=SEED] [--tag=TAG]
                 [--name=NAME] [--check]
  relaxps-launch --sweep=TAG      kill what carries RELAXPS_JOB_TAG=TAG on this host
  relaxps-launch make-spec KIND [flags...]   the spec a wrapper's flags describe (specgen.py)
"""
import argparse
import os
import random
import shutil
import sys
import time

from relaxps_launch import chaos, proctools, spec as specmod, specgen
from relaxps_launch.registry import Registry, RegistryError
from relaxps_launch.supervisor import (EXIT_BAD_SPEC, EXIT_LAUNCH_FAILED, Supervisor)


def _default_bin():
    if os.environ.get("RELAXPS_BIN"):
        return os.environ["RELAXPS_BIN"]
    entry = os.path.dirname(os.path.realpath(sys.argv[0] or "."))
    for d in (os.path.dirname(os.path.abspath(sys.argv[0] or ".")), entry,
              os.path.join(entry, "..", "build", "bin")):
        if os.access(os.path.join(d, "relaxps-coordinator"), os.X_OK):
            return os.path.abspath(d)
    return os.path.abspath(os.path.join(entry, "..", "build", "bin"))


def _parser():
    p = argparse.ArgumentParser(prog="relaxps-launch", description=(
        "Runs a relaxps job from a JSON spec and supervises it (docs/launch.md). Exit codes: "
        "0 done, 2 bad spec or usage, 3 job failed, 4 coordinator lost, 5 launch failed, "
        "130 interrupted."))
    p.add_argument("spec", nargs="?", help="the job spec (JSON)")
    p.add_argument("--out_dir", help="run folder (default: the spec's, else runs/<time>)")
    p.add_argument("--bin", help="folder of the relaxps binaries (default: next to "
                   "relaxps-launch, $RELAXPS_BIN, or build/bin)")
    p.add_argument("--chaos", type=int, metavar="SEED",
                   help="add a seeded fault schedule of faults the policy tolerates")
    p.add_argument("--tag", help="the job tag (RELAXPS_JOB_TAG; default: generated)")
    p.add_argument("--name", default="relaxps-launch", help="name in its messages")
    p.add_argument("--check", action="store_true", help="validate the spec and exit")
    p.add_argument("--sweep", metavar="TAG", help="kill every process carrying the tag here")
    return p


def _bad(name, msg):
    print(f"{name}: bad spec: {msg}", file=sys.stderr)
    return EXIT_BAD_SPEC


def _needs_netns(spec):
    return (spec.backend == "local" and any(f.action == "partition" for f in spec.faults)
            and os.environ.get("RELAXPS_NETNS") != "1")


def _reexec_in_netns(name):
    """Partitions of local processes are iptables rules: the whole job runs in
    a private network namespace (unshare -n) so the rules vanish with it."""
    missing = [t for t in ("unshare", "iptables", "ip") if not shutil.which(t)]
    if missing or os.geteuid() != 0:
        print(f"{name}: partitions need root and {', '.join(missing) or 'iptables'} "
              "(apt-get install iptables iproute2)", file=sys.stderr)
        return EXIT_LAUNCH_FAILED
    argv = [os.path.realpath(sys.argv[0])] + sys.argv[1:]
    os.execvp("unshare", ["unshare", "-n", "env", "RELAXPS_NETNS=1", "sh", "-c",
                          'ip link set lo up && exec "$0" "$@"', sys.executable] + argv)
    return EXIT_LAUNCH_FAILED


def main(argv):
    if argv and argv[0] == "make-spec":
        return specgen.main(argv[1:])
    args = _parser().parse_args(argv)
    name = args.name
    if args.sweep:
        print(" ".join(map(str, proctools.sweep(args.sweep))))
        return 0
    if not args.spec:
        print(f"{name}: a spec file is required (see --help)", file=sys.stderr)
        return EXIT_BAD_SPEC
    try:
        spec, text = specmod.load(args.spec)
    except specmod.SpecError as e:
        return _bad(name, str(e))
    bin_dir = os.path.abspath(args.bin or spec.bin_dir or _default_bin())
    try:
        reg = Registry.from_bin(bin_dir)
    except RegistryError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return EXIT_LAUNCH_FAILED
    try:
        policy = specmod.check_policy(spec, reg)
        if args.chaos is not None:
            spec.chaos = dict(spec.chaos or {"faults": 2, "from_s": 5, "to_s": None,
                                             "down_s": 3, "min_gap_s": 8,
                                             "untolerated": False}, seed=args.chaos)
        if spec.chaos is not None:
            spec.faults += chaos.draw(spec.chaos["seed"], policy["needs"], spec.servers.count,
                                      spec.duration_s, spec.chaos)
    except specmod.SpecError as e:
        return _bad(name, str(e))
    if args.check:
        print(f"{name}: spec OK: {spec.coordinator.count} coordinator(s), "
              f"{spec.servers.count} server(s), {spec.workers.count} worker(s), "
              f"{len(spec.faults)} fault(s), recovery {spec.recovery}, backend {spec.backend}")
        return 0
    if _needs_netns(spec):
        return _reexec_in_netns(name)
    for b in ("relaxps-coordinator", "relaxps-server", "relaxps-worker"):
        if spec.backend != "ssh" and not os.access(os.path.join(bin_dir, b), os.X_OK):
            print(f"{name}: {os.path.join(bin_dir, b)} not found", file=sys.stderr)
            return EXIT_LAUNCH_FAILED
    out = args.out_dir or spec.out_dir or os.path.join(
        os.getcwd(), "runs", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    out = os.path.abspath(out)
    with open(os.path.join(out, "job.json"), "w") as f:
        f.write(text)  # The run's own record of what it ran.
    tag = args.tag or spec.tag or "relaxps-%s-%d-%04x" % (
        time.strftime("%Y%m%d%H%M%S"), os.getpid(), random.getrandbits(16))

    def echo(line):
        print(line, flush=True)
    return Supervisor(spec, policy, bin_dir, out, tag, prog=name, echo=echo).run()
