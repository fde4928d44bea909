"""What the launcher leaves in the run folder besides the processes' own
files: summary.json (the job's outcome, for programs), events.csv (faults,
restarts and what the coordinator's and clients' events said about them, on
the workers' time axis, for the experiment harness), prometheus.yml and
metrics.txt (--metrics), and the final lines it prints."""
import csv
import json
import os
import time


def write_prometheus(sup, quiet=False):
    serving = [p for p in sup.procs if p.metrics_port]
    if not serving:
        return
    lines = [f"# Written by {sup.prog} for {sup.out}:",
             f"#   prometheus --config.file={sup.out}/prometheus.yml",
             "global:", "  scrape_interval: 5s", "scrape_configs:"]
    for role in ("coordinator", "server", "worker"):
        procs = [p for p in serving if p.role == role]
        if not procs:
            continue
        lines += [f"  - job_name: relaxps-{role}", "    static_configs:"]
        for p in procs:
            lines += [f"      - targets: ['{p.host.addr}:{p.metrics_port}']",
                      f"        labels: {{role: '{role}', id: '{p.index}', "
                      f"run: '{os.path.basename(sup.out)}'}}"]
    with open(os.path.join(sup.out, "prometheus.yml"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(sup.out, "metrics.txt"), "w") as f:
        for p in serving:
            f.write(f"{p.name} http://{p.host.addr}:{p.metrics_port}/metrics\n")
    if quiet:
        return
    sup.echo(f"{sup.prog}: Prometheus metrics (scrape config {sup.out}/prometheus.yml):")
    for p in serving:
        sup.echo(f"  {p.name} http://{p.host.addr}:{p.metrics_port}/metrics")


def _derived_rows(sup):
    """events.csv rows from events: re-seeds, fallbacks, takeovers, the first
    acknowledged push after each lone server kill, a leader after a
    coordinator kill."""
    rows = []
    if sup.start_unix is None:
        return rows
    t = lambda ev: ev["ts_unix_ms"] / 1000.0 - sup.start_unix  # noqa: E731
    for ev, _name in sup.state.derived:
        k = ev["kind"]
        if k == "reseed_done":
            # The round in words (summary), as the coordinator's RESEED line had it.
            detail = ev.get("summary") or f"server={ev.get('server')} source={ev.get('source')}"
            if "seconds=" not in detail:
                detail += f" seconds={ev.get('seconds')}"
            rows.append((t(ev), "reseed", ev.get("server"), detail))
        elif k == "fallback":
            rows.append((t(ev), "fallback", ev.get("server"),
                         f"cause={ev.get('cause')} source={ev.get('source')}"))
        elif k in ("range_move_done", "range_move_failed"):
            detail = (f"table={ev.get('table')} keys={ev.get('begin')}-{ev.get('end')} "
                      f"source={ev.get('source')}")
            detail += (f" map_version={ev.get('map_version')} ms={ev.get('ms')}"
                       if k == "range_move_done" else f" reason={ev.get('reason')}")
            rows.append((t(ev), k, ev.get("destination"), detail))
        elif k == "spare_takeover":
            rows.append((t(ev), "takeover", ev.get("server"),
                         "holders=" + "+".join(map(str, ev.get("holders", [])))))
    acks = sorted(ev["ts_unix_ms"] for ev, _ in sup.state.derived
                  if ev["kind"] == "client_failover_acked")
    for server, kill_ms in sorted(sup.kill_times.items(), key=lambda x: x[1]):
        first = next((a for a in acks if a >= kill_ms), None)
        if first is not None:
            rows.append((kill_ms / 1000.0 - sup.start_unix, f"failover_ms={first - kill_ms}",
                         server, ""))
    if sup.coordinator_kill_ms is not None:
        for name, ev in sup.state.leaders:
            if ev["ts_unix_ms"] >= sup.coordinator_kill_ms:
                idx = 0 if name == "coordinator" else int(name.rsplit("-", 1)[1])
                rows.append((t(ev), "leader", idx,
                             f"takeover_ms={ev['ts_unix_ms'] - sup.coordinator_kill_ms}"))
                break
    return rows


def _write_events_csv(sup):
    # By time; at equal times the launcher's own action before what it caused.
    rows = [r for _, _, r in sorted([(r[0], 0, r) for r in sup.csv_rows] +
                                    [(r[0], 1, r) for r in _derived_rows(sup)],
                                    key=lambda x: x[:2])]
    with open(os.path.join(sup.out, "events.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time_s", "event", "server", "detail"])
        for t, ev, server, detail in rows:
            w.writerow([f"{t:.3f}", ev, server, str(detail).replace(",", ";")])


def _move(ev, origin):
    """A range_move_done / _failed event as a summary row (time_s on the
    workers' axis)."""
    row = {k: ev.get(k) for k in ("kind", "table", "begin", "end", "source", "destination",
                                  "map_version", "ms", "reason") if k in ev}
    if origin is not None:
        row["time_s"] = round(ev["ts_unix_ms"] / 1000.0 - origin, 3)
    return row


def _final_line(e):
    def f(key, digits):
        v = e.get(key)
        return "nan" if v is None else f"{v:.{digits}f}"
    return (f"final worker={e.get('worker')} time_s={f('time_s', 1)} steps={e.get('steps')} "
            f"epochs={e.get('epochs')} samples={e.get('samples')} "
            f"samples_per_s={f('samples_per_s', 1)} test_acc={f('test_acc', 4)} "
            f"stopped={int(bool(e.get('stopped')))}")


def finish(sup, left):
    st = sup.state
    acc, acc_from = st.accuracy() if st else (None, None)
    sps = st.samples_per_s() if st else None
    doc = {
        "v": 1,
        "name": sup.spec.name,
        "backend": sup.spec.backend,
        "job_tag": sup.tag,
        "out_dir": sup.out,
        "recovery": sup.spec.recovery,
        "consistency": sup.spec.consistency,
        "verdict": sup.verdict,
        "reason": sup.reason,
        "exit_code": sup.exit_code,
        "job_end": st.job_end if st else None,
        "job_failed": st.job_failed if st else None,
        "final_accuracy": acc,
        "accuracy_from": acc_from,
        "samples_per_s": sps,
        "started_unix": round(sup.started_unix, 3),
        "workers_started_unix": None if sup.start_unix is None else round(sup.start_unix, 6),
        "wall_s": round(time.time() - sup.started_unix, 3),
        "processes": [{"name": p.name, "role": p.role, "id": p.index, "host": p.host.name,
                       "pids": p.pids, "exit_codes": p.exit_codes, "restarts": p.restarts,
                       "exit_code": p.exit_codes[-1] if p.exit_codes else None,
                       **({"joined": p.joined_unix is not None} if p.joining else {}),
                       **({"drained": p.left} if p.drained or p.left else {})}
                      for p in sup.procs],
        "faults": sup.faults.applied,
        "faults_not_applied": [f.describe() for f in sup.faults.faults],
        "restarts": sup.restarts,
        "range_moves": [_move(ev, sup.start_unix) for ev in st.range_moves] if st else [],
        "workers": [st.finals[w] for w in sorted(st.finals, key=str)] if st else [],
        "evaluator": st.evaluator_final if st else None,
        "left_running": left,
    }
    if st:
        _write_events_csv(sup)
        st.close()
        for w in sorted(st.finals, key=str):
            sup.echo(_final_line(st.finals[w]))
    with open(os.path.join(sup.out, "summary.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    sup.echo(f"{sup.prog}: final test accuracy {'unknown' if acc is None else acc}; "
             f"total samples/s {'unknown' if sps is None else sps}")
    sup.echo(f"{sup.prog}: job {sup.verdict}: {sup.reason} (exit {sup.exit_code}); "
             f"summary {os.path.join(sup.out, 'summary.json')}; logs and metrics CSVs in "
             f"{sup.out}")
