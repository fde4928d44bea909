#!/usr/bin/python3
"""The paper's CNN on Fashion-MNIST in PyTorch, trained through relaxps.

    pytorch_cnn.py --coordinator=tcp://host:port [--duration_s=N] [flags]
    pytorch_cnn.py --local [--worker_index=I --num_workers=N] [flags]

The model: conv 3x3 (1 -> 16) + ReLU + max-pool 2, conv 3x3 (16 -> 32) +
ReLU + max-pool 2, fc 512 + ReLU + dropout 0.25, fc 10; SGD with momentum
0.9 (relaxps-worker's default; --optimizer=sgd for plain SGD), lr 0.01, batch
32 (--model=mlp: 784-256-10). With --coordinator the parameters live in a
relaxps table (relaxps.torch.ParameterServer) and each step is forward,
backward, ps.step(); with --local a torch optimizer applies the same rule in
process (the no-parameter-server baseline).

Each worker trains on its own part of the training set (by worker id),
evaluates on the test set every --eval_every_s (worker 0 only, unless
--eval_all_workers), and writes what relaxps-worker writes: `progress ...`
and `final ...` lines on stdout, --metrics_csv and --steps_csv, so
scripts/run_local.sh --trainer=examples/pytorch_cnn.py reports and plots it
like the C++ worker. Flags are relaxps-worker's (--flag=value).

Exit status as relaxps-worker: 0 done (or SIGTERM/SIGINT after the current
step), 1 runtime error, 2 bad flags, 3 the parameter server failed
(Unavailable, DeadlineExceeded or Aborted from the client, which has already
retried, waited for restarted servers or trained locally as the job's
recovery policy says), with an `error worker=... code=...` line on stdout.
"""
import argparse
import math
import signal
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# Beside this file (a script's folder is first on sys.path).
from fashion_mnist import batches, load_split, partition
from trainer_metrics import EventWriter, MetricsWriter, Row, StepLog, format_progress

EXIT_ERROR, EXIT_USAGE, EXIT_PS_FAILED = 1, 2, 3


def flag_bool(value):
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def parse_flags(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    add = p.add_argument
    add("--coordinator", default="", help="Coordinator endpoint tcp://host:port")
    add("--local", type=flag_bool, nargs="?", const=True, default=False,
        help="Train without a parameter server")
    add("--table", default="model", help="Table holding the model (PS mode)")
    add("--mode", default="flat", choices=["flat", "per_param"],
        help="One flattened table, or one table per parameter")
    add("--async_pipeline", type=flag_bool, nargs="?", const=True, default=True,
        help="Async consistency: overlap each step's push-pull with the next step's "
             "computation (parameters one update older)")
    add("--push_on_backward", type=flag_bool, nargs="?", const=True, default=True,
        help="Send each bucket of layers' gradients from backward() as soon as they are "
             "accumulated (relaxps.torch.ParameterServer(push_on_backward=True))")
    add("--model", default="cnn", choices=["cnn", "mlp"])
    add("--batch", type=int, default=32)
    add("--lr", type=float, default=0.01)
    add("--optimizer", default="momentum", choices=["sgd", "momentum", "adam", "adagrad"])
    add("--momentum", type=float, default=0.9)
    add("--lr_schedule", default="constant", help="Applied by the servers (PS mode)")
    add("--dropout", type=float, default=0.25)
    add("--seed", type=int, default=1)
    add("--data_dir", default="/usr/share/datasets/fashion-mnist")
    add("--worker_id", type=int, default=-1)
    add("--worker_index", type=int, default=0)
    add("--num_workers", type=int, default=1)
    add("--duration_s", type=float, default=0)
    add("--epochs", type=int, default=0)
    add("--eval_every_s", type=float, default=20)
    add("--eval_examples", type=int, default=0)
    add("--eval_batch", type=int, default=256)
    add("--eval_all_workers", type=flag_bool, nargs="?", const=True, default=False)
    add("--final_eval", type=flag_bool, nargs="?", const=True, default=True)
    add("--log_every_s", type=float, default=5)
    add("--metrics_csv", default="")
    add("--steps_csv", default="")
    add("--events_file", default="",
        help="progress/final events and the client library's own, JSON Lines (docs/events.md)")
    add("--straggle_ms", type=int, default=0)
    add("--cpu_threads", type=int, default=1, help="torch.set_num_threads")
    add("--device", default="cpu", choices=["cpu"])
    add("--request_timeout_ms", type=int, default=10000)
    add("--recovery_timeout_ms", type=int, default=120000)
    add("--local_after_ms", type=int, default=200)
    add("--coordinator_timeout_ms", type=int, default=30000)
    add("--wire_dtype", default="fp32", choices=["fp32", "fp16"])
    add("--security", default="plain", choices=["plain", "curve"])
    add("--keys_dir", default="")
    a = p.parse_args(argv)
    if a.local == bool(a.coordinator):
        p.error("pass exactly one of --local and --coordinator=tcp://host:port")
    if a.batch <= 0 or not a.lr > 0 or not 0 <= a.dropout < 1 or a.cpu_threads <= 0:
        p.error("need --batch > 0, --lr > 0, 0 <= --dropout < 1, --cpu_threads > 0")
    if not 0 <= a.worker_index < a.num_workers:
        p.error("need 0 <= --worker_index < --num_workers")
    if a.local and a.lr_schedule != "constant":
        p.error("--lr_schedule is applied by the parameter servers; --local trains at --lr")
    if a.security == "curve" and not a.keys_dir:
        p.error("--security=curve needs --keys_dir")
    return a


# ---- Model ----

class Cnn(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 512)
        self.fc2 = nn.Linear(512, 10)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(self.dropout(F.relu(self.fc1(x.flatten(1)))))


def make_model(name, dropout):
    if name == "cnn":
        return Cnn(dropout)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def local_optimizer(a, model):
    params = model.parameters()
    if a.optimizer == "sgd":
        return torch.optim.SGD(params, lr=a.lr)
    if a.optimizer == "momentum":
        return torch.optim.SGD(params, lr=a.lr, momentum=a.momentum)
    if a.optimizer == "adam":
        return torch.optim.Adam(params, lr=a.lr)
    return torch.optim.Adagrad(params, lr=a.lr)


@torch.no_grad()
def evaluate(model, images, labels, examples, batch):
    model.eval()
    n = len(labels) if examples <= 0 else min(examples, len(labels))
    correct, loss = 0, 0.0
    for i in range(0, n, batch):
        x = images[i:i + batch].float().div_(255)
        out = model(x)
        loss += F.cross_entropy(out, labels[i:i + batch], reduction="sum").item()
        correct += (out.argmax(1) == labels[i:i + batch]).sum().item()
    model.train()
    return correct / n, loss / n


# ---- Parameters: local or through relaxps ----

class LocalParams:
    def __init__(self, a, model):
        self.optimizer = local_optimizer(a, model)
        self.clock, self.last_wait_s, self.staleness = 0, 0.0, 0

    def finish(self):
        pass

    def step(self):
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=False)
        self.clock += 1

    def stats(self):
        return {"bytes_sent": 0, "bytes_received": 0, "cache_hits": 0, "local_steps": 0}


class PsParams:
    def __init__(self, a, model, client):
        import relaxps.torch
        self.client = client
        self.ps = relaxps.torch.ParameterServer(
            client, model, mode=a.mode, table_prefix=a.table, optimizer=a.optimizer, lr=a.lr,
            momentum=a.momentum, init_seed=a.seed, lr_schedule=a.lr_schedule,
            overlap="auto" if a.async_pipeline else False, push_on_backward=a.push_on_backward)
        self.last_wait_s, self.staleness = 0.0, 0

    @property
    def clock(self):
        return self.client.current_clock

    def finish(self):
        self.ps.flush()  # The last step's update, for the final evaluation.

    def step(self):
        self.ps.step()
        self.last_wait_s = self.ps.last_wait_s
        self.staleness = max(0, self.client.current_clock - self.client.last_params_clock)

    def stats(self):
        return self.client.stats()


def connect(a):
    import relaxps
    name = "worker-" + str(a.worker_id)
    return relaxps.Client(
        a.coordinator, worker_id=a.worker_id, request_timeout_ms=a.request_timeout_ms,
        recovery_timeout_ms=a.recovery_timeout_ms, local_after_ms=a.local_after_ms,
        coordinator_timeout_ms=a.coordinator_timeout_ms, wire_dtype=a.wire_dtype,
        keys_dir=a.keys_dir if a.security == "curve" else "",
        curve_name=name if a.security == "curve" else "",
        events_file=a.events_file)


# ---- The training loop (apps/trainer/trainer.cc's, in Python) ----

STOP = []  # Non-empty once SIGTERM/SIGINT (or the job's end) asked to stop.


def on_signal(signum, _frame):
    STOP.append(signum)
    signal.signal(signum, signal.SIG_DFL)  # A second signal kills at once.


def run(a, model, params, data, worker, index, num_workers, client):
    """Trains until --duration_s/--epochs or a stop; prints and writes metrics."""
    train_x, train_y, test_x, test_y = data
    part = partition(len(train_y), index, num_workers, a.seed)
    if len(part) < a.batch:
        raise ValueError(f"worker {worker} has {len(part)} examples, fewer than a batch")
    sampler = batches(part, a.batch, a.seed, index)
    metrics, steps = MetricsWriter(a.metrics_csv), StepLog(a.steps_csv)
    events = EventWriter(a.events_file, worker)
    evaluates = a.eval_all_workers or worker == 0
    start, start_unix = time.monotonic(), time.time()
    never = math.inf
    next_log = a.log_every_s if a.log_every_s > 0 else never
    next_eval = a.eval_every_s if a.eval_every_s > 0 and evaluates else never
    total_steps = total_samples = epoch = 0
    eval_s, compute_s, latest_acc = 0.0, 0.0, math.nan
    acc = dict(loss=0.0, correct=0, steps=0, samples=0, stale_sum=0, stale_max=0, wait=0.0,
               train_s=0.0, last_loss=math.nan, last_acc=math.nan)
    split = client is not None and client.job["serves_cached_reads"]

    def take_row(now):
        if acc["steps"]:
            acc["last_loss"] = acc["loss"] / acc["steps"]
            acc["last_acc"] = acc["correct"] / acc["samples"]
        train_s = now - eval_s
        interval = train_s - acc["train_s"]
        s = params.stats()
        row = Row(time_s=now, worker=worker, clock=params.clock, samples=total_samples,
                  epoch=epoch, loss=acc["last_loss"], train_acc=acc["last_acc"],
                  samples_per_s=acc["samples"] / interval if interval > 0 else 0.0,
                  bytes_sent=s["bytes_sent"], bytes_received=s["bytes_received"],
                  cache_hits=s["cache_hits"], gate_wait_s=acc["wait"],
                  staleness_mean=acc["stale_sum"] / acc["steps"] if acc["steps"] else 0.0,
                  staleness_max=acc["stale_max"])
        acc.update(loss=0.0, correct=0, steps=0, samples=0, stale_sum=0, stale_max=0, wait=0.0,
                   train_s=train_s)
        return row

    model.train()
    while True:
        elapsed = time.monotonic() - start
        if STOP or (client is not None and client.job_done):
            stopped = True
            break
        stopped = False
        if (a.duration_s > 0 and elapsed >= a.duration_s) or (0 < a.epochs <= epoch):
            break
        compute_start = time.monotonic()
        epochs_done, idx = next(sampler)
        x = train_x[idx].float().div_(255)
        y = train_y[idx]
        out = model(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"training diverged: loss {loss_value} at step "
                                     f"{total_steps} (lower --lr?)")
        if a.straggle_ms:
            time.sleep(a.straggle_ms / 1000)
        step_compute_s = time.monotonic() - compute_start
        compute_s += step_compute_s
        hits = client.stats()["cache_hits"] if split else 0
        params.step()
        cache_hit = split and client.stats()["cache_hits"] > hits
        steps.write(time.monotonic() - start, params.clock, params.staleness, params.last_wait_s,
                    cache_hit, loss_value, step_compute_s)
        total_steps += 1
        total_samples += a.batch
        epoch = epochs_done
        acc["loss"] += loss_value
        acc["correct"] += (out.argmax(1) == y).sum().item()
        acc["steps"] += 1
        acc["samples"] += a.batch
        acc["stale_sum"] += params.staleness
        acc["stale_max"] = max(acc["stale_max"], params.staleness)
        acc["wait"] += params.last_wait_s

        now = time.monotonic() - start
        if now >= next_eval or now >= next_log:
            row = take_row(now)
            if now >= next_eval:
                t0 = time.monotonic()
                row.test_acc, row.test_loss = evaluate(model, test_x, test_y, a.eval_examples,
                                                       a.eval_batch)
                eval_s += time.monotonic() - t0
                latest_acc = row.test_acc
                next_eval = time.monotonic() - start + a.eval_every_s
            metrics.write(row)
            print(format_progress("progress", row, latest_acc), flush=True)
            events.progress(row, latest_acc)
            if a.log_every_s > 0:
                next_log = time.monotonic() - start + a.log_every_s

    params.finish()
    end = time.monotonic() - start
    row = take_row(end)
    if a.final_eval and evaluates:
        row.test_acc, row.test_loss = evaluate(model, test_x, test_y, 0, a.eval_batch)
    metrics.write(row)
    steps.close()
    train_s = end - eval_s
    row.samples_per_s = total_samples / train_s if train_s > 0 else 0.0
    s = params.stats()
    test_loss = math.nan if row.test_loss is None else row.test_loss
    final_acc = math.nan if row.test_acc is None else row.test_acc
    events.final(row, total_steps, total_samples / end if end else 0.0, compute_s, stopped, s)
    print(format_progress("final", row, final_acc) +
          f" test_loss={test_loss:.4f} wall_samples_per_s={total_samples / end if end else 0:.1f}"
          f" eval_s={eval_s:.1f} bytes_sent_per_step="
          f"{s['bytes_sent'] / total_steps if total_steps else 0:.0f} stopped={int(stopped)}"
          f" start_unix={start_unix:.3f} local_steps={s['local_steps']}", flush=True)


def report_end(client, error=None):
    """The final report, as relaxps-worker's: the job ends as reported (clean,
    or failed with `error`) even if close()'s goodbye is lost on a loaded
    machine, where a heartbeat that came late skips it."""
    import relaxps
    try:
        client.report_finished(error)
    except relaxps.Error as e:
        print(f"pytorch_cnn.py: worker {client.worker_id}: {e}", file=sys.stderr, flush=True)


def fail(worker, exit_code, code, what, error):
    print(f"error worker={worker} code={code} exit={exit_code}", flush=True)
    print(f"pytorch_cnn.py: {what}: {error}", file=sys.stderr, flush=True)
    return exit_code


def main(argv=None):
    a = parse_flags(argv)
    torch.set_num_threads(a.cpu_threads)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_signal)
    try:
        data = load_split(a.data_dir, "train") + load_split(a.data_dir, "t10k")
    except (OSError, ValueError) as e:
        return fail(a.worker_index, EXIT_ERROR, "IOError", "cannot load the data", e)
    torch.manual_seed(a.seed)
    model = make_model(a.model, a.dropout)
    if a.local:
        params = LocalParams(a, model)
        worker, index, num_workers, client = a.worker_index, a.worker_index, a.num_workers, None
        torch.manual_seed(a.seed * 1000 + index)  # This worker's dropout masks.
        try:
            run(a, model, params, data, worker, index, num_workers, None)
        except (FloatingPointError, ValueError, OSError) as e:
            return fail(worker, EXIT_ERROR, "InvalidArgument", "training failed", e)
        return 0

    import relaxps
    try:
        client = connect(a)
    except relaxps.Error as e:
        code = EXIT_PS_FAILED if isinstance(e, relaxps.PS_FAILURES) else EXIT_ERROR
        return fail(-1, code, e.code, f"cannot join the job at {a.coordinator}", e)
    with client:
        worker = client.worker_id
        expected = client.job["expected_workers"]
        num_workers = expected if expected > 0 else a.num_workers
        index = worker % num_workers  # A replacement worker takes over a part.
        torch.manual_seed(a.seed * 1000 + worker)
        print(f"worker {worker} joined {a.coordinator} ({client.job['consistency']}, "
              f"{num_workers} workers); training on data part {index}", file=sys.stderr,
              flush=True)
        try:
            params = PsParams(a, model, client)
            run(a, model, params, data, worker, index, num_workers, client)
            report_end(client)
        except relaxps.Error as e:
            report_end(client, e)
            ps_failed = isinstance(e, relaxps.PS_FAILURES)
            return fail(worker, EXIT_PS_FAILED if ps_failed else EXIT_ERROR, e.code,
                        "parameter server failed" if ps_failed else "training failed", e)
        except (FloatingPointError, ValueError, OSError) as e:
            report_end(client, e)
            return fail(worker, EXIT_ERROR, "InvalidArgument", "training failed", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
