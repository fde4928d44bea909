"""report.md of an experiment folder (called by summarize.py)."""
import datetime
import os

import provenance
import summarize
import ttf_reference

COLUMNS = [("final_acc", "final acc", ".4f"), ("t070", "t→0.70 (s)", ".0f"),
           ("recovery_s", "recovery (s)", ".1f"), ("dip", "dip", ".3f"),
           ("regain_s", "regain (s)", ".1f"), ("eval_blind_s", "evaluator blind (s)", ".1f"),
           ("idle_frac", "idle", ".2f"), ("samples_per_s", "samples/s", ".0f"),
           ("acked_lost", "acked updates lost", ".0f"),
           ("rolled_back", "acked since the restored checkpoint", ".0f"),
           ("dropped", "computed, dropped", ".0f"),
           ("applied_late", "applied late", ".0f")]


def _row(r, with_ttf):
    status = f"{r['as_expected']}/{r['runs']}"
    if r["as_expected"] < r["runs"]:
        status += " **exits " + ",".join(map(str, r["exits"])) + "**"
    if r["expect_exit"]:
        status += f" (expects {r['expect_exit']}: " + "; ".join(r["reasons"]) + ")"
    if r["fallback"]:
        status += " fallback"
    cells = [r["variant"], r["fault"], str(r["workers"]), status]
    cells += [summarize.cell_text(r[m], spec) for m, _, spec in COLUMNS]
    cells.append(summarize.hist_text(r["late_staleness_hist"]))
    cells.append("-" if r["throughput_vs_none"] is None else f"{r['throughput_vs_none']:.2f}")
    if with_ttf:
        ref = ttf_reference.TTF_VARIANT.get(r["variant"])
        kills = {"nofault": 0, "kill1": 1, "kill2": 2}.get(r["fault"])
        logged = ttf_reference.LOGGED.get((ref, kills)) if ref else None
        cells += ["-" if not logged else f"{logged[0]:.3f}",
                  "-" if not logged else str(logged[1])]
    return "| " + " | ".join(cells) + " |"


def scale_section(cells):
    """Lines about the runs that added or drained servers: their scale
    events and each server's pushes/s (and payload bytes/s) after the last
    one against an even share (analyze_run.py's pushes_after_moves)."""
    scaled = [c for c in cells if (c["metrics"] or {}).get("scale_events")]
    if not scaled:
        return []
    lines = ["", "## Servers added and drained", "",
             "Per run: the scale events (s after the workers started; map version of each "
             "move published) and, from the last one to the last step, each server's pushes/s "
             "(its relaxps_server_pushes_total, sampled by the launcher) and payload MB/s "
             "against the servers' mean. Per-server pushes/s over the whole run: "
             "server_rates.csv and run.png in the run's folder (plots.py RUN_DIR).", "",
             "| run | events | pushes/s after the last (vs even) | MB/s in (vs even) | longest "
             "step pause (s) |", "|---|---|---|---|---|"]
    for c in scaled:
        m = c["metrics"]
        events = ", ".join(
            f"{e['time_s']:.0f} {e['kind']} {e['server']}"
            + (f" v{e['map_version']}" if e.get("map_version") is not None else "")
            for e in m["scale_events"] if e["kind"] != "joined")

        def per(key, scale=1.0):
            p = m.get(key)
            if not p:
                return "-"
            return ", ".join(f"s{k} {v / scale:.1f} ({v / p['even_share'] - 1:+.0%})"
                             for k, v in p["per_server"].items())
        lines.append(f"| {m['id']} | {events} | {per('pushes_after_moves')} | "
                     f"{per('bytes_in_after_moves', 1e6)} | "
                     f"{'-' if m.get('max_step_gap_s') is None else format(m['max_step_gap_s'], '.2f')} |")
    return lines


# What the other policies are set against in "costs and saves".
BASELINE = "checkpoint"


def _fault_figures(x, base):
    """'kill1: recovery 0.1 s (checkpoint 20.5), acked lost 0 (checkpoint 343),
    ...': one fault's row, each figure beside the baseline's where given."""
    def fig(name, key, spec, unit=""):
        text = f"{name} {summarize.cell_text(x[key], spec)}{unit}"
        if base is not None and base[key]["n"]:
            text += f" ({BASELINE} {summarize.cell_text(base[key], spec)})"
        return text
    out = [fig("recovery", "recovery_s", ".1f", " s"), fig("acked lost", "acked_lost", ".0f")]
    if x["rolled_back"]["n"] and any(x["rolled_back"]["values"]):
        out.append(f"acked since the restored checkpoint "
                   f"{summarize.cell_text(x['rolled_back'], '.0f')}")
    if x["applied_late"]["n"] and any(x["applied_late"]["values"]):
        out.append(f"applied late {summarize.cell_text(x['applied_late'], '.0f')}")
    out += [fig("idle", "idle_frac", ".2f"), fig("final", "final_acc", ".3f")]
    return f"{x['fault']}: " + ", ".join(out)


def write(path, matrix, rows, cells, skipped, pngs, ttf):
    p = matrix["protocol"]
    with_ttf = ttf is not None
    lines = [f"# Experiment `{matrix['set']}`" + (" (quick: not comparable with TTF)"
                                                   if matrix.get("quick") else ""), "",
             f"Generated {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC by scripts/experiment.sh "
             f"from {len(cells)} finished cell(s): {p['duration_s']:g} s per run, model "
             f"{p['model']}, {p['consistency']} consistency, faults at "
             f"{', '.join(f'{t:g}' for t in p['fault_at'])} s, outages of {p['down_s']:g} s.",
             ""]
    # The code's commit: a cell recorded HEAD, which may be a commit of the
    # matrix's own earlier cells.
    code = {r: provenance.code_commit(os.path.dirname(path), r)
            for r in {c.get("commit") for c in cells if c.get("commit")}}
    commits = sorted({(code.get(c.get("commit")) or "?")[:10]
                      + (" (dirty)" if c.get("dirty") else "") for c in cells})
    hosts = sorted({f"{c['machine']['host']} ({c['machine']['cpus']} cpus)"
                    for c in cells if c.get("machine")})
    loads = [c["load_before"][0] for c in cells if c.get("load_before")]
    lines += [f"Commits: {', '.join(commits) or '-'}. Machines: {', '.join(hosts) or '-'}. "
              "1-min load before the cells: " +
              (f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-") + ".", ""]
    for s in skipped:
        lines.append(f"- **Skipped variant `{s['variant']}`**: {s['reason']}")
    if skipped:
        lines.append("")
    if pngs:
        lines += ["## Plots", ""] + [f"![{x}](plots/{x})" for x in pngs] + [""]
    else:
        lines += ["No plots (gnuplot missing or --no_plots).", ""]
    head = ["variant", "fault", "workers", "as expected"] + [c[1] for c in COLUMNS] + \
        ["applied late: clocks behind (all runs)", "throughput vs none"] + (["TTF final acc", "TTF t→0.70 (s)"] if with_ttf else [])
    lines += ["## Results", "",
              "Fewer than 3 runs: the values (seed by seed); 3 or more: mean ± sample sd.", "",
              "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [_row(r, with_ttf) for r in rows]
    notes = sorted({n for r in rows for n in r["lost_notes"]})
    lines += [""] + [f"- acked updates lost \"-\": {n}" for n in notes]
    lines += scale_section(cells)
    lines += ["", "## What each policy costs and saves", "",
              "Cost: samples/s without faults against none's. Saved: each fault's figures, "
              f"beside those of `{BASELINE}` (restart from the last checkpoint) in the same "
              "fault and workers.", ""]
    for r in rows:
        if r["fault"] != "nofault" or r["throughput_vs_none"] is None:
            continue
        faults = [x for x in rows if x["variant"] == r["variant"] and x["workers"] == r["workers"]
                  and x["fault"] != "nofault"]
        saved = "; ".join(_fault_figures(x, next(
            (b for b in rows if b["variant"] == BASELINE and b["fault"] == x["fault"]
             and b["workers"] == x["workers"] and b is not x), None)) for x in faults)
        yard = next((x for x in rows if x["policy"] == "none" and x["fault"] == "nofault"
                     and x["workers"] == r["workers"]), None)
        cost = ("the throughput yardstick" if r["policy"] == "none"
                else f"costs {r['throughput_vs_none']:.2f}x none's throughput")
        if yard is not None and r["stores"] and yard["stores"] and r["stores"] != yard["stores"]:
            cost += (f" (its servers on {'+'.join(r['stores'])}, none's on "
                     f"{'+'.join(yard['stores'])}: the store's speed is in it)")
        lines.append(f"- **{r['variant']}** ({r['workers']} worker(s)): {cost}; "
                     + (f"with faults: {saved}." if saved else "no fault runs."))
    lines += [
        "", "## Definitions", "",
        "- **recovery**: per worker, fault → its first acknowledged push after it "
        "(client_failover_acked: a resent request acknowledged by a new chain head or by the "
        "server back, at an epoch the worker lost a server at; client_rejoined for a worker "
        "that trained on its own copy), else the end of the step gap the fault caused, else "
        "(training went on, e.g. a chain tail lost while the worker pushed to the heads) its "
        "next step; mean over workers and faults.",
        "- **idle**: per worker, 1 − compute / wall, measured: compute is the time its steps "
        "spent computing gradients (steps.csv's compute_ms; waits on the parameter server "
        "excluded), wall the time from its first step's end to its last one's.",
        "- **dip**: largest drop of test accuracy within 60 s after a fault against the last "
        "evaluation before it. **regain**: fault → first evaluation back at that value.",
        "- **evaluator blind**: the evaluator's own gaps (evaluator_gap: pulls retried every "
        "second failed), shown apart from the model's recovery.",
        "- **acked updates lost**: per (worker, incarnation), push parts the servers "
        "acknowledged (its final event) minus the parts the final servers' states reflect "
        "(relaxps-ctl stats). **computed, dropped**: updates_dropped, plus steps a worker "
        "applied to its own copy that no rejoin or re-seed handed to a server. **applied late**: "
        "updates replayed into a restarted server (updates_replayed, less those it skipped as "
        "already applied: duplicates_skipped) plus steps a worker applied to its own copy "
        "while its server was away, handed back at the re-seed or the rejoin "
        "(client_rejoined.late_updates). **clocks behind**: how far behind the worker's clock "
        "they were when sent back (replayed ones a server skipped included), summed over the "
        "runs, in power-of-two buckets (`2-3:40`: 40 updates 2 or 3 clocks behind).",
        "- **acked since the restored checkpoint** (jobs of one server): per fault the server "
        "came back from a checkpoint, the workers' pushes acknowledged before the fault "
        "(client_request_parked.acked_updates) minus the push parts the restored state holds "
        "(server_started.restored_parts), less what earlier restores "
        "lost: what a restore must lose. A checkpoint run's acked updates lost should equal "
        "it to within a batch per worker; replay's shows what it replayed instead.",
        "- **throughput vs none**: samples/s over none's without faults, same workers.",
        "- **TTF** columns (only for runs of TTF's own protocol: 1 worker, 210 s, kills at 30 s "
        "and 80 s): the paper's logged numbers for the matching prototype policy; curves from "
        "scripts/experiment/ttf/ (source named in its README.md).", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
