"""--chaos=SEED: a seeded fault schedule drawn only from the faults the
recovery policy's registry entry says it tolerates (tolerates_server_loss: a
server killed; tolerates_pause: a server SIGSTOPped past its heartbeat
timeout; tolerates_chain_loss: every server killed at once). The same seed,
spec and registry always give the same schedule."""
import random

from relaxps_launch.spec import Fault


def candidates(needs, servers, untolerated=False):
    """(action, target-list, for_s?) kinds of fault the policy tolerates."""
    kinds = []
    if needs.get("tolerates_server_loss") or untolerated:
        kinds.append("kill_one")
    if needs.get("tolerates_pause") or untolerated:
        kinds.append("pause_one")
    if (needs.get("tolerates_chain_loss") or untolerated) and servers > 1:
        kinds.append("kill_all")
    return kinds


def draw(seed, needs, servers, duration_s, chaos):
    """Faults for seed `seed` (a list of spec.Fault, sorted by time)."""
    rng = random.Random(seed)
    kinds = candidates(needs, servers, chaos["untolerated"])
    if not kinds or chaos["faults"] == 0:
        return []
    lo = chaos["from_s"]
    hi = chaos["to_s"] if chaos["to_s"] is not None else max(lo, (duration_s or 60) * 0.6)
    gap = chaos["min_gap_s"]
    n = chaos["faults"]
    # Evenly spread slots, each jittered within its share of [lo, hi]; a fault
    # starts only min_gap_s after the previous one ended (a pause's end), so
    # that two tolerated faults never add up to one the policy does not
    # tolerate (a pause overlapping a kill is two servers lost at once).
    span = max(hi - lo, gap * (n - 1))
    faults = []
    origin = f"chaos:{seed}"
    prev_end = None
    for i in range(n):
        t = lo + span * i / n + rng.uniform(0, max(0.0, span / n - gap / 2))
        if prev_end is not None and t < prev_end + gap:
            t = prev_end + gap
        t = round(t, 1)
        kind = rng.choice(kinds)
        if kind == "kill_one":
            faults.append(Fault(t, "kill", f"server-{rng.randrange(servers)}", origin=origin))
            prev_end = t
        elif kind == "pause_one":
            faults.append(Fault(t, "stop", f"server-{rng.randrange(servers)}",
                                chaos["down_s"] * 3, origin=origin))
            prev_end = t + chaos["down_s"] * 3
        else:
            for j in range(servers):
                faults.append(Fault(t, "kill", f"server-{j}", origin=origin))
            prev_end = t
    return faults
