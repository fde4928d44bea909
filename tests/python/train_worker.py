"""A worker of test_torch.py's multi-worker run: fits a small MLP to a fixed
random teacher through relaxps.torch and prints `loss first=F last=L`.

    train_worker.py ENDPOINT MODE STEPS
"""
import sys

import torch
import torch.nn as nn

import relaxps
import relaxps.torch


def main():
    endpoint, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(1)
    with relaxps.Client(endpoint) as client:
        torch.manual_seed(100 + client.worker_id)  # Each worker its own data.
        teacher = torch.Generator().manual_seed(7)
        w_true = torch.randn(16, 4, generator=teacher)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        ps = relaxps.torch.ParameterServer(client, model, mode=mode, table_prefix=mode,
                                           optimizer="sgd", lr=0.05)
        losses = []
        for _ in range(steps):
            x = torch.randn(64, 16)
            loss = nn.functional.mse_loss(model(x), x @ w_true)
            loss.backward()
            ps.step()
            losses.append(loss.item())
        ps.flush()
        first = sum(losses[:10]) / 10
        last = sum(losses[-10:]) / 10
        print(f"worker {client.worker_id} {mode}: loss first={first:.4f} last={last:.4f} "
              f"clock={client.current_clock}", flush=True)


if __name__ == "__main__":
    main()
