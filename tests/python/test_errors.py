"""Bad input gets a clear exception, never a crash or a hang."""
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

import relaxps


@pytest.fixture
def client(cluster):
    with relaxps.Client(cluster.endpoint) as c:
        c.create_table("w", 8)
        c.create_table("rows", sparse=True, row_width=2)
        yield c


def test_status_codes_become_exception_classes(client):
    with pytest.raises(relaxps.NotFound, match="unknown table 'nope'") as e:
        client.pull("nope", np.zeros(8, np.float32))
    assert e.value.code == "NotFound" and "nope" in e.value.message
    assert isinstance(e.value, relaxps.Error) and isinstance(e.value, LookupError)
    with pytest.raises(relaxps.NotFound):
        client.get_table("nope")


def test_wrong_sizes(client):
    with pytest.raises(relaxps.InvalidArgument) as e:
        client.push("w", np.zeros(9, np.float32))  # table has 8 keys
    assert isinstance(e.value, ValueError)
    with pytest.raises(relaxps.InvalidArgument):
        client.pull("w", np.zeros(4, np.float32), offset=6)
    with pytest.raises(relaxps.InvalidArgument, match=r"range \[0, 0\) is outside table 'w'"):
        client.push("w", np.zeros(0, np.float32))
    with pytest.raises(relaxps.InvalidArgument, match="expected 4 floats for 2 rows"):
        client.pull_rows("rows", np.array([1, 2], np.uint64), np.zeros(5, np.float32))
    with pytest.raises(relaxps.InvalidArgument, match="same size"):
        client.push_pull("w", np.zeros(8, np.float32), np.zeros(4, np.float32))


def test_wrong_dtype_layout_and_types(client):
    with pytest.raises(TypeError, match=r"push: grads must hold float32, got format 'd'"):
        client.push("w", np.zeros(8, np.float64))
    with pytest.raises(TypeError, match="pull: out must hold float32"):
        client.pull("w", torch.zeros(8, dtype=torch.float16))
    with pytest.raises(ValueError, match="not C-contiguous"):
        client.push("w", np.zeros(16, np.float32)[::2])
    with pytest.raises(ValueError, match="not C-contiguous"):
        client.pull("w", torch.zeros(4, 2).t())
    ro = np.zeros(8, np.float32)
    ro.setflags(write=False)
    client.push("w", ro)  # read-only is fine to push
    with pytest.raises(ValueError, match="pull: out is read-only"):
        client.pull("w", ro)
    with pytest.raises(TypeError, match="not builtins.list"):
        client.push("w", [0.0] * 8)
    with pytest.raises(TypeError, match="uint64 or int64 row ids"):
        client.pull_rows("rows", np.array([1, 2], np.int32), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"ids\[1\] is -2"):
        client.push_rows("rows", np.array([1, -2], np.int64), np.zeros(4, np.float32))


def test_fast_path_arrays_get_the_same_errors(client):
    # Float32 ndarrays are taken from their own header; anything that path
    # declines goes through the buffer protocol and gets its errors.
    g = np.zeros(8, np.float32)
    with pytest.raises(TypeError, match=r"push_pull: grads must hold float32, got format 'd'"):
        client.push_pull("w", np.zeros(8, np.float64), g)
    with pytest.raises(TypeError, match=r"push_pull: out must hold float32, got format 'e'"):
        client.push_pull("w", g, np.zeros(8, np.float16))
    with pytest.raises(TypeError, match=r"pull: out must hold float32, got format '>f'"):
        client.pull("w", np.zeros(8, ">f4"))  # big-endian float32: not this host's
    with pytest.raises(ValueError, match="push_pull: out is not C-contiguous"):
        client.push_pull("w", g, np.zeros(16, np.float32)[::2])
    with pytest.raises(ValueError, match="pull: out is not C-contiguous"):
        client.pull("w", np.zeros((2, 4), np.float32, order="F"))
    ro = np.zeros(8, np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="push_pull: out is read-only"):
        client.push_pull("w", g, ro)
    client.push_pull("w", ro, g)  # read-only grads are fine
    with pytest.raises(relaxps.InvalidArgument, match="same size"):
        client.push_pull("w", g, np.zeros(7, np.float32))
    with pytest.raises(relaxps.InvalidArgument):
        client.push("w", np.zeros((3, 3), np.float32))  # 9 keys, the table has 8


def test_bad_calls_of_the_dense_methods(client):
    g = np.zeros(8, np.float32)
    with pytest.raises(TypeError, match=r"push_pull\(\) missing required argument 'out'"):
        client.push_pull("w", g)
    with pytest.raises(TypeError, match="push\\(\\) got an unexpected keyword argument 'grad'"):
        client.push("w", grad=g)
    with pytest.raises(TypeError, match="multiple values for argument 'table'"):
        client.pull("w", g, table="w")
    with pytest.raises(TypeError, match="takes at most 3 arguments"):
        client.pull("w", g, 0, 1)
    with pytest.raises(TypeError, match="push: table must be a str, not int"):
        client.push(3, g)
    with pytest.raises(TypeError, match="pull: offset must be an int, not float"):
        client.pull("w", g, 0.5)
    with pytest.raises(ValueError, match="pull: offset must be a non-negative int"):
        client.pull("w", g, offset=-1)
    # Keywords in any order; any integer (numpy's too) as the offset.
    before, after, out = np.zeros(8, np.float32), np.zeros(8, np.float32), np.zeros(4, np.float32)
    client.pull("w", before)
    assert client.push_pull(out=out, grads=np.ones(4, np.float32), table="w",
                            offset=np.int64(4)) is None
    client.pull("w", after)
    np.testing.assert_array_equal(after[:4], before[:4])
    np.testing.assert_array_equal(after[4:], out)
    assert np.all(after[4:] < before[4:])


def test_bad_options(cluster):
    with pytest.raises(relaxps.InvalidArgument, match="tcp://"):
        relaxps.Client("127.0.0.1:1")
    with relaxps.Client(cluster.endpoint) as c:
        with pytest.raises(relaxps.InvalidArgument):
            c.create_table("bad", 10, optimizer="rmsprop")
        with pytest.raises(relaxps.InvalidArgument, match="lr_schedule"):
            c.create_table("bad", 10, lr_schedule="linear:forever")
        with pytest.raises(relaxps.InvalidArgument, match="init kind"):
            c.create_table("bad", 10, init=("gaussian", 0.0, 1.0))
        with pytest.raises(TypeError, match="init"):
            c.create_table("bad", 10, init=42)
        with pytest.raises(relaxps.InvalidArgument):
            c.set_learning_rate("nope", -1.0)


def test_server_down_raises_with_the_message(cluster):
    with relaxps.Client(cluster.endpoint, request_timeout_ms=1000) as c:
        c.create_table("w", 8)
        w = np.zeros(8, np.float32)
        c.pull("w", w)
        cluster.kill_server(0)
        start = time.monotonic()
        # Unavailable or DeadlineExceeded from the request, or Aborted once the
        # coordinator declared the server dead and failed the job
        # (--recovery=none): whichever comes first.
        with pytest.raises(relaxps.PS_FAILURES) as e:
            c.push_pull("w", np.ones(8, np.float32), w)
        assert time.monotonic() - start < 30
        assert "push_pull of table 'w'" in str(e.value) and e.value.message
        assert e.value.code in ("Unavailable", "DeadlineExceeded", "Aborted")


def test_coordinator_unreachable_fails_connect_in_time():
    start = time.monotonic()
    with pytest.raises((relaxps.Unavailable, relaxps.DeadlineExceeded), match="cannot join"):
        relaxps.Client("tcp://127.0.0.1:9", request_timeout_ms=500)
    assert time.monotonic() - start < 30


def test_a_blocked_call_releases_the_gil_and_ctrl_c_interrupts_it(make_cluster):
    # The stopped server must not be declared dead (failing the job, and the
    # pull) before the interrupt comes.
    cluster = make_cluster(servers=1, coordinator_args=["--heartbeat_timeout_ms=60000"])
    with relaxps.Client(cluster.endpoint, request_timeout_ms=60000) as c:
        c.create_table("w", 8)
        out = np.zeros(8, np.float32)
        c.pull("w", out)
        os.kill(cluster.servers[0].pid, signal.SIGSTOP)  # the pull below waits
        spins, done = [0], threading.Event()

        def spin():
            while not done.is_set():
                spins[0] += 1

        spinner = threading.Thread(target=spin)
        spinner.start()
        main, pulling = threading.main_thread().ident, threading.Event()

        def interrupt():  # Ctrl-C once the pull below is under way
            if pulling.wait(60):
                time.sleep(0.5)
                signal.pthread_kill(main, signal.SIGINT)

        sender = threading.Thread(target=interrupt)
        sender.start()
        requests = c.stats()["requests"]
        try:
            with pytest.raises(KeyboardInterrupt):
                start, before = time.monotonic(), spins[0]
                pulling.set()
                c.pull("w", out)
            waited, spun = time.monotonic() - start, spins[0] - before
        finally:
            pulling.set()
            done.set()
            spinner.join()
            sender.join()
            os.kill(cluster.servers[0].pid, signal.SIGCONT)
        assert c.stats()["requests"] > requests, "interrupted before the pull was sent"
        assert 0.4 <= waited < 10, waited
        assert spun > 1000, "another thread could not run while the pull waited"
        # The next blocking calls of this thread wait for their own replies,
        # not for the interrupted pull's (which completes meanwhile).
        final = np.zeros(8, np.float32)
        for _ in range(3):
            c.push_pull("w", np.full(8, -1.0, np.float32), out)
        c.pull("w", final)
        np.testing.assert_array_equal(out, final)
        assert np.all(final > 0)
