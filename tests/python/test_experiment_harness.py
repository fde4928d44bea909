"""The experiment harness's pieces without running a job (scripts/experiment/):
cells keyed by config and seed, which faults apply to which policy, the
analysis of a run folder from events and counters only, n < 3 shown as
values, and the shipped TTF reference (a missing one is an error)."""
import csv
import json
import os
import sys
import tempfile

import subprocess

import pytest

SOURCE = os.environ.get("RELAXPS_SOURCE_DIR",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "scripts", "experiment"))

import analyze_run  # noqa: E402
import cells  # noqa: E402
import provenance  # noqa: E402
import summarize  # noqa: E402
import ttf_reference  # noqa: E402

NEEDS = {
    "none": {"experiment_servers": 1, "min_replicas": 1, "store_kind": "any", "restart": "never",
             "tolerates_server_loss": False, "tolerates_chain_loss": False,
             "tolerates_pause": False},
    "chain": {"experiment_servers": 3, "min_replicas": 2, "store_kind": "any",
              "restart": "same-id-rejoins-as-tail", "tolerates_server_loss": True,
              "tolerates_chain_loss": False, "tolerates_pause": True},
    "hybrid": {"experiment_servers": 3, "min_replicas": 2, "store_kind": "any",
               "restart": "same-id-rejoins-as-tail", "tolerates_server_loss": True,
               "tolerates_chain_loss": True, "tolerates_pause": True},
}


def build(faults, seeds=(1,), variants=None):
    variants = variants or [v for v in cells.variants(list(NEEDS)) if not v.flags]
    return cells.build(variants, faults, [1], list(seeds), cells.QUICK, NEEDS, quick=True)


def test_cells_are_keyed_by_config_and_seed():
    a, b = build(["kill1"], seeds=(1, 2)), build(["kill1"], seeds=(1, 2))
    assert [c.key for c in a] == [c.key for c in b]  # Stable across invocations.
    assert len({c.key for c in a}) == len(a)
    # Seed outermost: every configuration at n=1 before any at n=2.
    assert [c.seed for c in a] == [1] * (len(a) // 2) + [2] * (len(a) // 2)
    # Another flag is another cell, even with the same names.
    longer = cells.build([cells.Variant("chain", "chain")], ["kill1"], [1], [1],
                         cells.Protocol(31, [6], 5), NEEDS, quick=True)
    assert longer[0].key != next(c.key for c in a if c.variant.name == "chain")


def test_faults_follow_the_registry_and_the_double_kill_expectation():
    got = {(c.variant.name, c.fault): c for c in build(["nofault", "kill1", "double_kill"])}
    assert ("none", "nofault") in got and ("none", "kill1") not in got
    assert ("none", "double_kill") not in got
    assert got[("chain", "double_kill")].expect_exit == 3  # A clear error, not training on.
    assert got[("hybrid", "double_kill")].expect_exit == 0  # Falls back and trains on.
    assert "--kill_server=0,1@6" in got[("hybrid", "double_kill")].flags
    # A flag variant follows its policy; its flags are part of its cells.
    assert [v.name for v in cells.variants(["none", "chain", "newpolicy"])] == [
        "none", "chain", "chain-async", "newpolicy"]
    v = cells.Variant("chain-async", "chain", ("--coordinator.replication=async",))
    c = cells.build([v], ["kill1"], [1], [1], cells.QUICK, NEEDS, quick=True)[0]
    assert "--coordinator.replication=async" in c.flags and c.key.startswith("chain-async-kill1")


def test_fewer_than_three_values_are_shown_not_averaged():
    two = summarize.stat([0.81, 0.83, None])
    assert two["mean"] is None and summarize.cell_text(two, ".2f") == "0.81 / 0.83"
    three = summarize.stat([0.80, 0.82, 0.84])
    assert summarize.cell_text(three, ".2f") == "0.82 ± 0.02"


def test_late_staleness_histograms_add_up_and_read_as_clocks_behind():
    total = analyze_run.add_hists([[1, 2], None, [0, 0, 0, 3]])
    assert total == [1, 2, 0, 3]
    assert summarize.hist_text(total) == "0:1 1:2 4-7:3"
    assert summarize.hist_text([]) == "-"


def test_ttf_reference_ships_and_a_missing_one_is_an_error():
    curves = ttf_reference.load_curves()
    assert ("sync_checkpointing", 1) in curves and len(curves[("sync_checkpointing", 1)]) > 50
    with pytest.raises(ttf_reference.MissingReference, match="missing"):
        ttf_reference.load_curves("/nonexistent/ttf_accuracy.csv")


def _event(t, process, kind, **fields):
    return dict(v=1, ts_unix_ms=int((1000.0 + t) * 1000), mono_ms=0, process=process, kind=kind,
                **fields)


def _run_folder(d, reseed=False, replayed=5):
    """A run: one worker stepping every 0.1 s from t=0 to 30 s (60 ms of it
    computing), stalled from 10 s (kill) to 14 s; its first acknowledged push
    after the restart at 13.5 s; evaluations every 2 s dipping after the
    kill; `replayed` updates replayed and 4 handed back late."""
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"workers_started_unix": 1000.0, "wall_s": 31, "samples_per_s": 100.0}, f)
    with open(os.path.join(d, "events.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerows([["time_s", "event", "server", "detail"], ["10.000", "kill", "0", ""],
                      ["12.000", "restart", "0", ""]])
    steps = [i / 10 for i in range(301) if not 10 < i / 10 < 14]
    with open(os.path.join(d, "worker-0.steps.csv"), "w") as f:
        f.write("time_s,clock,staleness,gate_wait_ms,cache_hit,loss,compute_ms\n")
        f.writelines(f"{t - 0.5:.3f},{i},0,0,0,1,60.000\n" for i, t in enumerate(steps))
    accs = {0: 0.5, 2: 0.6, 4: 0.7, 6: 0.75, 8: 0.78, 10: 0.80, 12: 0.74, 14: 0.76, 16: 0.79,
            18: 0.81, 20: 0.83}
    ev = [_event(1.0, "worker-0", "progress", worker=0, time_s=0.5, step=1, epoch=0, samples=32)]
    ev += [_event(t, "evaluator", "evaluator_progress", time_s=t, test_acc=a) for t, a in
           accs.items()]
    ev += [_event(10.2, "worker-0", "client_request_parked", worker=0, server=0, until="restart",
                  acked_updates=100),
           _event(13.5, "worker-0", "client_failover_acked", worker=0, server=0, epoch=1),
           _event(11.0, "evaluator", "evaluator_gap", from_s=10.1, to_s=12.1, failed_pulls=2,
                  reason="x"),
           _event(0.2, "server-0", "server_started", server=0, restored=False,
                  restored_clock=-1),
           _event(12.1, "server-0", "server_started", server=0, restored=True,
                  restored_clock=76, restored_parts=80),
           _event(12.5, "worker-0", "updates_replayed", worker=0, server=0, count=replayed,
                  staleness_hist=[0, 2, replayed - 2]),
           _event(13.6, "worker-0", "client_rejoined", worker=0, server=1, clock=140,
                  late_updates=4, staleness_hist=[1, 0, 0, 3]),
           _event(30.0, "worker-0", "final", worker=0, time_s=29.5, steps=len(steps), samples=9,
                  incarnation=77, acked_updates=260, local_steps=0)]
    if reseed:
        ev.append(_event(13.0, "coordinator", "reseed_done", server=0))
    with open(os.path.join(d, "events.jsonl"), "w") as f:
        f.writelines(json.dumps(e) + "\n" for e in ev)
    with open(os.path.join(d, "counters.json"), "w") as f:
        json.dump({"servers": [{"stats": {"applied_parts": [
            {"worker": 0, "incarnation": 77, "parts": 240}]}}]}, f)
    return len(steps)


def test_a_second_restore_counts_only_what_it_adds():
    """Kills at 10 s and 20 s: 100 pushes acknowledged before the first, 80
    in its checkpoint; 162 steps up to the second (no parked event: counted
    by the steps), 131 in its checkpoint: 31 lost in all, 11 of them by the
    second restore (the first's 20 are not among the 131 either)."""
    with tempfile.TemporaryDirectory() as d:
        _run_folder(d, replayed=0)
        with open(os.path.join(d, "events.csv"), "a") as f:
            f.write("20.000,kill,0,\n22.000,restart,0,\n")
        with open(os.path.join(d, "events.jsonl"), "a") as f:
            f.write(json.dumps(_event(22.1, "server-0", "server_started", server=0,
                                      restored=True, restored_clock=120,
                                      restored_parts=131)) + "\n")
        m = analyze_run.analyze(d)
        assert [f["rolled_back"] for f in m["faults"]] == [20, 11] and m["rolled_back"] == 31


def _two_restores_after_a_replay(d):
    """As above, but the worker replayed the first restore's 20 (replay):
    they are in the second checkpoint's 151; its request parked at the second
    kill says 162 acknowledged."""
    _run_folder(d, replayed=20)
    with open(os.path.join(d, "events.csv"), "a") as f:
        f.write("20.000,kill,0,\n22.000,restart,0,\n")
    with open(os.path.join(d, "events.jsonl"), "a") as f:
        for e in (_event(20.2, "worker-0", "client_request_parked", worker=0, server=0,
                         until="restart", acked_updates=162),
                  _event(22.1, "server-0", "server_started", server=0, restored=True,
                         restored_clock=140, restored_parts=151),
                  _event(22.5, "worker-0", "updates_replayed", worker=0, server=0, count=11,
                         staleness_hist=[0, 0, 0, 0, 11])):
            f.write(json.dumps(e) + "\n")


def test_a_restore_after_a_replay_counts_what_it_rolls_back_itself():
    """The second restore rolls back 162 - 151 = 11 of its own, not 11 less
    the 20 the first one rolled back and the replay made good."""
    with tempfile.TemporaryDirectory() as d:
        _two_restores_after_a_replay(d)
        m = analyze_run.analyze(d)
        assert [f["rolled_back"] for f in m["faults"]] == [20, 11] and m["rolled_back"] == 31
        assert m["applied_late"] == 31 + 4  # And the 4 handed back at the rejoin.


def test_a_packed_cell_has_its_restores_and_recoveries_recounted_from_what_it_keeps():
    import pack
    with tempfile.TemporaryDirectory() as d:
        _two_restores_after_a_replay(d)
        m = analyze_run.write(d)
        with open(os.path.join(d, "cell.json"), "w") as f:
            json.dump({"finished": True, "exit_code": 0}, f)
        pack.pack(d)
        # As an older analysis counted it, before replays were netted out
        # (and with another recovery rule): recounted from the kept events
        # and merged.csv's step times.
        stale = dict(m, rolled_back=20, recovery_s=99.0,
                     faults=[dict(m["faults"][0], recovery_s=99.0),
                             dict(m["faults"][1], rolled_back=0)])
        with open(os.path.join(d, "metrics.json"), "w") as f:
            json.dump(stale, f)
        got = analyze_run.recount_packed(d)
        assert [f["rolled_back"] for f in got["faults"]] == [20, 11] and got["rolled_back"] == 31
        with open(os.path.join(d, "metrics.json")) as f:
            assert json.load(f) == json.loads(json.dumps(m))  # The rest stands.


def test_analysis_reads_events_and_counters_only():
    with tempfile.TemporaryDirectory() as d:
        n_steps = _run_folder(d)
        m = analyze_run.analyze(d)
        f = m["faults"][0]
        assert (f["kind"], f["servers"], f["back_s"]) == ("kill", ["0"], 12.0)
        assert f["recovery_s"] == pytest.approx(3.5)  # The first acknowledged push.
        assert f["pre_acc"] == 0.80 and f["dip"] == pytest.approx(0.06)
        assert f["regain_s"] == pytest.approx(8.0)  # 0.81 at 18 s.
        assert f["eval_blind_s"] == pytest.approx(2.0)
        assert m["acked_lost"] == 20 and m["acked"] == 260  # Counted, not estimated.
        # What the restore had to lose: 100 pushes acknowledged before the
        # kill (101 steps: the last one's push was in flight), 80 of them in
        # the checkpoint (its clock, 76, lags what it holds).
        assert f["rolled_back"] == 20 and m["rolled_back"] == 20
        assert m["final_acc"] == 0.83 and m["t070"] == 4
        # Measured: 60 ms computing in each step after the first over the
        # 30 s from the first step to the last (the 4 s stall included).
        assert m["idle_frac"] == pytest.approx(1 - (n_steps - 1) * 0.06 / 30.0)
        # Replayed and handed back, with their clocks-behind histograms.
        assert m["applied_late"] == 9 and m["late_staleness_hist"] == [1, 2, 3, 3]
        _run_folder(d, reseed=True)
        m = analyze_run.analyze(d)
        assert m["acked_lost"] is None and "re-seeded" in m["acked_lost_note"]


def test_local_steps_that_never_reached_a_server_count_as_dropped():
    # The shape of a 4-worker stateless run without faults (ttf4 seed 2): worker
    # 2 rejoined a merely slow server after 1 local step, then stayed local by
    # mistake for 3,033 more; worker 1 handed back all 1,221 of its own; worker
    # 3 was still away from its server when the job ended; a replay log dropped 35.
    finals = [{"kind": "final", "worker": w, "steps": steps, "acked_updates": acked,
               "incarnation": w, "local_steps": local}
              for w, steps, acked, local in [(0, 100, 100, 0), (1, 2000, 779, 1221),
                                             (2, 4477, 1443, 3034), (3, 50, 45, 5)]]
    events = [{"kind": "client_rejoined", "worker": 2, "local_steps": 1, "late_updates": 1},
              {"kind": "client_rejoined", "worker": 1, "local_steps": 1221, "late_updates": 1220},
              {"kind": "updates_dropped", "worker": 0, "count": 35}] + finals
    m = analyze_run.counts(events, None)
    assert m["dropped"] == 35 + 3033 + 5
    assert m["computed"] == 6627 and m["applied_late"] == 1221
    assert analyze_run.counts(events[1:2] + finals[:2], None)["dropped"] == 0


def test_recovery_takes_no_resend_acknowledged_at_a_later_epoch():
    # ttf4 chain partition seed 2: the head is cut off at 30 s and replaced at
    # 33.3 s (epoch 2). Worker 0 had a push in flight and its resend is
    # acknowledged by the new head; worker 3 had none, stepped on through the
    # new head, and its first acknowledged resend came at 57.6 s, when the old
    # head rejoined as a tail (epoch 3): it recovered at 33.3 s, not 57.6 s.
    times = [t / 10 for t in range(0, 1200) if not 300 < t < 333]
    events = [{"kind": "client_server_lost", "t": 33.3, "worker": w, "epoch": 2} for w in (0, 3)]
    events += [{"kind": "client_failover_acked", "t": 33.4, "worker": 0, "epoch": 2},
               {"kind": "client_failover_acked", "t": 57.6, "worker": 3, "epoch": 3}]
    assert analyze_run.recovery(0, 30.0, 50.0, events, times) == pytest.approx(3.4)
    assert analyze_run.recovery(3, 30.0, 50.0, events, times) == pytest.approx(3.3)
    # A double kill: two losses, two map changes (epochs 2 and 3) in 30 ms;
    # the resend acknowledged at the second one is this fault's.
    events = [{"kind": "client_server_lost", "t": 30.10, "worker": 0, "epoch": 2},
              {"kind": "client_server_lost", "t": 30.13, "worker": 0, "epoch": 3},
              {"kind": "client_failover_acked", "t": 30.16, "worker": 0, "epoch": 3}]
    assert analyze_run.recovery(0, 30.0, 50.0, events, times) == pytest.approx(0.16)


def test_replayed_updates_a_server_skipped_are_not_applied_late():
    # A paused replay server restarted from the checkpoint it wrote on waking:
    # it held the 351 updates its workers replayed, and skipped them (and one
    # resent push) under their keys. After a kill nothing is skipped.
    events = [{"kind": "updates_replayed", "worker": w, "count": n}
              for w, n in enumerate([91, 82, 79, 99])]
    skipped = {"servers": [{"id": 0, "stats": {"duplicates_skipped": "352"}}]}
    assert analyze_run.counts(events, skipped)["applied_late"] == 0
    none = {"servers": [{"id": 0, "stats": {"duplicates_skipped": "0"}}]}
    assert analyze_run.counts(events, none)["applied_late"] == 351
    assert analyze_run.counts(events, None)["applied_late"] == 351


def test_a_run_without_evaluations_has_no_data():
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "summary.json"), "w") as f:
            json.dump({"workers_started_unix": None}, f)
        with pytest.raises(analyze_run.NoData, match="never started"):
            analyze_run.analyze(d)


def _scaled_run_folder(d):
    """_run_folder plus a server added at 5 s, its move published at 6 s
    (map version 4), server 0 drained at 18 s (version 5) and left at 19 s;
    servers.csv samples every second: server 1 takes 100 pushes/s and 2 MB/s
    from 6 s, server 2 (in the job from the start) 120 pushes/s and 2 MB/s,
    server 0 stops being sampled when it left."""
    _run_folder(d)
    with open(os.path.join(d, "events.csv"), "a", newline="") as f:
        csv.writer(f).writerows([
            ["5.000", "add_server", "1", ""], ["5.400", "joined", "1", "pid=7"],
            ["6.000", "range_move_done", "1",
             "table=model keys=0-4096 source=0 map_version=4 ms=20"],
            ["18.000", "drain", "0", ""],
            ["18.500", "range_move_done", "2",
             "table=model keys=4096-8192 source=0 map_version=5 ms=30"],
            ["19.000", "drained", "0", "exit=0"]])
    with open(os.path.join(d, "servers.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time_s", "server", "pushes_total", "pulls_total", "updates_applied_total",
                    "bytes_in_total", "shard_map_version"])
        for t in range(0, 30):
            if t <= 19:
                w.writerow([t, 0, 50 * t, 0, 0, 1e6 * t, 3])
            if t >= 6:
                w.writerow([t, 1, 100 * (t - 6), 0, 0, 2e6 * (t - 6), 5])
            w.writerow([t, 2, 120 * t, 0, 0, 2e6 * t, 5])


def test_scale_events_pauses_and_pushes_per_server_after_the_moves():
    with tempfile.TemporaryDirectory() as d:
        _scaled_run_folder(d)
        m = analyze_run.analyze(d)
        assert [(e["kind"], e["server"], e["map_version"]) for e in m["scale_events"]] == [
            ("add_server", 1, None), ("joined", 1, None), ("range_move_done", 1, 4),
            ("drain", 0, None), ("range_move_done", 2, 5), ("drained", 0, None)]
        # Scale events are no outages: only the kill is a fault.
        assert [f["kind"] for f in m["faults"]] == ["kill"]
        # The 4 s stall of _run_folder (its steps at 10.0 and 14.0).
        assert m["max_step_gap_s"] == pytest.approx(4.0)
        assert m["max_step_gap_at_s"] == pytest.approx(10.0)
        p = m["pushes_after_moves"]
        # From the drained row (19 s) to the last step (30 s): server 0 is gone.
        assert p["from_s"] == 19.0 and sorted(p["per_server"]) == ["1", "2"]
        assert p["per_server"]["1"] == pytest.approx(100) and p["even_share"] == pytest.approx(110)
        assert p["max_dev"] == pytest.approx(10 / 110)
        assert m["bytes_in_after_moves"]["max_dev"] == pytest.approx(0)
        with open(os.path.join(d, "server_rates.csv")) as f:
            rows = list(csv.DictReader(f))
        assert {r["server"] for r in rows} == {"0", "1", "2"}
        assert float(next(r for r in rows if r["server"] == "1")["pushes_per_s"]) == 100
        # The report's section names each event with its map version.
        import report
        lines = report.scale_section([{"metrics": m}])
        assert any("6 range_move_done 1 v4" in line and "s1 100.0 (-9%)" in line
                   and "| 4.00 |" in line for line in lines), lines
        # No scale events: no section, no rates.
        assert report.scale_section([{"metrics": analyze_run.analyze(d) | {
            "scale_events": []}}]) == []


def test_the_plot_of_a_run_marks_its_scale_events():
    import plots
    with tempfile.TemporaryDirectory() as d:
        _scaled_run_folder(d)
        analyze_run.write(d)
        plots.write_run(d)
        with open(os.path.join(d, "run.gp")) as f:
            gp = f.read()
        assert "set arrow from 5.00,graph 0 to 5.00,graph 1" in gp
        assert "set label 'v5' at 18.50" in gp and "set label '-s0' at 18.00" in gp
        assert "set object rect from 10.00" in gp  # The kill's outage, shaded.
        assert "'run_server2.dat'" in gp
        with open(os.path.join(d, "run_server1.dat")) as f:
            assert f.readline().split() == ["6.500", "100.00"]


def test_elastic_check_rebuilds_what_each_server_holds_after_the_moves():
    import elastic_check
    moves = [("model", 102400, 203530, 0, 1), ("model", 69632, 102400, 0, 2),
             ("model", 172032, 203530, 1, 2), ("model", 0, 69632, 0, 2),
             ("bias", 5, 10, 0, 1), ("bias", 0, 5, 0, 2)]
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "summary.json"), "w") as f:
            json.dump({"range_moves": [
                dict(kind="range_move_done", table=t, begin=b, end=e, source=s, destination=x)
                for t, b, e, s, x in moves] + [dict(kind="range_move_failed", table="model",
                                                    begin=0, end=1, source=2, destination=1)]},
                      f)
        # server 1: model [102400, 172032) and bias [5, 10); server 2 the rest.
        assert elastic_check.holdings(d) == {1: (2, 69637), 2: (4, 133903)}
        with open(os.path.join(d, "summary.json"), "w") as f:
            json.dump({"range_moves": [dict(kind="range_move_done", table="model", begin=0,
                                            end=9, source=3, destination=1)]}, f)
        assert elastic_check.holdings(d) is None  # Not a one-server start.


def test_the_step_pause_near_scale_events_leaves_other_stalls_out():
    with tempfile.TemporaryDirectory() as d:
        _scaled_run_folder(d)
        m = analyze_run.analyze(d)
        # The 4 s stall from 10 s overlaps the windows of the add (5 s: 4-10 s)
        # and its move (6 s: 5-11 s).
        assert m["scale_step_gap_s"] == pytest.approx(4.0)
        steps = {0: [0.0, 1.0, 2.0, 9.0, 9.5, 20.0, 20.2, 20.4]}
        assert analyze_run.max_step_gap(steps) == (10.5, 9.5)
        assert analyze_run.max_step_gap(steps, [(0.5, 1.5), (19.0, 25.0)]) == (10.5, 9.5)
        assert analyze_run.max_step_gap(steps, [(0.5, 1.5)]) == (1.0, 0.0)
        assert analyze_run.max_step_gap(steps, [(3.0, 8.0)]) == (7.0, 2.0)
        assert analyze_run.max_step_gap(steps, [(30.0, 31.0)]) == (None, None)


def test_a_packed_cell_keeps_its_analysis_and_gzipped_series():
    import pack
    import plots
    with tempfile.TemporaryDirectory() as d:
        files = {"cell.json": json.dumps({"finished": True, "exit_code": 0}),
                 "metrics.json": "{}", "summary.json": "{}", "events.csv": "t,kind\n",
                 "merged.csv": "time_s,series,value\n1.0,evaluation,0.5\n2.0,samples_per_s,9\n"
                               "3.0,evaluation,0.7\n",
                 "events.jsonl": '{"kind":"final"}\n', "worker-0.log": "x" * 1000,
                 "worker-0.steps.csv": "time_s,clock\n", "launch.out": "y"}
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        os.makedirs(os.path.join(d, "events"))
        with open(os.path.join(d, "events", "worker-0.jsonl"), "w") as f:
            f.write("{}\n")
        before, after = pack.pack(d)
        assert after < before
        assert sorted(os.listdir(d)) == ["cell.json", "events.csv", "events.jsonl.gz",
                                         "merged.csv.gz", "metrics.json", "summary.json"]
        with open(os.path.join(d, "cell.json")) as f:
            rec = json.load(f)
        assert rec["finished"] and rec["packed"]["removed"] == [
            "events/", "launch.out", "worker-0.log", "worker-0.steps.csv"]
        # What the plots and a reader use reads the same through the gzip.
        assert plots._curve({"dir": d}) == [(1.0, 0.5), (3.0, 0.7)]
        with pack.open_text(os.path.join(d, "events.jsonl")) as f:
            assert json.loads(f.readline())["kind"] == "final"
        assert pack.is_packed(d) and pack.pack(d) is None  # Idempotent.


def test_a_cell_names_the_last_commit_that_changed_code():
    with tempfile.TemporaryDirectory() as root:
        def commit(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
            subprocess.run(["git", "-C", root, "add", path], check=True)
            subprocess.run(["git", "-C", root, "-c", "user.name=t", "-c", "user.email=t@t",
                            "commit", "-qm", path], check=True)
            return subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], check=True,
                                  stdout=subprocess.PIPE, text=True).stdout.strip()
        subprocess.run(["git", "init", "-q", root], check=True)
        out = os.path.join(root, "docs", "results", "m")
        code = commit("server/a.cc", "1")
        # A finished cell, a note on the results, the README: none is code.
        for path in ("docs/results/m/cells/c/cell.json", "docs/results/README.md",
                     "docs/experiments.md", "README.md", "recovery/x/README.md"):
            head = commit(path, "1")
            assert provenance.code_commit(out, root=root) == code, path
            assert provenance.code_commit(out, head, root=root) == code, path
        assert provenance.code_commit(out, root=root) == code
        later = commit("scripts/experiment/cells.py", "1")  # The harness is code.
        assert provenance.code_commit(out, root=root) == later


def test_the_accuracy_line_breaks_where_the_evaluator_could_not_pull():
    import plots
    grid = plots._on_grid([(1.0, 0.5), (3.0, 0.6), (21.0, 0.7)], 22)
    # Held for up to STALE_S (6 s) after the last evaluation, then a gap, not
    # a flat line through the outage.
    assert grid == [None, 0.5, 0.6, 0.6, 0.6, None, None, None, None, None, None, 0.7]
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "merged.csv"), "w") as f:
            f.write("time_s,source,value\n1.0,evaluation,0.5\n3.0,evaluation,0.6\n"
                    "21.0,evaluation,0.7\n")
        gp = []
        assert plots._panel(d, gp, "p", [{"dir": d, "metrics": {}, "fault": "kill1",
                                          "variant": "none"}], None)
        with open(os.path.join(d, "p.dat")) as f:
            rows = f.read().split("\n")
        assert rows[:5] == ["2.0 0.5000 0.5000 0.5000", "4.0 0.6000 0.6000 0.6000",
                            "6.0 0.6000 0.6000 0.6000", "8.0 0.6000 0.6000 0.6000", ""]


def test_a_cell_names_the_stores_its_servers_ran_on():
    import pack
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "events.jsonl"), "w") as f:
            for server, store in ((0, "memory"), (1, "memory"), (0, "memory")):
                f.write(json.dumps(_event(1.0, f"server-{server}", "server_started",
                                          server=server, store=store)) + "\n")
            f.write("not json, \"server_started\"\n")
        with open(os.path.join(d, "events.jsonl"), "ab") as f:
            f.write(b'{"kind": "server_started", "store": "mem\xff')  # Cut by a kill.
        with open(os.path.join(d, "cell.json"), "w") as f:
            json.dump({"finished": True}, f)
        assert summarize.stores_of(d) == ["memory"]
        pack.pack(d)  # Read through the gzip as well.
        assert summarize.stores_of(d) == ["memory"]
        assert summarize.stores_of(os.path.join(d, "nothing")) == []
