"""scikit-learn's bundled handwritten digits (8x8, 1797 images): a real data set that needs no
download, used as the embedded offline default."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pazo.data.base import DataBundle, DatasetSchema, TensorSplit
from pazo.data.public_split import split_public, stratified_holdout


@dataclass
class DigitsSchema(DatasetSchema):
    test_fraction: float = 0.2
    public_fraction: float = 0.1
    public_imbalance: float = 0.5


def load_digits_bundle(rng: np.random.Generator, test_fraction: float = 0.2,
                       public_fraction: float = 0.1, public_imbalance: float = 0.0) -> DataBundle:
    from sklearn.datasets import load_digits

    digits = load_digits()
    # [N,1,8,8] in [0,1], in torch's default dtype like the model's parameters (float32 unless set)
    images = torch.tensor(digits.images, dtype=torch.get_default_dtype()).unsqueeze(1) / 16.0
    labels = np.asarray(digits.target)
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
