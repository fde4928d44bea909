"""Fashion-MNIST for examples/pytorch_cnn.py: gzip IDX files read with numpy
(no torchvision, no download), a seeded per-worker partition of the training
set and per-epoch shuffled batches, all pure functions of (seed, worker).
"""
import gzip
import math
import os

import numpy as np
import torch


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[:4], "big")
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(magic & 0xFF)]
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * len(dims))
    if magic >> 8 != 0x08 or data.size != math.prod(dims):
        raise ValueError(f"{path}: not an IDX file of unsigned bytes matching its header")
    return data.reshape(dims)


def load_split(data_dir, prefix):
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    if len(images) != len(labels):
        raise ValueError(f"{data_dir}: {len(images)} {prefix} images but {len(labels)} labels")
    # uint8 kept; batches are converted to float in [0, 1] as they are drawn.
    return torch.from_numpy(images.copy()).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def partition(n, worker_index, num_workers, seed):
    """Worker `worker_index`'s part: a seeded permutation cut in contiguous parts."""
    order = np.random.default_rng(seed ^ 0x70617274).permutation(n)
    return np.sort(order[worker_index * n // num_workers:(worker_index + 1) * n // num_workers])


def batches(part, batch, seed, worker_index):
    """Yields (completed epochs, index batch) for ever, reshuffling every
    epoch; an epoch counts as completed with its last full batch, and the
    last len(part) % batch examples of an epoch's order are skipped."""
    epoch, per_epoch = 0, len(part) // batch
    while True:
        order = np.random.default_rng([seed, worker_index, epoch]).permutation(part)
        for i in range(per_epoch):
            done = epoch + 1 if i == per_epoch - 1 else epoch
            yield done, torch.from_numpy(order[i * batch:(i + 1) * batch])
        epoch += 1
