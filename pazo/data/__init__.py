"""Data sets by name. Each builder takes its config node and the run's split RNG."""
from __future__ import annotations

from pazo.data.base import DataBundle, TensorSplit
from pazo.data.digits import load_digits_bundle
from pazo.registry import Registry

DATASETS: Registry = Registry("dataset")


@DATASETS.register("digits")
def _digits(cfg, rng) -> DataBundle:
    return load_digits_bundle(rng, test_fraction=cfg.test_fraction,
                              public_fraction=cfg.public_fraction,
                              public_imbalance=cfg.public_imbalance)


def build_dataset(cfg, rng) -> DataBundle:
    return DATASETS.get(cfg.name)(cfg, rng)


__all__ = ["DATASETS", "DataBundle", "TensorSplit", "build_dataset"]
