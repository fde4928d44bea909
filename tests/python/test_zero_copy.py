"""Arrays travel without copies: the array's own memory is sent and filled."""
import gc
import sys
import time

import numpy as np
import torch

import relaxps

MIB = 1 << 20


def peak_rss_mib():
    """The process's peak resident set (VmHWM), in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def test_a_64_mib_push_sends_the_array_itself(cluster):
    n = 64 * MIB // 4
    with relaxps.Client(cluster.endpoint) as c:
        c.create_table("big", n, optimizer="sgd", lr=1.0)
        grads = np.ones(n, np.float32)  # touched: resident now
        c.push("big", grads[:1024], offset=0)  # warm up the connection
        before = peak_rss_mib()
        for _ in range(3):
            c.push("big", grads)
        zero_copy_growth = peak_rss_mib() - before
        # The measure sees a copy: the same push of a copied array.
        c.push("big", grads.copy())
        copy_growth = peak_rss_mib() - before
        print(f"peak RSS growth: 3 zero-copy pushes of 64 MiB {zero_copy_growth:.1f} MiB; "
              f"one push of a copy {copy_growth:.1f} MiB")
        assert zero_copy_growth < 16, "a push copied the 64 MiB array"
        assert copy_growth >= 60, "the RSS measure did not see a 64 MiB copy"
        # The server applied all four pushes: w = -4 everywhere.
        probe = np.zeros(1024, np.float32)
        c.pull("big", probe, offset=n - 1024)
        np.testing.assert_array_equal(probe, np.full(1024, -4.0))


def test_pull_fills_the_callers_array_in_place(cluster):
    with relaxps.Client(cluster.endpoint) as c:
        c.create_table("w", 4096, optimizer="sgd", lr=1.0, init=("constant", 3.0))
        out = np.zeros(4096, np.float32)
        address = out.__array_interface__["data"][0]
        c.pull("w", out)
        assert out.__array_interface__["data"][0] == address
        np.testing.assert_array_equal(out, np.full(4096, 3.0))
        # A torch tensor: its storage is written, not a temporary's.
        t = torch.zeros(64, 64)
        ptr = t.data_ptr()
        c.push_pull("w", torch.ones(64, 64), t)
        assert t.data_ptr() == ptr
        torch.testing.assert_close(t, torch.full((64, 64), 2.0))
        # A view into a bigger array fills just that slice of it.
        big = np.zeros(8192, np.float32)
        c.pull("w", big[4096:])
        assert np.all(big[:4096] == 0) and np.all(big[4096:] == 2.0)


def test_float32_arrays_of_any_shape_and_ndarray_subclasses(cluster):
    # The exact ndarray type is read from its header, a subclass through the
    # buffer protocol: both in place.
    with relaxps.Client(cluster.endpoint) as c:
        c.create_table("w", 64, optimizer="sgd", lr=1.0, init=("constant", 1.0))
        out = np.zeros((8, 8), np.float32)
        c.push_pull("w", np.full((8, 8), 0.5, np.float32), out)
        np.testing.assert_array_equal(out, np.full((8, 8), 0.5))

        class Sub(np.ndarray):
            pass

        sub = np.zeros(64, np.float32).view(Sub)
        c.pull("w", sub)
        np.testing.assert_array_equal(sub, np.full(64, 0.5))
        little = np.zeros(64, "<f4")  # explicitly little-endian: this host's order
        c.push_pull("w", np.full(64, 0.25, "<f4"), little)
        np.testing.assert_array_equal(little, np.full(64, 0.25))
        rows = np.zeros((4, 32), np.float32)
        c.pull("w", rows[1:3])  # contiguous rows of a bigger array
        assert np.all(rows[0] == 0) and np.all(rows[3] == 0)
        np.testing.assert_array_equal(rows[1:3], np.full((2, 32), 0.25))


def test_an_async_request_keeps_its_arrays_alive(cluster):
    with relaxps.Client(cluster.endpoint) as c:
        c.create_table("w", 1024, optimizer="sgd", lr=1.0)
        out = np.zeros(1024, np.float32)
        base = sys.getrefcount(out)
        request = c.push_pull_async("w", np.ones(1024, np.float32), out)
        assert sys.getrefcount(out) > base, "the request holds no reference to out"
        request.wait()
        np.testing.assert_array_equal(out, np.full(1024, -1.0))


def test_the_client_lets_go_of_every_array(cluster):
    with relaxps.Client(cluster.endpoint) as c:
        c.create_table("w", 256)
        grads = np.ones(256, np.float32)
        out = np.zeros(256, np.float32)
        refs = (sys.getrefcount(grads), sys.getrefcount(out))
        for _ in range(50):
            c.push_pull("w", grads, out)
            c.push_async("w", grads).wait()
            c.pull("w", out)
            c.push("w", grads)
        # ZeroMQ frees a sent message on its own thread, possibly just after
        # the reply arrived: the last references go within moments.
        deadline = time.monotonic() + 10
        while True:
            relaxps.release_buffers()
            gc.collect()
            now = (sys.getrefcount(grads), sys.getrefcount(out))
            if (relaxps.pending_buffers() == 0 and now == refs) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert relaxps.pending_buffers() == 0
        assert now == refs
