"""Plots of an experiment folder (called by summarize.py): gnuplot data, a
plots.gp script, and the PNGs gnuplot makes of it (pngcairo).

  accuracy_<fault>_w<W>.png  test accuracy vs time, one panel per policy
      variant: the mean over seeds (line), the band from the lowest to the
      highest seed, the outages shaded (fault -> server back), and TTF's
      logged curve of the matching policy dashed on the right axis (only
      when ttf is given: runs of TTF's own protocol). Each axis zooms to its
      curves from 20 s before the first fault, so our dips of 0.01 show
      beside TTF's of 0.1-0.3. The line breaks where no evaluation is
      newer than STALE_S (the evaluator could not pull; not a flat model). Servers added and
      drained are vertical lines (add: green, drain: red), each range move
      published a dotted one labelled with its map version.
Returns the PNG names; [] without gnuplot (the report says so).

  run.png of one run folder (write_run; `plots.py RUN_DIR`): its test
      accuracy and each server's pushes/s over time (server_rates.csv from
      analyze_run.py), with the same outages and scale markers.
"""
import csv
import math
import os
import shutil
import subprocess
import sys

import pack
import ttf_reference

GRID_S = 2.0
TTF_COLOR = "#d95f02"
# An evaluation older than this at a grid point leaves a gap (evaluations
# come every 2 s in the experiments).
STALE_S = 3 * GRID_S
KILLS = {"kill1": 1, "kill2": 2}


def _curve(cell):
    path = os.path.join(cell["dir"], "merged.csv")
    if not pack.exists(path):
        return []
    with pack.open_text(path) as f:
        next(f)
        return [(float(t), float(v)) for t, s, v in (l.strip().split(",") for l in f)
                if s == "evaluation"]


def _on_grid(curve, end):
    """The curve sampled every GRID_S (the last evaluation at or before);
    None where there is none, or it is more than STALE_S old (the evaluator
    could not pull: the line breaks instead of holding its last value)."""
    out, j = [], 0
    for k in range(int(end / GRID_S) + 1):
        t = k * GRID_S
        while j + 1 < len(curve) and curve[j + 1][0] <= t:
            j += 1
        out.append(curve[j][1] if curve and t - STALE_S <= curve[j][0] <= t else None)
    return out


SCALE_STYLE = {"add_server": "lc rgb '#1a9850' dt 2 lw 1.5",
               "drain": "lc rgb '#d73027' dt 2 lw 1.5",
               "range_move_done": "lc rgb '#777777' dt 3 lw 1"}


def _markers(gp, metrics):
    """Outages shaded, scale events as vertical lines (gnuplot objects and
    arrows, cleared by _clear_markers)."""
    for f in metrics.get("faults", []):
        back = f["back_s"] if f["back_s"] is not None else f["time_s"] + 1
        gp.append(f"set object rect from {f['time_s']:.2f},graph 0 to {back:.2f},graph 1 "
                  "fc rgb '#f4cccc' fs solid 0.5 noborder behind")
    moves = 0
    for e in metrics.get("scale_events", []):
        style = SCALE_STYLE.get(e["kind"])
        if style is None:
            continue
        gp.append(f"set arrow from {e['time_s']:.2f},graph 0 to {e['time_s']:.2f},graph 1 "
                  f"nohead {style} back")
        label = ({"add_server": f"+s{e['server']}", "drain": f"-s{e['server']}"}.get(e["kind"])
                 or f"v{e['map_version']}")
        y = "0.97"
        if e["kind"] == "range_move_done":  # Moves close in time: labels one above another.
            y = f"{0.04 + 0.06 * (moves % 3):.2f}"
            moves += 1
        gp.append(f"set label '{label}' at {e['time_s']:.2f},graph {y} offset 0.3,0 "
                  "font ',8' front")


def _clear_markers(gp):
    gp += ["unset object", "unset arrow", "unset label"]


def _panel(d, gp, name, cells, ttf):
    curves = [c for c in (_curve(c) for c in cells) if c]
    if not curves:
        return False
    end = max(c[-1][0] for c in curves)
    grids = [_on_grid(c, end) for c in curves]
    with open(os.path.join(d, name + ".dat"), "w") as o:
        for k in range(len(grids[0])):
            vals = [g[k] for g in grids if g[k] is not None]
            if vals:
                o.write(f"{k * GRID_S:.1f} {sum(vals) / len(vals):.4f} {min(vals):.4f} "
                        f"{max(vals):.4f}\n")
            elif k:
                o.write("\n")  # A gap: gnuplot breaks the line and the band.
    metrics = cells[0]["metrics"] or {}
    faults = metrics.get("faults", [])
    lo = faults[0]["time_s"] - 20 if faults else end * 0.3
    kills = KILLS.get(cells[0]["fault"], 0)
    ref = ttf_reference.TTF_VARIANT.get(cells[0]["variant"])
    ref_curve = ttf[(ref, kills)] if ttf is not None and ref and (ref, kills) in ttf else None
    # Ours zoomed to our data, so dips of 0.01 show; TTF's curve (0.1-0.77,
    # its dips 0.1-0.3) on the right axis, zoomed to its own.
    ys = [a for c in curves for t, a in c if t >= lo]
    _markers(gp, metrics)
    gp.append(_zoom("y", ys))
    n = len(curves)
    plot = [f"'{name}.dat' using 1:3:4 with filledcurves fc rgb '#9ecae1' fs transparent solid "
            f"0.5 title 'seeds min-max (n={n})'",
            f"'{name}.dat' using 1:2 with lines lw 2 lc rgb '#08519c' title 'mean (n={n})'"]
    if ref_curve:
        with open(os.path.join(d, name + "_ttf.dat"), "w") as o:
            o.writelines(f"{t} {a}\n" for t, a in ref_curve)
        plot.append(f"'{name}_ttf.dat' using 1:2 axes x1y2 with lines dt 2 lw 1.5 "
                    f"lc rgb '{TTF_COLOR}' title 'TTF {ttf_reference.SHORT[ref]} (right axis)'")
        gp += [_zoom("y2", [a for t, a in ref_curve if t >= lo]),
               f"set ytics nomirror; set y2tics nomirror tc rgb '{TTF_COLOR}'",
               f"set y2label 'TTF test accuracy' tc rgb '{TTF_COLOR}'"]
    gp.append("plot " + ", \\\n     ".join(plot))
    if ref_curve:
        gp.append("unset y2tics; unset y2label; set ytics mirror")
    _clear_markers(gp)
    return True


def _zoom(axis, ys):
    """gnuplot's range for `axis` (y, y2) around ys, to the next 0.01."""
    if not ys:
        return f"set {axis}range [0:1]"
    return (f"set {axis}range [{math.floor(min(ys) * 100 - 1) / 100:.2f}:"
            f"{math.ceil(max(ys) * 100 + 1) / 100:.2f}]")


def write(d, cells, ttf):
    os.makedirs(d, exist_ok=True)
    gp = ["# Generated by scripts/experiment/plots.py: gnuplot plots.gp", "set encoding utf8"]
    pngs = []
    ok = [c for c in cells if c["metrics"]]
    for fault, workers in sorted({(c["fault"], c["workers"]) for c in ok}):
        variants = []
        for c in ok:
            if c["fault"] == fault and c["workers"] == workers and c["variant"] not in variants:
                variants.append(c["variant"])
        cols = min(3, len(variants))
        rows = math.ceil(len(variants) / cols)
        png = f"accuracy_{fault}_w{workers}.png"
        gp += [f"set terminal pngcairo noenhanced size {480 * cols},{360 * rows} font ',9'",
               f"set output '{png}'",
               f"set multiplot layout {rows},{cols} title 'Test accuracy: {fault}, {workers} "
               "worker(s); shaded: outages'",
               "set grid; set key bottom right; set xlabel 'time since the workers started (s)'"]
        for v in variants:
            gp.append(f"set title '{v}'; set ylabel 'test accuracy'")
            sel = [c for c in ok if (c["fault"], c["workers"], c["variant"]) ==
                   (fault, workers, v)]
            _panel(d, gp, f"acc_{fault}_w{workers}_{v}", sel, ttf)
        gp.append("unset multiplot")
        pngs.append(png)
    with open(os.path.join(d, "plots.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    if not pngs or not shutil.which("gnuplot"):
        return []
    r = subprocess.run(["gnuplot", "plots.gp"], cwd=d, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"gnuplot failed in {d}: {r.stdout.strip()[-500:]}")
    return pngs


def write_run(run):
    """run.png (and run.gp, run_acc.dat, run_server<i>.dat) in a run folder
    analyze_run.py has analyzed: test accuracy and per-server pushes/s over
    time. Returns the PNG's path, or None without gnuplot."""
    import json
    with open(os.path.join(run, "metrics.json")) as f:
        metrics = json.load(f)
    acc = _curve({"dir": run})
    with open(os.path.join(run, "run_acc.dat"), "w") as o:
        o.writelines(f"{t:.3f} {a:.4f}\n" for t, a in acc)
    rates = {}
    path = os.path.join(run, "server_rates.csv")
    if os.path.exists(path):
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                rates.setdefault(int(r["server"]), []).append((r["time_s"], r["pushes_per_s"]))
    for sid, pts in rates.items():
        with open(os.path.join(run, f"run_server{sid}.dat"), "w") as o:
            o.writelines(f"{t} {v}\n" for t, v in pts)
    name = os.path.basename(os.path.normpath(run)).replace("'", "")
    gp = ["# Generated by scripts/experiment/plots.py: gnuplot run.gp", "set encoding utf8",
          "set terminal pngcairo size 960,720 font ',9'", "set output 'run.png'",
          f"set multiplot layout 2,1 title '{name}: shaded outages; green +sN: server added, "
          "red -sN: drained; dotted vN: a range move published (map version)'",
          "set grid; set key bottom right; set xlabel 'time since the workers started (s)'"]
    _markers(gp, metrics)
    gp += ["set ylabel 'test accuracy'",
           "plot 'run_acc.dat' using 1:2 with lines lw 2 lc rgb '#08519c' title 'test accuracy'"]
    gp += ["set key top left", "set ylabel 'pushes/s (servers.csv)'"]
    if rates:
        gp.append("plot " + ", \\\n     ".join(
            f"'run_server{sid}.dat' using 1:2 with lines lw 1.5 title 'server {sid}'"
            for sid in sorted(rates)))
    else:
        gp.append("set label 'no servers.csv (sample_servers_s)' at graph 0.3,0.5; "
                  "plot [0:1] NaN notitle")
    _clear_markers(gp)
    gp.append("unset multiplot")
    with open(os.path.join(run, "run.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    if not shutil.which("gnuplot"):
        return None
    r = subprocess.run(["gnuplot", "run.gp"], cwd=run, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"gnuplot failed in {run}: {r.stdout.strip()[-500:]}")
    return os.path.join(run, "run.png")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: plots.py RUN_DIR (a run folder analyze_run.py has analyzed)")
    print(write_run(sys.argv[1]) or "gnuplot not found: run.gp written")
