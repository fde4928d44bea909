"""relaxps.torch: a torch.nn.Module's parameters kept in relaxps tables.

    client = relaxps.Client("tcp://127.0.0.1:5555")
    ps = relaxps.torch.ParameterServer(client, model, optimizer="sgd", lr=0.01)
    for images, labels in batches:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        ps.step()   # push the gradients, pull fresh parameters, clock()

The servers apply the optimizer; the module holds no torch optimizer. Two
layouts:

- mode="flat" (default): one dense table `table_prefix` holding every
  parameter back to back. The module's parameters become views into one
  contiguous float32 buffer, and their .grad views into another, so step()
  is one push_pull that reads the gradients where backward() accumulated
  them and writes the new parameters where forward() reads them: no copies.
- mode="per_param": one dense table `<table_prefix>.<parameter name>` per
  parameter, each pushed and pulled in place (all in flight at once).

Initial values come from the tables' initializers, a pure function of
(init_seed, key), so every worker starts from the same parameters however
many join and in whichever order. By default they follow torch's own
initialization of each layer type (Linear and Conv: U(+-1/sqrt(fan_in)) for
weight and bias; norm layers: weight 1, bias 0; Embedding: N(0, 1)); pass
init={"name": ("uniform", a, b), ...} for other parameters or other choices.
Buffers (BatchNorm's running statistics) stay local to each worker.

If something replaces a parameter's .grad (optimizer.zero_grad(set_to_none=
True), or a new tensor assigned), step() copies it into the table's buffer
and puts the view back, so training stays correct at the cost of one copy.
"""
import math
import time

import torch
import torch.nn as nn

MODES = ("flat", "per_param")

_NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


def default_init(module):
    """{parameter name: (kind, a, b)} like torch's default initialization."""
    specs = {}
    for prefix, sub in module.named_modules():
        for name, p in sub.named_parameters(recurse=False):
            full = f"{prefix}.{name}" if prefix else name
            if isinstance(sub, (nn.Linear, nn.modules.conv._ConvNd, nn.Bilinear)):
                fan_in, _ = nn.init._calculate_fan_in_and_fan_out(sub.weight)
                bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                specs[full] = ("uniform", -bound, bound)
            elif isinstance(sub, _NORMS):
                specs[full] = ("constant", 1.0, 0.0) if name == "weight" else ("zeros", 0.0, 0.0)
            elif isinstance(sub, nn.Embedding):
                specs[full] = ("normal", 0.0, 1.0)
    return specs


class ParameterServer:
    """Keeps `module`'s trainable parameters in relaxps tables (see module doc).

    client: a connected relaxps.Client. mode: "flat" or "per_param".
    optimizer, lr, lr_schedule and optimizer_options (momentum, beta1,
    beta2, eps): the tables' server-side update rule. init: overrides of
    default_init(module) by parameter name. Creating the tables is
    idempotent, so every worker constructs the same ParameterServer.
    """

    def __init__(self, client, module, mode="flat", table_prefix="model", optimizer="sgd",
                 lr=0.01, init=None, init_seed=0, lr_schedule="constant", **optimizer_options):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.client = client
        self.mode = mode
        self._params = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not self._params:
            raise ValueError("the module has no trainable parameters")
        for name, p in self._params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError(f"parameter {name} is {p.dtype} on {p.device}; relaxps tables "
                                "hold float32 parameters of CPU modules")
        specs = default_init(module)
        specs.update(init or {})
        missing = [n for n, _ in self._params if n not in specs]
        if missing:
            raise ValueError(f"no default initializer for parameter(s) {missing}: pass "
                             f"init={{'{missing[0]}': ('uniform', a, b), ...}}")
        table_args = dict(optimizer=optimizer, lr=lr, init_seed=init_seed,
                          lr_schedule=lr_schedule, **optimizer_options)
        # [(table, params, grads)]: the buffers each step() pushes and fills.
        self.tables = []
        if mode == "flat":
            self._build_flat(table_prefix, specs, table_args)
        else:
            self._build_per_param(table_prefix, specs, table_args)
        # SSP's parameter cache serves most pulls (apps/trainer/ps_params.cc):
        # push, clock, then a pull that is usually answered locally.
        self._split = client.job["serves_cached_reads"]
        self.last_wait_s = 0.0
        self.copied_grads = 0  # Gradients that had to be copied in (see module doc).
        self.pull()

    def _build_flat(self, prefix, specs, table_args):
        total = sum(p.numel() for _, p in self._params)
        flat = torch.zeros(total)
        flat_grad = torch.zeros(total)
        segments, offset = [], 0
        self._grad_views = []
        with torch.no_grad():
            for name, p in self._params:
                n = p.numel()
                kind, a, b = _spec(specs[name])
                segments.append((offset, offset + n, kind, a, b))
                p.data = flat[offset:offset + n].view_as(p)
                p.grad = flat_grad[offset:offset + n].view_as(p)
                self._grad_views.append(p.grad)
                offset += n
        self.client.create_table(prefix, total, init=segments, **table_args)
        self.tables.append((prefix, flat, flat_grad))
        self.flat_params, self.flat_grads = flat, flat_grad

    def _build_per_param(self, prefix, specs, table_args):
        self._grad_views = []
        with torch.no_grad():
            for name, p in self._params:
                if not p.is_contiguous():
                    p.data = p.data.contiguous()
                p.grad = torch.zeros_like(p)
                self._grad_views.append(p.grad)
                kind, a, b = _spec(specs[name])
                table = f"{prefix}.{name}"
                self.client.create_table(table, p.numel(), init=[(0, p.numel(), kind, a, b)],
                                         **table_args)
                self.tables.append((table, p.data, p.grad))

    @property
    def num_params(self):
        return sum(p.numel() for _, p in self._params)

    def pull(self):
        """Fills the module's parameters with the tables' current values."""
        self._wait([self.client.pull_async(t, params) for t, params, _ in self.tables])

    def step(self):
        """Pushes the accumulated gradients, receives fresh parameters into the
        module's own storage, zeroes the gradients and ends the clock. Returns
        the new clock. Raises relaxps.Error (relaxps.PS_FAILURES when the
        parameter server failed)."""
        self._adopt_replaced_grads()
        start = time.monotonic()
        if self._split:
            self._wait([self.client.push_async(t, g) for t, _, g in self.tables])
            clock = self.client.clock()
            self.pull()
        else:
            self._wait([self.client.push_pull_async(t, g, params)
                        for t, params, g in self.tables])
            clock = self.client.clock()
        self.last_wait_s = time.monotonic() - start
        for _, _, g in self.tables:
            g.zero_()
        return clock

    def stats(self):
        return self.client.stats()

    def _wait(self, requests):
        error = None
        for r in requests:  # Every request, so none still uses a buffer.
            try:
                r.wait()
            except Exception as e:  # noqa: BLE001 - the first error is raised below
                error = error or e
        if error is not None:
            raise error

    def _adopt_replaced_grads(self):
        with torch.no_grad():
            for i, (name, p) in enumerate(self._params):
                view = self._grad_views[i]
                if p.grad is view:
                    continue
                if p.grad is None:
                    view.zero_()
                else:
                    view.copy_(p.grad)
                    self.copied_grads += 1
                p.grad = view


def _spec(spec):
    """(kind[, a[, b]]) -> (kind, a, b)."""
    if isinstance(spec, str):
        spec = (spec,)
    kind, a, b = (tuple(spec) + (0.0, 0.0))[:3]
    return kind, float(a), float(b)
