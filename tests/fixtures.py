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


POSITIVE = ["great", "wonderful", "loved", "excellent", "fun"]
NEGATIVE = ["awful", "boring", "hated", "terrible", "waste"]


def _review(rng, label: int, words: int) -> str:
    pool = POSITIVE if label else NEGATIVE
    filler = ["the", "movie", "film", "plot", "actor", "and", "was", "a"]
    toks = [str(rng.choice(pool)) if rng.random() < 0.3 else str(rng.choice(filler)) for _ in range(words)]
    return " ".join(toks).capitalize() + "!"


def write_imdb_and_amazon(root: Path, n_train: int = 60, n_test: int = 40, n_amazon: int = 50,
                          seed: int = 0) -> Path:
    """`root/imdb` and `root/amazon_polarity` as `datasets.DatasetDict.save_to_disk` writes them,
    with the Hub datasets' columns (imdb: text, label; amazon_polarity: label, title, content)."""
    from datasets import Dataset, DatasetDict

    rng = np.random.default_rng(seed)

    def imdb_split(n):
        labels = [i % 2 for i in range(n)]
        return Dataset.from_dict({"text": [_review(rng, y, int(rng.integers(3, 30))) for y in labels],
                                  "label": labels})

    DatasetDict({"train": imdb_split(n_train), "test": imdb_split(n_test)}).save_to_disk(str(Path(root) / "imdb"))
    labels = [i % 2 for i in range(n_amazon)]
    amazon = Dataset.from_dict({"label": labels, "title": [f"Title {i}" for i in range(n_amazon)],
                                "content": [_review(rng, y, int(rng.integers(3, 30))) for y in labels]})
    DatasetDict({"train": amazon}).save_to_disk(str(Path(root) / "amazon_polarity"))
    return Path(root)
