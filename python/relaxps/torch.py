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

push_on_backward=True sends each group of parameters ("bucket", about
bucket_bytes of contiguous table range, in backward order) as soon as
backward() has accumulated the gradients of all of them (a hook on each
parameter's gradient accumulator), so the round trip of the last layers'
update overlaps the backward pass of the first ones. The new parameters go
into a spare buffer (one more parameter buffer; a layer's weights are still
read by the rest of backward) and are installed by step(). One backward()
per step(): a second one raises RuntimeError, as its gradients could no
longer be sent.

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

    overlap (async consistency only; "auto": on under async, like
    relaxps-worker's --async_pipeline): step() sends its push_pull and
    returns at once, so the round trip overlaps the next step's forward and
    backward; the step after next computes on the parameters it returns
    (one update older). The module then alternates between two parameter
    buffers and two gradient buffers (still no copies). flush() waits for
    the request in flight.

    push_on_backward (see module doc): send each bucket of about
    bucket_bytes from backward(); step() sends what backward() did not.
    """

    def __init__(self, client, module, mode="flat", table_prefix="model", optimizer="sgd",
                 lr=0.01, init=None, init_seed=0, lr_schedule="constant", overlap="auto",
                 push_on_backward=False, bucket_bytes=1 << 20, **optimizer_options):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if overlap not in ("auto", True, False):
            raise ValueError(f"overlap must be 'auto', True or False, not {overlap!r}")
        if not isinstance(bucket_bytes, int) or bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes must be a positive int, not {bucket_bytes!r}")
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
        job = client.job
        # SSP's parameter cache serves most pulls (apps/trainer/ps_params.cc):
        # push, clock, then a pull that is usually answered locally.
        self._split = job["serves_cached_reads"]
        unbounded = job["staleness_bound"] < 0  # async: nothing waits
        if overlap is True and not unbounded:
            raise ValueError(f"overlap needs async consistency, the job is {job['consistency']}")
        self.overlap = unbounded if overlap == "auto" else overlap
        # [(table, [(parameter index, offset)])]: where each parameter lives.
        self._layout = []
        if mode == "flat":
            self._layout.append((table_prefix, []))
        for k, (name, p) in enumerate(self._params):
            if mode == "per_param":
                self._layout.append((f"{table_prefix}.{name}", []))
            placed = self._layout[-1][1]
            offset = placed[-1][1] + self._params[placed[-1][0]][1].numel() if placed else 0
            placed.append((k, offset))
        for table, placed in self._layout:
            size, segments = 0, []
            for k, offset in placed:
                name, p = self._params[k]
                segments.append((offset, offset + p.numel()) + _spec(specs[name]))
                size = offset + p.numel()
            client.create_table(table, size, init=segments, optimizer=optimizer, lr=lr,
                                init_seed=init_seed, lr_schedule=lr_schedule, **optimizer_options)
        # One buffer set, two with overlap: per table a parameter and a
        # gradient buffer, and per parameter its views into them. Pushing
        # from backward() needs one more parameter buffer (not in split
        # mode, whose pull comes after the clock): the module still reads
        # the current one while the replies arrive.
        self.push_on_backward = bool(push_on_backward)
        early = self.push_on_backward and not self._split
        self._sets = [self._new_set() for _ in range((2 if self.overlap else 1) + early)]
        self._p = self._g = 0  # The sets the module reads params from / writes grads to.
        self._install(params=0, grads=0)
        self._inflight = None  # overlap: ([Request], parameter set) of the previous step
        self._sent = []  # push_on_backward: [Request] sent by this step's backward()
        self._target = None  # ... and the parameter set their replies fill
        self.buckets_sent_in_backward = 0
        self._buckets, self._bucket_of, self._hooks = [], [], []
        if self.push_on_backward:
            self._plan_buckets(bucket_bytes)
        self.last_wait_s = 0.0
        self.copied_grads = 0  # Gradients that had to be copied in (see module doc).
        self._wait([client.pull_async(t, self._sets[0]["params"][i])
                    for i, (t, _) in enumerate(self._layout)])

    def _new_set(self):
        bufs = {"params": [], "grads": [], "pviews": [None] * len(self._params),
                "gviews": [None] * len(self._params)}
        for _, placed in self._layout:
            k, offset = placed[-1]
            size = offset + self._params[k][1].numel()
            params, grads = torch.zeros(size), torch.zeros(size)
            bufs["params"].append(params)
            bufs["grads"].append(grads)
            for k, offset in placed:
                p = self._params[k][1]
                bufs["pviews"][k] = params[offset:offset + p.numel()].view_as(p)
                bufs["gviews"][k] = grads[offset:offset + p.numel()].view_as(p)
        return bufs

    def _install(self, params=None, grads=None):
        with torch.no_grad():
            for k, (_, p) in enumerate(self._params):
                if params is not None:
                    p.data = self._sets[params]["pviews"][k]
                if grads is not None:
                    p.grad = self._sets[grads]["gviews"][k]
        if params is not None:
            self._p = params
        if grads is not None:
            self._g = grads

    @property
    def tables(self):
        """[(table name, current parameter buffer, current gradient buffer)]."""
        return [(t, self._sets[self._p]["params"][i], self._sets[self._g]["grads"][i])
                for i, (t, _) in enumerate(self._layout)]

    @property
    def flat_params(self):
        """mode="flat": the contiguous buffer the module's parameters view."""
        return self._sets[self._p]["params"][0]

    @property
    def num_params(self):
        return sum(p.numel() for _, p in self._params)

    def pull(self):
        """Fills the module's parameters with the tables' current values."""
        self.flush()
        self._wait([self.client.pull_async(t, params) for t, params, _ in self.tables])

    def flush(self):
        """overlap: waits for the step in flight and adopts its parameters."""
        if self._inflight is not None:
            (requests, params), self._inflight = self._inflight, None
            self._wait(requests)
            self._install(params=params)

    def step(self):
        """Pushes the accumulated gradients, receives fresh parameters into the
        module's own storage, zeroes the gradients and ends the clock. Returns
        the new clock. Raises relaxps.Error (relaxps.PS_FAILURES when the
        parameter server failed)."""
        self._adopt_replaced_grads()
        start = time.monotonic()
        if self.push_on_backward:
            for bucket in self._buckets:  # What backward() did not send.
                if not bucket.sent:
                    self._send_bucket(bucket)
            sent, self._sent = self._sent, []
            target, self._target = self._target, None
            for bucket in self._buckets:
                bucket.sent = False
            self._ready = [False] * len(self._params)
            if self._split:
                self._wait(sent)
                clock = self.client.clock()
                self.pull()
            elif self.overlap:
                self.flush()
                self._inflight = (sent, target)
                self._install(grads=1 - self._g)
                clock = self.client.clock()
            else:
                self._wait(sent)
                self._install(params=target)
                clock = self.client.clock()
        elif self._split:
            self._wait([self.client.push_async(t, g) for t, _, g in self.tables])
            clock = self.client.clock()
            self.pull()
        elif self.overlap:
            self.flush()  # The previous step's parameters (and gradient buffer) are free now.
            spare = 1 - self._p
            self._inflight = ([self.client.push_pull_async(t, g, self._sets[spare]["params"][i])
                               for i, (t, _, g) in enumerate(self.tables)], spare)
            self._install(grads=1 - self._g)
            clock = self.client.clock()
        else:
            self._wait([self.client.push_pull_async(t, g, params)
                        for t, params, g in self.tables])
            clock = self.client.clock()
        self.last_wait_s = time.monotonic() - start
        for g in self._sets[self._g]["grads"]:
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

    def _plan_buckets(self, bucket_bytes):
        """Groups parameters into buckets of contiguous table range, in the
        reverse of the module's order (roughly the order backward() finishes
        them), and hooks each parameter's gradient accumulator."""
        limit = max(1, bucket_bytes // 4)
        self._bucket_of = [None] * len(self._params)
        for i, (_, placed) in enumerate(self._layout):
            current = None
            for k, offset in reversed(placed):
                n = self._params[k][1].numel()
                if current is None or current.end - current.begin >= limit:
                    current = _Bucket(i, offset + n)
                    self._buckets.append(current)
                current.begin = offset
                current.members.append(k)
                self._bucket_of[k] = current
        self._ready = [False] * len(self._params)
        for k, (_, p) in enumerate(self._params):
            if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    lambda _p, k=k: self._on_grad(k)))
            else:  # The parameter's AccumulateGrad node, kept alive here.
                node = p.expand_as(p).grad_fn.next_functions[0][0]
                node.register_hook(lambda *_, k=k: self._on_grad(k))
                self._hooks.append(node)

    def _on_grad(self, k):
        """backward() accumulated parameter k's gradient."""
        if self._ready[k]:
            raise RuntimeError(
                f"push_on_backward: the gradient of {self._params[k][0]} was accumulated twice "
                "before step() (one backward() per step(); its first part was already sent)")
        self._ready[k] = True
        bucket = self._bucket_of[k]
        if all(self._ready[j] for j in bucket.members):
            self._send_bucket(bucket)
            self.buckets_sent_in_backward += 1

    def _send_bucket(self, bucket):
        """Sends a bucket's gradients (push_pull into the spare parameter set,
        or push in split mode)."""
        bucket.sent = True
        for k in bucket.members:
            self._ready[k] = True
        self._adopt_replaced_grads(bucket.members)
        i, begin, end = bucket.table, bucket.begin, bucket.end
        table = self._layout[i][0]
        grads = self._sets[self._g]["grads"][i][begin:end]
        if self._split:
            self._sent.append(self.client.push_async(table, grads, begin))
            return
        if self._target is None:  # Neither the parameters in use nor those in flight.
            busy = {self._p, self._inflight[1] if self._inflight is not None else None}
            self._target = next(s for s in range(len(self._sets)) if s not in busy)
        out = self._sets[self._target]["params"][i][begin:end]
        self._sent.append(self.client.push_pull_async(table, grads, out, begin))

    def _adopt_replaced_grads(self, members=None):
        views = self._sets[self._g]["gviews"]
        with torch.no_grad():
            for k in range(len(self._params)) if members is None else members:
                p = self._params[k][1]
                if p.grad is views[k]:
                    continue
                if p.grad is None:
                    views[k].zero_()
                else:
                    views[k].copy_(p.grad)
                    self.copied_grads += 1
                p.grad = views[k]


class _Bucket:
    """Parameters sent together by push_on_backward: table range [begin, end)
    of the table at index `table` in the layout, holding parameters
    `members`; `sent` in the current step."""
    __slots__ = ("table", "begin", "end", "members", "sent")

    def __init__(self, table, end):
        self.table, self.begin, self.end, self.members, self.sent = table, end, end, [], False


def _spec(spec):
    """(kind[, a[, b]]) -> (kind, a, b)."""
    if isinstance(spec, str):
        spec = (spec,)
    kind, a, b = (tuple(spec) + (0.0, 0.0))[:3]
    return kind, float(a), float(b)
