"""Every call of relaxps.Client against a real coordinator and server."""
import json

import numpy as np
import pytest
import torch

import relaxps


def connect(cluster, **kwargs):
    return relaxps.Client(cluster.endpoint, **kwargs)


def test_dense_push_pull_and_push_pull_apply_sgd(cluster):
    with connect(cluster) as c:
        c.create_table("w", 10, optimizer="sgd", lr=0.5, init=("constant", 1.0))
        w = np.zeros(10, np.float32)
        c.pull("w", w)
        np.testing.assert_array_equal(w, np.ones(10))
        c.push("w", np.ones(10, np.float32))
        c.pull("w", w)
        np.testing.assert_array_equal(w, np.full(10, 0.5))
        out = np.empty(4, np.float32)
        c.push_pull("w", np.full(4, 2.0, np.float32), out, offset=6)
        np.testing.assert_array_equal(out, np.full(4, -0.5))
        c.pull("w", w)
        np.testing.assert_array_equal(w, [0.5] * 6 + [-0.5] * 4)


def test_create_table_options_round_trip(cluster):
    with connect(cluster) as c:
        c.create_table("a", 100, optimizer="adam", lr=0.001, beta1=0.8,
                       init=[(0, 50, "uniform", -0.1, 0.1), (50, 100, "normal", 0.0, 1.0)],
                       init_seed=7, lr_schedule="step:every=10,gamma=0.5")
        c.create_table("a", 100, optimizer="adam", lr=0.001, beta1=0.8,
                       init=[(0, 50, "uniform", -0.1, 0.1), (50, 100, "normal", 0.0, 1.0)],
                       init_seed=7, lr_schedule="step:every=10,gamma=0.5")  # identical: OK
        info = c.get_table("a")
        assert info["optimizer"] == "adam" and info["size"] == 100 and not info["sparse"]
        assert info["beta1"] == pytest.approx(0.8)
        assert info["init"] == [(0, 50, "uniform", pytest.approx(-0.1), pytest.approx(0.1)),
                                (50, 100, "normal", 0.0, 1.0)]
        assert info["init_seed"] == 7
        w = np.zeros(100, np.float32)
        c.pull("a", w)
        assert np.all(np.abs(w[:50]) <= 0.1) and np.any(w[:50] != 0)
        with pytest.raises(relaxps.InvalidArgument, match="'a'"):
            c.create_table("a", 100, optimizer="sgd")
        c.create_table("rows", sparse=True, row_width=3)
        assert sorted(t["name"] for t in c.list_tables()) == ["a", "rows"]


def test_sparse_rows(cluster):
    with connect(cluster) as c:
        c.create_table("emb", sparse=True, row_width=4, optimizer="sgd", lr=1.0,
                       init=("constant", 2.0))
        ids = np.array([3, 1 << 40, 7], np.uint64)
        c.push_rows("emb", ids, np.arange(12, dtype=np.float32))
        out = np.zeros((3, 4), np.float32)
        c.pull_rows("emb", ids, out)
        np.testing.assert_array_equal(out, 2.0 - np.arange(12).reshape(3, 4))
        fresh = np.zeros((2, 4), np.float32)
        c.pull_rows("emb", np.array([5, 3], np.int64), fresh)  # int64 ids work too
        np.testing.assert_array_equal(fresh[0], [2.0] * 4)
        np.testing.assert_array_equal(fresh[1], [2.0, 1.0, 0.0, -1.0])


def test_clock_barrier_learning_rate_and_job_info(cluster):
    with connect(cluster) as c:
        assert c.worker_id == 0
        job = c.job
        assert job["consistency"] == "async" and job["recovery"] == "none"
        assert job["num_servers"] == 1 and job["worker_id"] == 0
        assert c.current_clock == 0
        assert c.clock() == 1 and c.clock() == 2 and c.current_clock == 2
        c.barrier()  # the only live worker
        c.create_table("w", 4, optimizer="sgd", lr=1.0)
        c.set_learning_rate("w", 0.25)
        assert c.get_table("w")["lr_changes"] == [(2, 0.25)]
        c.push("w", np.ones(4, np.float32))
        w = np.zeros(4, np.float32)
        c.pull("w", w)
        np.testing.assert_array_equal(w, np.full(4, -0.25))
        assert c.last_params_clock >= 0
        assert c.coordinator_healthy and not c.job_done
        stats = c.stats()
        assert stats["requests"] > 0 and stats["bytes_sent"] >= 16 and stats["errors"] == 0
        assert set(stats) == {"bytes_sent", "bytes_received", "requests", "errors",
                              "cache_hits", "cache_misses", "local_steps", "acked_updates",
                              "incarnation", "recovery_counters"}
        assert stats["acked_updates"] == 1  # The one push part the server acknowledged.
        needs = job["recovery_needs"]
        assert needs["restart"] == "never" and not needs["tolerates_server_loss"]
        # Deprecated aliases of the needs (one release).
        assert job["resends_across_restarts"] is False
        assert job["trains_through_server_loss"] is False


def test_async_requests_and_torch_tensors(cluster):
    with connect(cluster) as c:
        c.create_table("t", 1000, optimizer="sgd", lr=1.0)
        grads = torch.ones(1000)
        reqs = [c.push_async("t", grads[i * 100:(i + 1) * 100], offset=i * 100)
                for i in range(10)]
        for r in reqs:
            assert r.wait(timeout=30)
            assert r.done()
        out = torch.zeros(1000)
        r = c.pull_async("t", out)
        assert r.wait()
        torch.testing.assert_close(out, torch.full((1000,), -1.0))
        param = torch.nn.Parameter(torch.zeros(10, 100))  # requires_grad: detached, shared
        c.push_pull("t", torch.ones(10, 100), param)
        torch.testing.assert_close(param.data, torch.full((10, 100), -2.0))
        r = c.push_pull_async("t", np.ones(1000, np.float32), np.zeros(1000, np.float32))
        assert r.wait() is True


def test_close_and_context_manager(cluster):
    c = connect(cluster)
    c.create_table("w", 4)
    with c:
        assert not c.closed
    assert c.closed
    with pytest.raises(relaxps.Aborted, match="closed"):
        c.pull("w", np.zeros(4, np.float32))
    c.close()  # idempotent


def test_two_clients_get_their_own_worker_ids(cluster):
    with connect(cluster) as a, connect(cluster) as b:
        assert {a.worker_id, b.worker_id} == {0, 1}
        # An observer only reads; an operator session creates tables.
        with connect(cluster, role="observer") as o:
            with pytest.raises(relaxps.PermissionDenied, match="operator session"):
                o.create_table("x", 2)
        with connect(cluster, role="operator") as op:
            op.create_table("x", 2)
            assert [t["name"] for t in op.list_tables()] == ["x"]


def test_events_file_gets_the_client_library_events(cluster, tmp_path):
    path = tmp_path / "events.jsonl"
    with connect(cluster, events_file=str(path)) as c:
        wid = c.worker_id
    events = [json.loads(line) for line in path.read_text().splitlines()]
    reg = [e for e in events if e["kind"] == "client_registered"]
    assert reg and reg[0]["process"] == f"worker-{wid}", events
    with pytest.raises(relaxps.Error, match="events_file"):
        connect(cluster, events_file=str(tmp_path / "missing" / "events.jsonl"))


def test_report_finished_is_for_workers(cluster):
    with connect(cluster) as c:
        c.report_finished(timeout_ms=2000)  # Taken by the coordinator: no error.
    with connect(cluster, role="observer") as o:
        with pytest.raises(relaxps.InvalidArgument, match="workers only"):
            o.report_finished()
