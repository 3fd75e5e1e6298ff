"""scikit-learn's bundled handwritten digits (8x8, 1797 images): a real data set that needs no
download, used as the embedded offline default."""
from __future__ import annotations

import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pazo.data.base import DataBundle, DatasetSchema, TensorSplit
from pazo.data.public_split import split_public, stratified_holdout


@dataclass
class DigitsSchema(DatasetSchema):
    test_fraction: float = 0.2
    public_fraction: float = 0.1
    public_imbalance: float = 0.5


#: scikit-learn's file of the digits (one image a row: 64 pixels 0-16, then the label), within its package
DIGITS_FILE = Path("datasets", "data", "digits.csv.gz")


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The digits' [N,8,8] images and [N] labels, as `sklearn.datasets.load_digits` reads them (its
    file, parsed the same way), without importing scikit-learn: its import (with pandas) is a second
    or more of every digits run's start, for one file read. Where the file is not in the installed
    package's folder, scikit-learn's own loader reads it."""
    spec = importlib.util.find_spec("sklearn")   # (finds the package without running it)
    folders = spec.submodule_search_locations if spec is not None else None
    path = Path(folders[0], DIGITS_FILE) if folders else None
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits

        digits = load_digits()
        return digits.images, np.asarray(digits.target)
    with gzip.open(path, mode="rt", encoding="utf-8") as rows:
        data = np.loadtxt(rows, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int, copy=False)


def load_digits_bundle(rng: np.random.Generator, test_fraction: float = 0.2,
                       public_fraction: float = 0.1, public_imbalance: float = 0.0) -> DataBundle:
    pixels, labels = digits_arrays()
    # [N,1,8,8] in [0,1], in torch's default dtype like the model's parameters (float32 unless set)
    images = torch.tensor(pixels, dtype=torch.get_default_dtype()).unsqueeze(1) / 16.0
    pool_idx, test_idx = stratified_holdout(labels, test_fraction, rng)
    pub_rel, priv_rel = split_public(labels[pool_idx], rng, fraction=public_fraction,
                                     imbalance=public_imbalance)
    pub_idx, priv_idx = pool_idx[pub_rel], pool_idx[priv_rel]

    def split(idx):
        return TensorSplit(images[idx], torch.as_tensor(labels[idx]))

    return DataBundle(
        name="digits", private=split(priv_idx), public=split(pub_idx), test=split(test_idx),
        num_classes=10, input_shape=(1, 8, 8),
        info={"public_fraction": public_fraction, "public_imbalance": public_imbalance,
              "test_fraction": test_fraction})
