"""Tiny data sets written in the real on-disk formats, for the loaders' tests."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np


def write_cifar10(root: Path, per_batch: int = 40, n_test: int = 50, seed: int = 0) -> Path:
    """`root/cifar-10-batches-py/` with data_batch_1..5 and test_batch as CIFAR-10 ships them:
    pickled dicts with b'data' (N x 3072 uint8, channel-major rows) and b'labels'."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)

    def write(name, n):
        labels = [int(i % 10) for i in range(n)]
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        data[:, 0] = np.array(labels, dtype=np.uint8) * 25  # a learnable signal in the first pixel
        with open(folder / name, "wb") as fh:
            pickle.dump({b"batch_label": name.encode(), b"labels": labels, b"data": data,
                         b"filenames": [f"{i}.png".encode() for i in range(n)]}, fh)

    for i in range(1, 6):
        write(f"data_batch_{i}", per_batch)
    write("test_batch", n_test)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({b"label_names": [f"class{i}".encode() for i in range(10)]}, fh)
    return Path(root)
