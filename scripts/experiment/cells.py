"""The experiment matrix's cells (issue 42): policy variants x faults x
workers x seeds, each one relaxps-launch job keyed by its config and seed.

Every registered policy is a variant. To add a variant a flag selects (e.g.
once `--checkpoint_mode` exists), add one line to FLAG_VARIANTS: a name, the
registered policy and the flags that select it
(run_local.sh's syntax: --coordinator.X / --server.X / worker flags). A
variant whose binaries refuse its flags is skipped with that reason
(probe_variants), never silently. To add a fault kind, add one entry to
FAULTS: the run_local.sh fault flags it adds and which policies it applies
to (from the registry's needs, never a policy name).
"""
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Variant:
    name: str
    policy: str
    flags: tuple = ()


# Every registered policy is a variant of its own name (a new policy joins
# the matrix with no change here). These add the variants a flag selects;
# issue 42 point 1 adds the flags, until then the probe reports them
# skipped ("relaxps-coordinator does not accept ...").
FLAG_VARIANTS = [
    Variant("checkpoint-sync", "checkpoint", ("--coordinator.checkpoint_mode=sync",)),
    Variant("chain-async", "chain", ("--coordinator.replication=async",)),
]


# What a policy needs sized for the experiments' models. replay: the
# workers' log must hold every update since the last complete checkpoint. The
# cnn pushes 3.35 MB a step at ~110 steps/s, so the 5 s between checkpoints
# (and one that fails at the kill: up to ~10.5 s) takes 1.8-3.9 GB; the
# default 1 GiB held 5.5 s only, and a kill landing just before a checkpoint
# completed dropped 35 updates (seed 2, kill1). 4 GiB holds 11 s.
POLICY_FLAGS = {"replay": ("--replay_log_mb=4096",)}


def variants(policy_names):
    """The variants of the registered policies, in registry order, each
    policy's flag variants right after it."""
    out = []
    for name in policy_names:
        out.append(Variant(name, name, POLICY_FLAGS.get(name, ())))
        out += [v for v in FLAG_VARIANTS if v.policy == name]
    return out


@dataclass
class Protocol:
    """Times of a set: fault times (s after the workers start), outage length."""
    duration_s: float
    fault_at: list
    down_s: float
    eval_every_s: float = 2.0
    model: str = "cnn"
    consistency: str = "async"


def _t(p, i):
    return p.fault_at[i] if i < len(p.fault_at) else p.fault_at[-1] + (i - len(p.fault_at) + 1) * (
        p.down_s + 30)


# fault -> (applies(needs), flags(protocol), expected launcher exit code(needs)).
FAULTS = {
    "nofault": (lambda n: True, lambda p: [], lambda n: 0),
    "kill1": (lambda n: n["tolerates_server_loss"],
              lambda p: [f"--kill_server=0@{_t(p, 0):g}"], lambda n: 0),
    "kill2": (lambda n: n["tolerates_server_loss"],
              lambda p: [f"--kill_server=0@{_t(p, 0):g}", f"--kill_server=0@{_t(p, 1):g}"],
              lambda n: 0),
    "stop": (lambda n: n["tolerates_pause"],
             lambda p: [f"--stop_server=0@{_t(p, 0):g}+{p.down_s:g}"], lambda n: 0),
    "partition": (lambda n: n["tolerates_pause"],
                  lambda p: [f"--partition_server=0@{_t(p, 0):g}+{p.down_s:g}"], lambda n: 0),
    "coordinator": (lambda n: n["tolerates_server_loss"],
                    lambda p: ["--coordinators=2", "--coordination=zk",
                               f"--kill_coordinator=0@{_t(p, 0):g}"], lambda n: 0),
    # Both replicas of a range at once: only for policies that replicate;
    # one that does not tolerate a chain loss must end with the job-failed
    # code (3), one that does must fall back and train on.
    "double_kill": (lambda n: n["min_replicas"] > 1,
                    lambda p: [f"--kill_server=0,1@{_t(p, 0):g}"],
                    lambda n: 0 if n["tolerates_chain_loss"] else 3),
}

SETS = {
    # TTF's protocol: 1 worker, plain SGD, 210 s, kills at 30 s and 80 s.
    "ttf": dict(workers=[1], faults=["nofault", "kill1", "kill2"],
                protocol=Protocol(210, [30, 80], 20)),
    # 4 workers, 120 s: the faults TTF did not try.
    "ttf4": dict(workers=[4], faults=["nofault", "kill2", "stop", "partition", "double_kill",
                                      "coordinator"],
                 protocol=Protocol(120, [30, 80], 20)),
}
SETS["full"] = dict(workers=[1, 4], faults=list(FAULTS), protocol=SETS["ttf"]["protocol"])
QUICK = Protocol(30, [6, 16], 5)  # CI only: never printed beside TTF's figures.


@dataclass
class Cell:
    variant: Variant
    fault: str
    workers: int
    seed: int
    protocol: Protocol
    needs: dict
    flags: list = field(default_factory=list)
    expect_exit: int = 0

    @property
    def config(self):
        """What makes a cell: every flag of its job (the seed included)."""
        return {"variant": self.variant.name, "policy": self.variant.policy,
                "fault": self.fault, "workers": self.workers, "seed": self.seed,
                "flags": self.flags, "expect_exit": self.expect_exit}

    @property
    def key(self):
        digest = hashlib.sha1(json.dumps(self.config, sort_keys=True).encode()).hexdigest()[:8]
        return (f"{self.variant.name}-{self.fault}-w{self.workers}-"
                f"{self.protocol.duration_s:g}s-seed{self.seed}-{digest}")


def policy_flags(needs, quick):
    """The coordinator/server flags a policy's needs ask for (registry)."""
    flags = []
    if needs["min_replicas"] > 1:
        flags.append(f"--coordinator.replicas={needs['min_replicas']}")
    if needs["store_kind"] != "any":
        flags.append(f"--store={needs['store_kind']}")
    if needs["restart"] == "same-id-from-checkpoint":
        flags.append(f"--checkpoint_every_s={2 if quick else 5}")
    return flags


def build(variants, faults, workers, seeds, protocol, registry, quick):
    """Cells in run order: seed outermost, so a partial matrix has every
    configuration at n=1 before any at n=2."""
    cells = []
    for seed in seeds:
        for w in workers:
            for fault in faults:
                applies, fault_flags, expect = FAULTS[fault]
                for v in variants:
                    needs = registry[v.policy]
                    if not applies(needs):
                        continue
                    p = protocol
                    flags = [f"--servers={needs['experiment_servers']}", f"--workers={w}",
                             f"--model={p.model}", f"--consistency={p.consistency}",
                             f"--recovery={v.policy}", f"--duration_s={p.duration_s:g}",
                             f"--restart_after_s={p.down_s:g}", "--optimizer=sgd",
                             "--lr=0.01", "--batch=32", f"--evaluator_every_s={p.eval_every_s:g}",
                             f"--seed={seed}", "--log_every_s=1", "--progress_s=30"]
                    flags += policy_flags(needs, quick) + list(v.flags) + fault_flags(p)
                    cells.append(Cell(v, fault, w, seed, p, needs, flags, expect(needs)))
    return cells


_PREFIX = {"--coordinator.": "relaxps-coordinator", "--server.": "relaxps-server"}


def probe_variants(variants, bin_dir):
    """{variant name: reason} for variants whose flags a binary refuses: each
    flag is given to its binary with --version (exit 0: known, 2: unknown
    flag). Only exit codes are read."""
    refused = {}
    for v in variants:
        for flag in v.flags:
            binary, arg = "relaxps-worker", flag
            for prefix, b in _PREFIX.items():
                if flag.startswith(prefix):
                    binary, arg = b, "--" + flag[len(prefix):]
            try:
                rc = subprocess.run([os.path.join(bin_dir, binary), arg, "--version"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    timeout=30).returncode
            except (OSError, subprocess.SubprocessError) as e:
                rc = str(e)
            if rc != 0:
                refused[v.name] = f"{binary} does not accept {arg} (exit {rc})"
                break
    return refused
