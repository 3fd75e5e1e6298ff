"""The validation split: a seeded, class-stratified fraction of the private training set
(`dataset.val_fraction`), carved once here for every data set after its loader has made the
private, public and test splits.

It draws from its own `validation` stream, so the public and test splits (and, with
`val_fraction=0`, the private set too) are exactly those of a run without it. Its examples leave
the private set: n_private, delta = 1/n and the sampling rate are those of the smaller set, and no
step trains on them. Accuracy on them is still a statistic of private data released without
noise, which the run summary says (`val_outside_guarantee`).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pazo.data.base import DataBundle
from pazo.data.public_split import stratified_holdout
from pazo.errors import ConfigError


def carve_validation(data: DataBundle, fraction: float, rng: np.random.Generator) -> DataBundle:
    """`data` with a stratified `fraction` of its private examples moved to `data.val` (none with 0:
    then `data` itself is returned, its private split untouched)."""
    if not 0 <= fraction < 1:
        raise ConfigError(f"dataset.val_fraction must be in [0, 1) (0 = no validation split), got {fraction!r}")
    if fraction == 0:
        return data
    if len(data.val):
        raise ConfigError(f"{data.name} already draws its own validation set ({len(data.val)} examples); "
                          "set dataset.val_fraction=0")
    kept, held = stratified_holdout(data.private.labels.numpy(), fraction, rng)
    return dataclasses.replace(data, private=data.private.subset(kept), val=data.private.subset(held),
                               info={**data.info, "val_fraction": fraction,
                                     "outside_guarantee": [*data.info.get("outside_guarantee", []),
                                                           "the validation split's size per class rounds the "
                                                           "private set's class counts"]})
