"""Data sets by name. Each builder takes its config node and the run's random streams (splits
draw from the `split` stream, public augmentation from a substream of `public`)."""
from __future__ import annotations

from pazo.data.base import DataBundle, TensorSplit
from pazo.data.cifar10 import load_cifar10_bundle
from pazo.data.digits import load_digits_bundle
from pazo.data.imdb import load_imdb_bundle
from pazo.data.mnli import load_mnli_bundle
from pazo.data.tiny_imagenet import load_tiny_imagenet_bundle
from pazo.registry import Registry

DATASETS: Registry = Registry("dataset")


@DATASETS.register("digits")
def _digits(cfg, streams) -> DataBundle:
    return load_digits_bundle(streams.numpy["split"], test_fraction=cfg.test_fraction,
                              public_fraction=cfg.public_fraction,
                              public_imbalance=cfg.public_imbalance)


@DATASETS.register("cifar10")
def _cifar10(cfg, streams) -> DataBundle:
    return load_cifar10_bundle(cfg, streams.numpy["split"], streams.torch_generator("public", substream=2))


@DATASETS.register("imdb")
def _imdb(cfg, streams) -> DataBundle:
    return load_imdb_bundle(cfg, streams.numpy["split"])


@DATASETS.register("tiny_imagenet")
def _tiny_imagenet(cfg, streams) -> DataBundle:
    return load_tiny_imagenet_bundle(cfg, streams.numpy["split"], streams.torch_generator("public", substream=2))


@DATASETS.register("mnli")
def _mnli(cfg, streams) -> DataBundle:
    from pazo.pretrained import load_pretrained

    tokenizer = load_pretrained(cfg.tokenizer, "tokenizer", cfg.download)
    return load_mnli_bundle(cfg, streams.numpy["split"], tokenizer)


def build_dataset(cfg, streams) -> DataBundle:
    return DATASETS.get(cfg.name)(cfg, streams)


__all__ = ["DATASETS", "DataBundle", "TensorSplit", "build_dataset"]
