"""Tiny-ImageNet (setting 2 of the PAZO paper): 200 classes of 64x64 images, 500 training and 50
validation images per class; the validation split is the test set.

On disk as the official archive extracts (`<root>/tiny-imagenet-200/`): `wnids.txt`,
`train/<wnid>/images/*.JPEG`, and either `val/images/*.JPEG` with `val/val_annotations.txt`
(official) or `val/<wnid>/*.JPEG` (re-arranged as an ImageFolder). `download=true` fetches and
extracts the archive with torchvision's helper. Decoded tensors are cached (keyed by the file
list), since decoding 110k JPEGs takes about a minute.

Public data: 20 per class of the training set by default (4%), seeded, with optional class
imbalance; or, with `public_source=folder`, another image folder (out-of-distribution public data).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pazo.data.base import DataBundle
from pazo.data.image_folder import (ImageSetSchema, cached, decode_images, folder_fingerprint, image_bundle,
                                    list_class_folder)
from pazo.errors import DataCorruptError, DataMissingError

FOLDER = "tiny-imagenet-200"
URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"
NATIVE_SIZE = 64


def _again(root: Path) -> str:
    return (f"get it again: delete {root / FOLDER} and run with dataset.download=true (downloads and extracts {URL}), "
            "or unzip that archive there yourself")


def _val_files(val: Path, root: Path) -> list[tuple[Path, str]]:
    annotations = val / "val_annotations.txt"
    if annotations.exists():
        try:
            text = annotations.read_text()
        except UnicodeDecodeError:
            raise DataCorruptError(f"Tiny-ImageNet file {annotations} is corrupt: it is not text; {_again(root)}") \
                from None
        rows = [line.split("\t") for line in text.splitlines() if line.strip()]
        bad = next((i for i, row in enumerate(rows, 1) if len(row) < 2 or not row[0] or not row[1]), None)
        if bad is not None:
            raise DataCorruptError(f"Tiny-ImageNet file {annotations} is corrupt: line {bad} is not "
                                   f"'<file>\\t<wnid>\\t...'; {_again(root)}")
        return [(val / "images" / row[0], row[1]) for row in rows]
    return list_class_folder(val)[1]


def _missing_message(root: Path, what: str) -> str:
    return (f"Tiny-ImageNet is missing: {what} (looked in {root / FOLDER}). Get it with "
            f"dataset.download=true (downloads and extracts {URL} into {root}), or download and unzip "
            "that archive there yourself; dataset.root (or $PAZO_DATA) sets where we look.")


def read_tiny_imagenet(root: str | Path, download: bool = False, cache_dir: str | None = None):
    """(train uint8 [N,3,64,64], train labels, val images, val labels, class wnids)."""
    root = Path(str(root)).expanduser()
    folder = root / FOLDER
    if not (folder / "train").is_dir() and download:
        from torchvision.datasets.utils import download_and_extract_archive

        download_and_extract_archive(URL, download_root=str(root))
    for part in ("train", "val"):
        if not (folder / part).is_dir():
            raise DataMissingError(_missing_message(root, f"no {part}/ folder"))
    classes, train_files = list_class_folder(folder / "train")
    wnids = folder / "wnids.txt"
    if wnids.exists() and sorted(wnids.read_text().split()) != classes:
        raise DataMissingError(_missing_message(root, "train/ does not hold one folder per class of wnids.txt"))
    val_files = _val_files(folder / "val", root)
    if not train_files or not val_files:
        raise DataMissingError(_missing_message(root, "no images in train/ or val/"))
    absent = [p for p, _ in val_files[:100] if not p.exists()]
    if absent:
        raise DataMissingError(_missing_message(root, f"val image {absent[0]} listed but absent"))
    index = {name: i for i, name in enumerate(classes)}
    unknown = sorted({n for _, n in val_files} - set(classes))
    if unknown:
        raise DataMissingError(_missing_message(root, f"validation classes not in train/: {unknown[:3]}"))

    fix = _again(root)

    def build():
        return {"train": decode_images([p for p, _ in train_files], NATIVE_SIZE, fix=fix),
                "val": decode_images([p for p, _ in val_files], NATIVE_SIZE, fix=fix)}

    images = cached(cache_dir, ["tiny_imagenet", folder_fingerprint(train_files + val_files)], build)
    y_train = torch.tensor([index[n] for _, n in train_files])
    y_val = torch.tensor([index[n] for _, n in val_files])
    return images["train"], y_train, images["val"], y_val, classes


@dataclass
class TinyImagenetSchema(ImageSetSchema):
    download: bool = False


def load_tiny_imagenet_bundle(cfg: TinyImagenetSchema, rng: np.random.Generator,
                              aug_generator: torch.Generator) -> DataBundle:
    x_train, y_train, x_test, y_test, classes = read_tiny_imagenet(cfg.root, cfg.download, cfg.cache_dir)
    return image_bundle("tiny_imagenet", cfg, (x_train, y_train), (x_test, y_test), classes, rng, aug_generator,
                        per_class=cfg.public_per_class)
