"""gnuplot data and script for an experiment set (called by summarize.py).

write(plot_dir, runs, rows, ttf_curves) writes plot_dir/*.dat and
plot_dir/plots.gp, which experiment.sh runs with gnuplot (pngcairo) to make:
  accuracy_<fault>_<consistency>_w<W>.png  test accuracy vs time, one panel per
      kill count, every policy on it (first repeat), faults (red) and servers
      back (green) marked, TTF's logged curves dashed (full-length sets only)
  gradients_<...>.png  cumulative gradients computed (all workers) vs time
  recovery.png         recovery time and time to regain the pre-fault accuracy
  lost_updates.png     acknowledged updates lost and worker idle fraction
Returns the PNG names.
"""
import os

import analyze_run
import ttf_reference

# One colour per recovery policy, by its place in the registry's order (a
# policy added to the registry gets the next colour, no change here).
PALETTE = ["#555555", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#d62728", "#8c564b",
           "#e377c2", "#17becf", "#bcbd22"]
COLORS = {}
TTF_COLORS = {"sync ckpt": "#1f77b4", "async ckpt": "#17becf", "sync chain": "#2ca02c",
              "async chain": "#bcbd22", "stateless": "#ff7f0e"}


def _curve_files(d, run):
    """Writes the accuracy and cumulative-gradient curves of one run; returns their names."""
    base = run["id"]
    acc, grads = f"acc_{base}.dat", f"grads_{base}.dat"
    with open(os.path.join(run["dir"], "merged.csv")) as f, open(os.path.join(d, acc), "w") as o:
        next(f)
        for line in f:
            t, src, _, _, _, a = line.split(",")[:6]
            if src == "evaluator" and a:
                o.write(f"{t} {a}\n")
    times = []
    for name in os.listdir(run["dir"]):
        if name.endswith(".steps.csv") or name.endswith(".steps.csv.gz"):
            worker = name.split(".")[0]
            off = _offset(run["dir"], worker)
            rows = analyze_run.read_csv(os.path.join(run["dir"], worker + ".steps.csv"))
            times += [float(r["time_s"]) + off for r in rows]
    times.sort()
    with open(os.path.join(d, grads), "w") as o:
        last = -1.0
        for i, t in enumerate(times):
            if t - last >= 0.25 or i == len(times) - 1:
                o.write(f"{t:.3f} {i + 1}\n")
                last = t
    return acc, grads


def _offset(run_dir, worker):
    start = float(open(os.path.join(run_dir, "start_unix")).read())
    events = analyze_run.load_events(run_dir)
    if events is not None:
        return analyze_run.event_offset(events.get(worker, []), start)
    return analyze_run.worker_offset(os.path.join(run_dir, worker + ".log"), start)


def _events(run_dir):
    out = []
    with open(os.path.join(run_dir, "events.csv")) as f:
        next(f)
        for line in f:
            # time_s,event,server[,detail]
            t, ev = line.strip().split(",")[:2]
            out.append((float(t), ev))
    return out


def _panels(gp, d, title, png, panels, ylabel, which, ttf):
    """One PNG, a panel per kill count: panels = [(kills, [run, ...])]."""
    gp.append(f"set terminal pngcairo size {520 * len(panels)},420 font ',10'")
    gp.append(f"set output '{png}'")
    gp.append(f"set multiplot layout 1,{len(panels)} title '{title}'")
    for kills, runs in panels:
        gp.append("unset arrow; set key bottom right; set grid")
        gp.append(f"set title '{kills} kill(s)'; set xlabel 'time (s)'; set ylabel '{ylabel}'")
        gp.append("set yrange [0:1]" if which == "acc" else "set yrange [0:*]")
        marked = next((r for r in runs if r["kills"] > 0), None)
        if marked is not None:
            for t, ev in _events(marked["dir"]):
                if ev in ("kill", "stop", "partition", "restart", "cont", "heal"):
                    color = "red" if ev in ("kill", "stop", "partition") else "#2ca02c"
                    gp.append(f"set arrow from {t},graph 0 to {t},graph 1 nohead lc rgb '{color}' dt 3")
        plot = []
        for r in runs:
            acc, grads = _curve_files(d, r)
            f = acc if which == "acc" else grads
            plot.append(f"'{f}' using 1:2 with lines lw 2 lc rgb '{COLORS.get(r['policy'], 'black')}'"
                        f" title '{r['policy']}'")
        if which == "acc" and ttf and kills > 0:
            seen = set()
            for policy in ttf_reference.TTF_POLICIES:
                for label, pts in ttf_reference.curves_for(policy, kills, ttf):
                    if label in seen:
                        continue
                    seen.add(label)
                    name = f"ttf_{label.replace(' ', '_')}_k{kills}.dat"
                    with open(os.path.join(d, name), "w") as o:
                        o.writelines(f"{t} {a}\n" for t, a in pts)
                    plot.append(f"'{name}' using 1:2 with lines dt 2 lw 1 "
                                f"lc rgb '{TTF_COLORS[label]}' title 'TTF {label}'")
        gp.append("plot " + ", \\\n     ".join(plot) if plot else "plot 0 notitle")
    gp.append("unset multiplot")


def _bars(gp, d, rows, png, specs):
    """Clustered bars, one cluster per policy x kills row with faults; specs = [(column, label)]."""
    data = [r for r in rows if r["kills"] and r["status"].startswith("ok")]
    if not data:
        return False
    name = png.replace(".png", ".dat")
    with open(os.path.join(d, name), "w") as o:
        for r in data:
            label = f"{r['policy']} k{r['kills']} {r['fault']} w{r['workers']}"
            vals = [r.get(c + "_mean") for c, _ in specs]
            o.write(f"\"{label}\" " + " ".join("0" if v is None else f"{v:.4f}" for v in vals) + "\n")
    gp.append(f"set terminal pngcairo size {max(640, 110 * len(data)) * len(specs)},420 font ',10'")
    gp.append(f"set output '{png}'")
    gp.append(f"set multiplot layout 1,{len(specs)}")
    gp.append("unset arrow; set style data histograms; set style fill solid 0.8 border -1")
    gp.append("set boxwidth 0.8; set xtics rotate by -30; set key off; set grid ytics")
    gp.append("set yrange [0:1<*]; set xlabel ''")
    for i, (col, label) in enumerate(specs):
        gp.append(f"set title '{label}'; set ylabel '{label}'")
        gp.append(f"plot '{name}' using {i + 2}:xtic(1) lc rgb '#1f77b4'")
    gp.append("unset multiplot; set xtics norotate; set style data lines")
    return True


def write(d, runs, rows, ttf, policy_names=()):
    """policy_names: the registry's order; a policy's colour is its place in it."""
    os.makedirs(d, exist_ok=True)
    COLORS.clear()
    names = list(policy_names) + sorted({r["policy"] for r in runs} - set(policy_names))
    COLORS.update({p: PALETTE[i % len(PALETTE)] for i, p in enumerate(names)})
    gp = ["# Generated by scripts/experiment/plots.py; run with: gnuplot plots.gp", "set encoding utf8"]
    pngs = []
    first = {}  # config -> the run of its lowest repeat
    for r in sorted(runs, key=lambda r: r["repeat"]):
        first.setdefault((r["policy"], r["kills"], r["fault"], r["consistency"], r["workers"]), r)
    combos = sorted({(r["fault"], r["consistency"], r["workers"]) for r in first.values()
                     if r["fault"] != "nofault"}) or sorted(
        {("nofault", r["consistency"], r["workers"]) for r in first.values()})
    for fault, cons, workers in combos:
        panels = []
        for k in sorted({r["kills"] for r in first.values()}):
            sel = [r for key, r in sorted(first.items()) if key[1] == k and key[3] == cons and
                   key[4] == workers and (key[2] == fault or k == 0)]
            if sel:
                panels.append((k, sel))
        tag = f"{fault}_{cons}_w{workers}"
        what = f"{fault}, {cons}, {workers} worker(s)"
        _panels(gp, d, f"Test accuracy ({what}); dashed: TTF logged", f"accuracy_{tag}.png",
                panels, "test accuracy", "acc", ttf)
        _panels(gp, d, f"Cumulative gradients computed ({what})", f"gradients_{tag}.png",
                panels, "gradients", "grads", ttf)
        pngs += [f"accuracy_{tag}.png", f"gradients_{tag}.png"]
    if _bars(gp, d, rows, "recovery.png", [("recovery_s", "recovery time (s)"),
                                          ("regain_s", "time to regain pre-fault accuracy (s)")]):
        pngs.append("recovery.png")
    if _bars(gp, d, rows, "lost_updates.png", [("lost_updates", "acknowledged updates lost"),
                                              ("idle_frac", "worker idle fraction in outages")]):
        pngs.append("lost_updates.png")
    with open(os.path.join(d, "plots.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    return pngs
