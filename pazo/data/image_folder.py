"""Image folders read into uint8 tensors: the class-per-folder layout of torchvision's ImageFolder
(used by Tiny-ImageNet's train split and by any out-of-distribution public image set), decoded
once with torchvision.io and optionally cached as one tensor file, so later runs skip the
decoding.

"Another data set as public data" for images lives here too: a folder whose class sub-folders
are named like the private classes (e.g. CINIC-10's ImageNet images for CIFAR-10, or any
hand-collected set) becomes the public split, with its labels mapped onto the private label ids.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pazo.data.base import TensorSplit
from pazo.data.images import ImageTransform
from pazo.data.public_split import split_public
from pazo.errors import ConfigError, DataMissingError

# what torchvision's ImageFolder accepts (torchvision itself is imported only when decoding: it
# costs ~1.5 s per process, which every run of a sweep would pay)
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def list_class_folder(folder: Path) -> tuple[list[str], list[tuple[Path, str]]]:
    """Class names (sorted sub-folder names) and (file, class name) pairs found below each, at any
    depth (Tiny-ImageNet keeps a class's images in `<wnid>/images/`)."""
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir())
    files = []
    for name in classes:
        for dirpath, _, filenames in sorted(os.walk(folder / name)):
            files.extend((Path(dirpath) / f, name) for f in sorted(filenames)
                         if f.lower().endswith(IMG_EXTENSIONS))
    return classes, files


def decode_images(paths: list[Path], size: int) -> torch.Tensor:
    """uint8 [N, 3, size, size]; grey-scale files become RGB, other sizes are resized."""
    from torchvision.io import ImageReadMode, decode_image

    out = torch.empty((len(paths), 3, size, size), dtype=torch.uint8)
    for i, path in enumerate(paths):
        img = decode_image(str(path), mode=ImageReadMode.RGB)
        if img.shape[-2:] != (size, size):
            img = F.interpolate(img[None].float(), size=(size, size), mode="bilinear",
                                antialias=True, align_corners=False).round().clamp(0, 255)[0].byte()
        out[i] = img
    return out


def cached(cache_dir: str | None, key_parts: list, build):
    """`build()` once per key: the result (a dict of tensors/lists) is saved under `cache_dir`."""
    if not cache_dir:
        return build()
    key = hashlib.sha256(repr(key_parts).encode()).hexdigest()[:16]
    path = Path(os.path.expanduser(str(cache_dir))) / "images" / f"{key}.pt"
    if path.exists():
        return torch.load(path, weights_only=True)
    value = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(value, tmp)
    tmp.replace(path)
    return value


def folder_fingerprint(files: list[tuple[Path, str]]) -> list:
    """What invalidates a decoded cache: the file list with sizes and modification times."""
    stats = [(p, name, p.stat()) for p, name in files]
    return [(str(p), name, st.st_size, st.st_mtime_ns) for p, name, st in stats]


def load_public_folder(folder: str | Path, class_names: list[str], size: int, *,
                       per_class: int | None, rng: np.random.Generator,
                       cache_dir: str | None = None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Out-of-distribution public images from `folder/<class name>/...`.

    Sub-folders must be named after private classes (a subset is fine: public data need not cover
    every class); `per_class` (None = all) images are drawn from each, seeded.
    """
    folder = Path(str(folder)).expanduser()
    if not folder.is_dir():
        raise DataMissingError(
            f"public image folder {folder} does not exist: it should hold one sub-folder per class "
            f"named like the private classes (e.g. {', '.join(class_names[:3])}); set "
            "dataset.public_folder to it, or dataset.public_source=split to take public data from "
            "the training set")
    found, files = list_class_folder(folder)
    unknown = sorted(set(found) - set(class_names))
    if unknown:
        raise ConfigError(f"public image folder {folder} has classes the private data does not: "
                          f"{', '.join(unknown[:5])}; private classes are {', '.join(class_names[:10])}"
                          f"{' ...' if len(class_names) > 10 else ''}")
    if not files:
        raise DataMissingError(f"public image folder {folder} holds no images ({', '.join(IMG_EXTENSIONS)})")
    index = {name: i for i, name in enumerate(class_names)}
    chosen = []
    for name in found:
        mine = [p for p, n in files if n == name]
        if per_class is not None:
            if per_class > len(mine):
                raise ConfigError(f"asked for {per_class} public images of class {name!r} but "
                                  f"{folder / name} holds {len(mine)}")
            mine = [mine[i] for i in np.sort(rng.choice(len(mine), size=per_class, replace=False))]
        chosen.extend((p, index[name]) for p in mine)
    images = cached(cache_dir, ["public_folder", size, folder_fingerprint([(p, "") for p, _ in chosen])],
                    lambda: {"images": decode_images([p for p, _ in chosen], size)})["images"]
    labels = torch.tensor([y for _, y in chosen])
    return images, labels, {"public": str(folder), "public_classes_present": len(found)}


def image_splits(cfg, x_train: torch.Tensor, y_train: torch.Tensor, class_names: list[str], native_size: int,
                 rng: np.random.Generator, aug_generator: torch.Generator, **split_size):
    """(private, public, info) of an image data set. `dataset.public_source=split` draws the public
    set from the training set (`split_size`: `fraction=` or `per_class=`, with
    `dataset.public_imbalance`); `folder` takes it from `dataset.public_folder` (out-of-distribution
    public data) and keeps the whole training set private. Public batches are augmented."""
    plain = ImageTransform(cfg.image_size)
    public_tf = ImageTransform(cfg.image_size, augment=cfg.augment_public, generator=aug_generator)
    info = {"image_size": cfg.image_size, "augment_public": cfg.augment_public, "public_source": cfg.public_source}
    if cfg.public_source == "split":
        pub, priv = split_public(y_train.numpy(), rng, imbalance=cfg.public_imbalance, **split_size)
        info.update(public_imbalance=cfg.public_imbalance, **{f"public_{k}": v for k, v in split_size.items()})
        return (TensorSplit(x_train[priv], y_train[priv], plain),
                TensorSplit(x_train[pub], y_train[pub], public_tf), info)
    if cfg.public_source == "folder":
        x_pub, y_pub, extra = load_public_folder(cfg.public_folder, class_names, native_size,
                                                 per_class=cfg.public_per_class, rng=rng, cache_dir=cfg.cache_dir)
        info.update(public_per_class=cfg.public_per_class, **extra)
        return TensorSplit(x_train, y_train, plain), TensorSplit(x_pub, y_pub, public_tf), info
    raise ConfigError(f"dataset.public_source must be split or folder, got {cfg.public_source!r}")
