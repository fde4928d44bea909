"""relaxps.torch.ParameterServer: parameters in tables, updated in place."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import relaxps  # noqa: E402
import relaxps.torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def small_model():
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3),
                         nn.BatchNorm1d(3))


def one_step(model):
    torch.manual_seed(0)
    x = torch.randn(5, 1, 6, 6)
    model(x).square().mean().backward()


@pytest.mark.parametrize("mode", relaxps.torch.MODES)
def test_step_applies_sgd_to_the_modules_own_storage(cluster, mode):
    with relaxps.Client(cluster.endpoint) as c:
        model = small_model()
        ps = relaxps.torch.ParameterServer(c, model, mode=mode, optimizer="sgd", lr=0.5,
                                           init_seed=3, overlap=False)
        params = {n: p for n, p in model.named_parameters()}
        if mode == "flat":
            flat = ps.flat_params
            lo, hi = flat.data_ptr(), flat.data_ptr() + 4 * flat.numel()
            assert all(lo <= p.data_ptr() < hi for p in params.values())
            assert len(ps.tables) == 1 and ps.tables[0][0] == "model"
        else:
            assert sorted(t for t, _, _ in ps.tables) == sorted("model." + n for n in params)
        # torch's default ranges, from the table initializer.
        bound = 1 / 3  # conv: fan_in 9
        assert params["0.weight"].abs().max() <= bound and params["0.weight"].std() > 0
        assert torch.all(params["4.weight"] == 1) and torch.all(params["4.bias"] == 0)
        before = {n: p.detach().clone() for n, p in params.items()}
        ptrs = {n: p.data_ptr() for n, p in params.items()}
        one_step(model)
        grads = {n: p.grad.clone() for n, p in params.items()}
        assert ps.step() == 1
        for n, p in params.items():
            torch.testing.assert_close(p.detach(), before[n] - 0.5 * grads[n])
            assert p.data_ptr() == ptrs[n], "step() replaced the parameter's storage"
            assert torch.all(p.grad == 0)
        assert ps.copied_grads == 0


def test_every_worker_starts_from_the_same_parameters(cluster):
    with relaxps.Client(cluster.endpoint) as a, relaxps.Client(cluster.endpoint) as b:
        torch.manual_seed(1)
        ma = small_model()
        torch.manual_seed(2)
        mb = small_model()
        relaxps.torch.ParameterServer(a, ma, init_seed=9)
        relaxps.torch.ParameterServer(b, mb, init_seed=9)
        for (n, pa), (_, pb) in zip(ma.named_parameters(), mb.named_parameters()):
            assert torch.equal(pa, pb), n


def test_replaced_grads_are_copied_in(cluster):
    with relaxps.Client(cluster.endpoint) as c:
        model = nn.Linear(4, 2)
        ps = relaxps.torch.ParameterServer(c, model, optimizer="sgd", lr=1.0, overlap=False)
        w0 = model.weight.detach().clone()
        model.zero_grad(set_to_none=True)
        model(torch.ones(1, 4)).sum().backward()
        ps.step()
        assert ps.copied_grads == 2
        torch.testing.assert_close(model.weight.detach(), w0 - 1.0)
        model(torch.ones(1, 4)).sum().backward()  # accumulates into the views again
        ps.step()
        assert ps.copied_grads == 2
        torch.testing.assert_close(model.weight.detach(), w0 - 2.0)


@pytest.mark.parametrize("mode", relaxps.torch.MODES)
def test_overlap_computes_on_parameters_one_update_older(cluster, mode):
    with relaxps.Client(cluster.endpoint) as c:
        model = nn.Linear(4, 2)
        ps = relaxps.torch.ParameterServer(c, model, mode=mode, optimizer="sgd", lr=1.0)
        assert ps.overlap  # "auto" under async
        w0 = model.weight.detach().clone()
        ptr = model.weight.data_ptr()
        model(torch.ones(1, 4)).sum().backward()  # d/dW = 1 everywhere
        ps.step()  # in flight: the next step still computes on w0
        torch.testing.assert_close(model.weight.detach(), w0)
        model(torch.ones(1, 4)).sum().backward()
        ps.step()  # adopts the first step's parameters, sends the second
        torch.testing.assert_close(model.weight.detach(), w0 - 1.0)
        assert model.weight.data_ptr() != ptr  # the second buffer, filled in place
        ps.flush()
        torch.testing.assert_close(model.weight.detach(), w0 - 2.0)
        assert model.weight.data_ptr() == ptr and ps.copied_grads == 0
        assert torch.all(model.weight.grad == 0)


def test_overlap_needs_async(make_cluster):
    cluster = make_cluster(servers=1, workers=1, consistency="bsp")
    with relaxps.Client(cluster.endpoint) as c:
        with pytest.raises(ValueError, match="overlap needs async consistency, the job is bsp"):
            relaxps.torch.ParameterServer(c, nn.Linear(2, 2), overlap=True)
        assert not relaxps.torch.ParameterServer(c, nn.Linear(2, 2), table_prefix="b").overlap


def test_bad_arguments(cluster):
    with relaxps.Client(cluster.endpoint) as c:
        with pytest.raises(ValueError, match="mode"):
            relaxps.torch.ParameterServer(c, nn.Linear(2, 2), mode="sharded")
        with pytest.raises(ValueError, match="no default initializer.*'p'"):
            m = nn.Module()
            m.p = nn.Parameter(torch.zeros(3))
            relaxps.torch.ParameterServer(c, m)
        with pytest.raises(TypeError, match="float32"):
            relaxps.torch.ParameterServer(c, nn.Linear(2, 2).double())
        m = nn.Module()
        m.p = nn.Parameter(torch.zeros(3))
        ps = relaxps.torch.ParameterServer(c, m, table_prefix="custom",
                                           init={"p": ("constant", 4.0)})
        assert torch.all(m.p == 4.0) and ps.num_params == 3


@pytest.mark.parametrize("consistency,mode", [("bsp", "flat"), ("ssp", "per_param"),
                                              ("async", "flat")])
def test_two_workers_two_servers_train(make_cluster, consistency, mode):
    cluster = make_cluster(servers=2, workers=2, consistency=consistency)
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "train_worker.py"),
                               cluster.endpoint, mode, "150"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    lines = []
    for p, out in zip(procs, outs):
        print(out)
        assert p.returncode == 0, out
        lines.append([l for l in out.splitlines() if " loss first=" in l][-1])
        # (Under async a late joiner starts at the other worker's clock.)
        assert int(lines[-1].split("clock=")[1]) >= 150, lines[-1]
    first = [float(l.split("first=")[1].split()[0]) for l in lines]
    last = [float(l.split("last=")[1].split()[0]) for l in lines]
    # Under async a worker may join once the other has trained: the job's
    # starting loss is the larger first one.
    assert max(last) < max(first) / 3, lines


def two_layers():
    torch.manual_seed(4)
    return nn.Sequential(nn.Linear(4, 300), nn.ReLU(), nn.Linear(300, 3))


@pytest.mark.parametrize("mode,overlap", [("flat", False), ("per_param", False), ("flat", True)])
def test_push_on_backward_sends_from_backward_and_matches_step(cluster, mode, overlap):
    # The same two steps through step() alone and with the buckets sent from
    # backward(): the same parameters after each step, in the module's own
    # storage, and every bucket sent before step().
    results = []
    for early in (False, True):
        with relaxps.Client(cluster.endpoint) as c:
            model = two_layers()
            ps = relaxps.torch.ParameterServer(
                c, model, mode=mode, table_prefix=f"m{int(early)}", optimizer="sgd", lr=0.5,
                overlap=overlap, push_on_backward=early, bucket_bytes=1024)
            seen = []
            for step in range(3):
                x = torch.full((2, 4), float(step + 1))
                model(x).square().mean().backward()
                if early:
                    # Flat, 1 KiB buckets in backward order: [last bias + last
                    # weight], [first bias], [first weight]; one per table otherwise.
                    assert ps.buckets_sent_in_backward == (step + 1) * len(ps._buckets)
                    assert len(ps._buckets) == (3 if mode == "flat" else 4)
                ps.step()
                seen.append([p.detach().clone() for p in model.parameters()])
                assert all(torch.all(p.grad == 0) for p in model.parameters())
            ps.flush()
            seen.append([p.detach().clone() for p in model.parameters()])
            assert ps.copied_grads == 0
            results.append(seen)
    for before, after in zip(*results):
        for a, b in zip(before, after):
            torch.testing.assert_close(a, b)
    assert not torch.equal(results[1][0][0], results[1][-1][0])  # it trained


def test_push_on_backward_copies_replaced_grads_and_sends_unused(cluster):
    with relaxps.Client(cluster.endpoint) as c:
        model = two_layers()
        ps = relaxps.torch.ParameterServer(c, model, optimizer="sgd", lr=1.0, overlap=False,
                                           push_on_backward=True)
        w0 = [p.detach().clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        model[2](torch.ones(1, 300)).sum().backward()  # the first layer gets no gradient
        assert ps.buckets_sent_in_backward == 0  # one 1 MiB bucket: layer 0 never ready
        ps.step()
        assert ps.copied_grads == 2
        torch.testing.assert_close(model[0].weight.detach(), w0[0])
        torch.testing.assert_close(model[2].bias.detach(), w0[3] - 1.0)


def test_push_on_backward_refuses_two_backwards_per_step(cluster):
    with relaxps.Client(cluster.endpoint) as c:
        model = nn.Linear(4, 2)
        ps = relaxps.torch.ParameterServer(c, model, overlap=False, push_on_backward=True)
        model(torch.ones(1, 4)).sum().backward()
        with pytest.raises(RuntimeError, match="accumulated twice before step"):
            model(torch.ones(1, 4)).sum().backward()
        with pytest.raises(ValueError, match="bucket_bytes"):
            relaxps.torch.ParameterServer(c, model, table_prefix="b", bucket_bytes=0)
