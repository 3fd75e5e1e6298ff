"""CIFAR-10 in its official on-disk format (`cifar-10-batches-py/`: pickled `data_batch_1..5`,
`test_batch`), read directly; torchvision downloads it when `download=true`.

Setting 1 of the PAZO paper: a seeded public split (4% of the training set) with a class
imbalance parameter (the paper's mild shift; the authors' code forgot it), public-only
augmentation, and any input size (32 native; the authors resize to 224).
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from pazo.data.base import DataBundle
from pazo.data.image_folder import image_bundle
from pazo.errors import DataMissingError

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILES = ["test_batch"]
URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _read(folder: Path, names: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = [], []
    for name in names:
        with open(folder / name, "rb") as fh:
            batch = pickle.load(fh, encoding="bytes")
        images.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.extend(batch[b"labels"])
    return torch.from_numpy(np.concatenate(images)), torch.tensor(labels)


def read_cifar10(root: str | Path, download: bool = False):
    """(train images uint8 [50000,3,32,32], train labels, test images, test labels)."""
    root = Path(root).expanduser()
    folder = root / FOLDER
    missing = [n for n in TRAIN_FILES + TEST_FILES if not (folder / n).exists()]
    if missing and download:
        from torchvision.datasets import CIFAR10

        CIFAR10(str(root), train=True, download=True)
        missing = [n for n in TRAIN_FILES + TEST_FILES if not (folder / n).exists()]
    if missing:
        raise DataMissingError(
            f"CIFAR-10 is missing: {', '.join(missing)} not found in {folder}. Get it with "
            f"dataset.download=true (torchvision downloads {URL}), or download and extract that "
            f"archive into {root} yourself; dataset.root (or $PAZO_DATA) sets where we look.")
    return (*_read(folder, TRAIN_FILES), *_read(folder, TEST_FILES))


def load_cifar10_bundle(cfg, rng: np.random.Generator, aug_generator: torch.Generator) -> DataBundle:
    """Public data: a seeded 4% of the training set with class imbalance, or another image folder
    with the CIFAR-10 class names (e.g. CINIC-10's ImageNet images, `train/airplane/*.png`)."""
    x_train, y_train, x_test, y_test = read_cifar10(cfg.root, cfg.download)
    return image_bundle("cifar10", cfg, (x_train, y_train), (x_test, y_test), CLASSES, rng, aug_generator,
                        fraction=cfg.public_fraction)
