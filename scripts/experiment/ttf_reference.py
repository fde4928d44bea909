"""TTF's ("Training Through Failure", arXiv 2406.05546) logged results, for the
comparison columns of summary.csv / report.md and the dashed curves.

Numbers per policy and kill count are from the paper's public logs as quoted
in issue 19; the curves come from ttf/ttf_accuracy.csv next to this file
(policy,kills,time_s,test_acc,test_loss; ttf/README.md names its source:
the prototype's public repository, SujeethJinesh/CS244B, metrics/).
"""
import csv
import os

CURVES_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ttf", "ttf_accuracy.csv")
# TTF's protocol: the only runs its figures may sit beside.
PROTOCOL = {"workers": 1, "duration_s": 210, "fault_at": [30, 80], "down_s": 20}


class MissingReference(Exception):
    pass

# Our policy -> the TTF prototype's policies it corresponds to.
TTF_POLICIES = {
    "checkpoint": ["sync_checkpointing", "async_checkpointing"],
    "chain": ["sync_chain_replication", "async_chain_replication"],
    "stateless": ["async_relaxed_consistency"],
}
# Our policy variants (cells.VARIANTS) -> the prototype's policy they match.
TTF_VARIANT = {"checkpoint-sync": "sync_checkpointing", "checkpoint": "async_checkpointing",
               "chain": "sync_chain_replication", "chain-async": "async_chain_replication",
               "stateless": "async_relaxed_consistency"}
SHORT = {
    "sync_checkpointing": "sync ckpt", "async_checkpointing": "async ckpt",
    "sync_chain_replication": "sync chain", "async_chain_replication": "async chain",
    "async_relaxed_consistency": "stateless",
}
# (final accuracy, time to 0.70 in s, stall in s) per TTF policy and kills.
LOGGED = {
    ("sync_checkpointing", 1): (0.765, 119, 23), ("sync_checkpointing", 2): (0.724, 151, None),
    ("async_checkpointing", 1): (0.758, 120, 23), ("async_checkpointing", 2): (0.738, 145, None),
    ("sync_chain_replication", 1): (0.769, 88, 12), ("sync_chain_replication", 2): (0.756, 120, None),
    ("async_chain_replication", 1): (0.723, 168, 11), ("async_chain_replication", 2): (0.748, 101, None),
    ("async_relaxed_consistency", 1): (0.679, 188, 26), ("async_relaxed_consistency", 2): (0.745, 106, None),
}
# Gradients processed in 210 s with 1 kill, and the no-kill controls.
GRADS_1KILL = {"checkpoint": "950-1070", "chain": "950-1070", "stateless": "5260"}
NOKILL = {"chain": "0.775-0.792"}

COLUMNS = ["ttf_policies", "ttf_final_acc", "ttf_t070", "ttf_stall_s", "ttf_grads"]


def _join(vals):
    vals = [v for v in vals if v]
    return "; ".join(vals) if vals else None


def columns(policy, kills):
    """TTF's numbers for one of our rows, as strings ("sync ckpt 0.765; async ckpt 0.758")."""
    names = TTF_POLICIES.get(policy, [])
    out = {c: None for c in COLUMNS}
    if not names:
        return out
    out["ttf_policies"] = "; ".join(SHORT[n] for n in names)
    if kills == 0:
        out["ttf_final_acc"] = NOKILL.get(policy)
        return out
    logged = [(SHORT[n], LOGGED.get((n, kills))) for n in names]
    out["ttf_final_acc"] = _join(f"{s} {v[0]:.3f}" for s, v in logged if v)
    out["ttf_t070"] = _join(f"{s} {v[1]}" for s, v in logged if v)
    out["ttf_stall_s"] = _join(f"{s} {v[2]}" for s, v in logged if v and v[2] is not None)
    if kills == 1:
        out["ttf_grads"] = GRADS_1KILL.get(policy)
    return out


def load_curves(path=CURVES_CSV):
    """{(ttf_policy, kills): [(time_s, test_acc)]}; MissingReference if the
    file is missing or unreadable (never an empty overlay)."""
    curves = {}
    if not os.path.exists(path):
        raise MissingReference(f"TTF reference curves {path} are missing (they ship in "
                               "scripts/experiment/ttf/; see its README.md)")
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            curves.setdefault((r["policy"], int(r["kills"])), []).append(
                (float(r["time_s"]), float(r["test_acc"])))
    return curves


def curves_for(policy, kills, curves):
    """[(label, points)] of the TTF curves matching our policy and kill count."""
    return [(SHORT[n], curves[(n, kills)]) for n in TTF_POLICIES.get(policy, [])
            if (n, kills) in curves]
