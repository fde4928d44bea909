"""report.md of an experiment set (called by summarize.py)."""
import datetime


def _f(mean, sd=None, spec=".1f"):
    if mean is None:
        return "-"
    s = format(mean, spec)
    return s if sd is None else f"{s} ± {format(sd, spec)}"


def _row(r):
    g = lambda m, spec=".1f": _f(r.get(m + "_mean"), r.get(m + "_sd"), spec)
    delta = r.get("acc_minus_nokill")
    lost = g("lost_updates", ".0f")
    if r.get("lost_method"):
        lost += f" ({r['lost_method']})"
    cells = [r["policy"], str(r["kills"]), str(r["fault"]), str(r["workers"]), str(r["repeats"]),
             g("final_acc", ".4f"), "-" if delta is None else f"{delta:+.4f}", g("t070"), g("t085"),
             g("stall_s"), g("recovery_s"), g("regain_s"), lost, g("idle_frac", ".2f"),
             g("grads_computed", ".0f"), g("grads_applied", ".0f"), g("samples_per_s", ".0f"),
             r.get("ttf_final_acc") or "-", r.get("ttf_t070") or "-", r.get("ttf_stall_s") or "-",
             r.get("ttf_grads") or "-"]
    return "| " + " | ".join(cells) + " |"


HEADER = ("| policy | kills | fault | workers | runs | final acc | vs no-kill | t→0.70 (s) | "
          "t→0.85 (s) | stall (s) | recovery (s) | regain (s) | acked updates lost | idle in "
          "outage | grads computed | grads applied | samples/s | TTF final acc | TTF t→0.70 (s) | "
          "TTF stall (s) | TTF grads |")


def _acceptance(rows):
    out = []
    for r in rows:
        if not r["kills"] or not str(r["status"]).startswith("ok"):
            continue
        acc, base = r.get("final_acc_mean"), r.get("nokill_final_acc")
        if acc is None or base is None:
            continue
        ok = acc >= base - 0.02 and acc >= 0.85
        out.append(f"- {r['policy']}, {r['kills']} {r['fault']}(s), {r['consistency']}, "
                   f"{r['workers']} worker(s): final {acc:.4f} vs no-kill {base:.4f} "
                   f"(needs >= {max(base - 0.02, 0.85):.4f}): **{'met' if ok else 'MISSED'}**")
    return out


def _fault_details(runs):
    out = []
    for r in sorted(runs, key=lambda r: r["id"]):
        for f in r.get("faults", []):
            lost = _f(f.get("lost_updates"), spec=".0f")
            if f.get("lost_method"):
                lost += f" ({f['lost_method']})"
            out.append(f"| {r['id']} | {f['kind']} server {f['server']} | {_f(f['time_s'])} | "
                       f"{_f(f.get('back_s'))} | {_f(f.get('recovery_s'))} | "
                       f"{_f(f.get('pre_acc'), spec='.4f')} | {_f(f.get('regain_s'))} | {lost} | "
                       f"{_f(f.get('idle_frac'), spec='.2f')} |")
    return out


def write(path, a, rows, runs, failed, skipped, pngs, with_ttf):
    lines = [f"# Experiment set `{a.set}`", "",
             f"Generated {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC by scripts/experiment.sh "
             f"from {len(runs)} run(s): {a.duration_s:.0f} s per run, "
             + (f"faults at {a.fault_at.replace(' ', ' s, ')} s" if a.schedule == "ttf" else
                f"faults at seeded random times ({a.schedule})")
             + f", servers back {a.down_s:.0f} s later. "
             "Times are seconds since run_local.sh started the workers. Mean ± sample standard "
             "deviation over repeats.", ""]
    for kind, name, reason in skipped:
        lines.append(f"- **Skipped {kind} `{name}`**: {reason}")
    for f in failed:
        lines.append(f"- **Failed run** {f['policy']}-k{f['kills']}-{f['fault']}-"
                     f"{f['consistency']}-w{f['workers']}-r{f['repeat']}: {f['reason']}")
    if skipped or failed:
        lines.append("")
    if pngs:
        lines += ["## Plots", ""] + [f"![{p}](plots/{p})" for p in pngs] + [""]
        if not with_ttf:
            lines += ["TTF's curves are drawn only for full-length runs (its runs are 210 s).", ""]
    for cons in sorted({str(r["consistency"]) for r in rows}):
        sel = [r for r in rows if str(r["consistency"]) == cons]
        lines += [f"## Results ({cons} consistency)" if cons != "-" else "## Skipped", "",
                  HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
        lines += [_row(r) if str(r["status"]).startswith("ok") else
                  f"| {r['policy']} | {r['kills']} | {r['fault']} | {r['workers']} | 0 | "
                  f"{r['status']} |" + " |" * 15 for r in sel]
        lines.append("")
    details = _fault_details(runs)
    if details:
        lines += ["## Every fault", "",
                  "| run | fault | at (s) | server back (s) | recovery (s) | accuracy before | "
                  "regain (s) | acked updates lost | idle |", "|---|---|---|---|---|---|---|---|---|"]
        lines += details + [""]
    acc = _acceptance(rows)
    if acc:
        lines += ["## Final accuracy with faults vs the same policy without (issue 19: >= "
                  "no-kill - 0.02 and >= 0.85)", ""] + acc + [""]
    lines += [
        "## Definitions", "",
        "- **final acc**: the evaluator's last evaluation, of the final model, on the whole "
        "10k test set. **t→0.70 / t→0.85**: first evaluation at or above it.",
        "- **stall**: longest gap between two consecutive training steps (any worker).",
        "- **recovery**: fault → end of the step gap it caused (the first acknowledged push "
        "after it); fault → next step when training did not stop.",
        "- **regain**: recovery → first evaluation within 0.005 of the last pre-fault accuracy.",
        "- **recovery**, **regain** and **idle** are means over a run's faults; **acked updates "
        "lost** is their sum (per fault in the table above).",
        "- **acked updates lost** (checkpoint): pushes acknowledged after the restored "
        "checkpoint was written and before the kill, counted from the steps CSVs and the "
        "server's own checkpoint/restore log lines. (staleness): without a restore, the jump "
        "of the step staleness right after recovery times the workers, which is how a "
        "rollback of the servers' clocks shows; 0 means no rollback was visible.",
        "- **idle in outage**: per worker, 1 − steps between fault and server back × median "
        "step time / outage length. **grads computed**: training steps of all workers; "
        "**applied**: computed − lost.",
        "- **TTF** columns: the paper's logged numbers for the matching prototype policies "
        "(checkpoint ↔ sync/async checkpointing, chain ↔ sync/async chain replication, "
        "stateless ↔ async relaxed consistency).", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
