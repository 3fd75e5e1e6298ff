"""CIFAR-10 in its official on-disk format (`cifar-10-batches-py/`: pickled `data_batch_1..5`,
`test_batch`), read directly; torchvision downloads it when `download=true`.

Setting 1 of the PAZO paper: a seeded public split (4% of the training set) with a class
imbalance parameter (the paper's mild shift; the authors' code forgot it), public-only
augmentation, and any input size (32 native; the authors resize to 224).
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pazo.data.base import DataBundle
from pazo.data.image_folder import ImageSetSchema, image_bundle
from pazo.errors import DataCorruptError, DataMissingError

FOLDER = "cifar-10-batches-py"
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILES = ["test_batch"]
URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


class _BatchUnpickler(pickle.Unpickler):
    """CIFAR-10's batches hold a dict of numpy arrays, lists and bytes: any other class in the
    pickle (which unpickling would import and call) means the file is not a CIFAR-10 batch."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("numpy._core.multiarray", "scalar")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it holds a {module}.{name}, which a CIFAR-10 batch never does")


def _corrupt(path: Path, what: str) -> DataCorruptError:
    return DataCorruptError(
        f"CIFAR-10 file {path} is corrupt: {what}. Get it again: delete {path.parent} and run with "
        f"dataset.download=true (torchvision downloads {URL}), or extract that archive into {path.parent.parent} "
        "yourself.")


def _read_batch(path: Path) -> tuple[np.ndarray, list[int]]:
    """One pickled batch: images uint8 [N, 3, 32, 32] and N labels in 0..9, or a DataCorruptError."""
    try:
        with open(path, "rb") as fh:
            batch = _BatchUnpickler(fh, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, MemoryError) as err:
        raise _corrupt(path, f"it cannot be unpickled ({type(err).__name__}: {' '.join(str(err).split())[:120]})") \
            from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        found = sorted(batch)[:5] if isinstance(batch, dict) else type(batch).__name__
        raise _corrupt(path, f"it is not a CIFAR-10 batch (a dict with b'data' and b'labels'; found {found})")
    data, labels = np.asarray(batch[b"data"]), batch[b"labels"]
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise _corrupt(path, f"its b'data' is {data.dtype} {data.shape}, not uint8 rows of 3072 pixels")
    if not isinstance(labels, list) or len(labels) != len(data):
        count = len(labels) if isinstance(labels, list) else "no list of"
        raise _corrupt(path, f"it holds {len(data)} images but {count} labels")
    if not all(isinstance(y, int) and 0 <= y < len(CLASSES) for y in labels):
        raise _corrupt(path, "its labels are not all class ids 0..9")
    return data.reshape(-1, 3, 32, 32), labels


def _read(folder: Path, names: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = [], []
    for name in names:
        data, ys = _read_batch(folder / name)
        images.append(data)
        labels.extend(ys)
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


@dataclass
class Cifar10Schema(ImageSetSchema):
    download: bool = False
    public_fraction: float = 0.04


def load_cifar10_bundle(cfg: Cifar10Schema, rng: np.random.Generator,
                        aug_generator: torch.Generator) -> DataBundle:
    """Public data: a seeded 4% of the training set with class imbalance, or another image folder
    with the CIFAR-10 class names (e.g. CINIC-10's ImageNet images, `train/airplane/*.png`)."""
    x_train, y_train, x_test, y_test = read_cifar10(cfg.root, cfg.download)
    return image_bundle("cifar10", cfg, (x_train, y_train), (x_test, y_test), CLASSES, rng, aug_generator,
                        fraction=cfg.public_fraction)
