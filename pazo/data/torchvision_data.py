"""Any of torchvision's image-classification data sets by class name (`dataset=torchvision
dataset.torchvision_name=FashionMNIST`), read by torchvision's own readers from `dataset.root` in
torchvision's layout (e.g. `<root>/MNIST/raw/`, `<root>/cifar-100-python/`, `<root>/food-101/`)
and downloaded by torchvision with `dataset.download=true` where the class can download.

Each split becomes one uint8 tensor [N, C, H, W] once, at load: array-backed classes (the MNIST
family, CIFAR, SVHN, STL-10, USPS) straight from their arrays (checked against the class's own
`__getitem__` on the first image), all others image by image through `__getitem__`, resized to
`dataset.image_size` when given (needed when their sizes differ) and cached like image folders.
Grey-scale stays one channel; input shape, channels and class count come from the data. Batches
are floats in [0, 1], mapped to [-1, 1] with the fixed mean 0.5 and std 0.5 when
`dataset.normalize` is set (fixed, not measured on the private images: see `images.py`).

Public data as in the paper's image settings: a seeded split of the training set
(`public_fraction` or `public_per_class`, `public_imbalance`) or, with `public_source=folder`, an
image folder whose sub-folders are named like the class's `classes` (label numbers when it has
none).
"""
from __future__ import annotations

import inspect
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pazo.data.base import DataBundle
from pazo.data.image_folder import (ImageFolderSchema, cached, folder_fingerprint, image_bundle, public_split_size,
                                    resize_uint8)
from pazo.errors import ConfigError, DataCorruptError, DataMissingError

# torchvision's data sets whose items are (image, class id) and that have a train and a test split
CLASSIFICATION = (
    "CIFAR10", "CIFAR100", "Country211", "DTD", "EMNIST", "FER2013", "FGVCAircraft", "FashionMNIST",
    "Flowers102", "Food101", "GTSRB", "ImageNet", "Imagenette", "KMNIST", "MNIST", "OxfordIIITPet", "PCAM",
    "Places365", "QMNIST", "RenderedSST2", "STL10", "SVHN", "StanfordCars", "USPS")
GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")
# RuntimeError texts with which torchvision's readers say that files are absent
MISSING = re.compile(r"not found|not present|download|corrupt", re.IGNORECASE)
# ValueError texts with which torchvision refuses an argument (others come from reading damaged files)
ARGUMENT = re.compile(r"argument|unknown value|valid values|expected one of", re.IGNORECASE)
# what torchvision's readers raise on a damaged file (an idx file cut short, a pickle of garbage, ...)
DAMAGED = (RuntimeError, AssertionError, EOFError, pickle.UnpicklingError, IndexError, ValueError, KeyError, OSError)


def dataset_class(name: str):
    import torchvision.datasets as tvd

    names = ", ".join(n for n in CLASSIFICATION if hasattr(tvd, n))
    if name not in CLASSIFICATION or not hasattr(tvd, name):
        what = (f"torchvision.datasets.{name} is not one of its image-classification data sets with train and "
                "test splits" if hasattr(tvd, name) else f"unknown torchvision data set {name!r}")
        raise ConfigError(f"{what}; choices: {names} (any other image set: train/ and test/ class folders "
                          "with dataset=image_folder)")
    return getattr(tvd, name)


def _split_kwargs(cls, cfg, train: bool) -> dict:
    """`train=True/False` or `split=<dataset.train_split / test_split>`, as the class takes it."""
    import torchvision.datasets as tvd

    if issubclass(cls, tvd.MNIST) or "train" in inspect.signature(cls.__init__).parameters:
        return {"train": train}
    return {"split": cfg.train_split if train else cfg.test_split}


def _can_download(cls) -> bool:
    """Whether the class takes `download=` (EMNIST and QMNIST pass it on through **kwargs)."""
    params = inspect.signature(cls.__init__).parameters
    return "download" in params or (any(p.kind is p.VAR_KEYWORD for p in params.values())
                                    and callable(getattr(cls, "download", None)))


def _expected_files(cls, root: Path) -> list[Path]:
    """The files torchvision's reader of `cls` checks for, where the class names them."""
    import torchvision.datasets as tvd

    if issubclass(cls, tvd.MNIST) and cls._check_exists is tvd.MNIST._check_exists:
        return [root / cls.__name__ / "raw" / Path(url).name.removesuffix(".gz") for url, _ in cls.resources]
    if hasattr(cls, "train_list"):  # CIFAR-10/100, STL-10
        return [root / cls.base_folder / name for name, _ in cls.train_list + cls.test_list]
    if isinstance(getattr(cls, "split_list", None), dict):  # SVHN, USPS
        return [root / cls.split_list[s][1] for s in ("train", "test") if s in cls.split_list]
    return []


def _missing_message(cls, root: Path, err: Exception, can_download: bool, tried: bool) -> str:
    missing = [p for p in _expected_files(cls, root) if not p.exists()]
    what = (f"{', '.join(p.name for p in missing)} not found in {missing[0].parent}" if missing
            else f"torchvision found no usable files under {root}")
    reason = " ".join(str(err).split())[:300] or type(err).__name__
    if tried:
        how = (f"The download into {root} failed: run the same command with dataset.download=true on a machine "
               f"with internet and copy {root} here")
    elif can_download:
        how = f"Get it with dataset.download=true (torchvision downloads it into {root})"
    else:
        how = (f"torchvision cannot download it: put its files where torchvision.datasets.{cls.__name__} expects "
               f"them under {root}")
    return (f"{cls.__name__} is missing: {what} (torchvision: {reason}). {how}; dataset.root (or $PAZO_DATA) "
            "sets where we look.")


def idx_problem(path: Path) -> str | None:
    """What is wrong with an idx file (the MNIST family's raw format: two zero bytes, a type code,
    the number of dimensions, the sizes big-endian, then the values), or None."""
    data = path.read_bytes()
    if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] not in (0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E):
        return "it does not start as an idx file does"
    ndim, width = data[3], {0x08: 1, 0x09: 1, 0x0B: 2, 0x0C: 4, 0x0D: 4, 0x0E: 8}[data[2]]
    if len(data) < 4 + 4 * ndim:
        return "its header is cut short"
    sizes = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    expected = 4 + 4 * ndim + width * int(np.prod(sizes))
    if len(data) != expected:
        return f"its header promises {'x'.join(map(str, sizes))} values ({expected} bytes) but it has {len(data)} bytes"
    return None


def _corrupt_message(cls, root: Path, err: Exception, can_download: bool, file: Path | None = None) -> str:
    files = [file] if file is not None else [p for p in _expected_files(cls, root) if p.exists()]
    idx = [(p, idx_problem(p)) for p in files if "-idx" in p.name]
    bad = next(((p, why) for p, why in idx if why), None)
    if bad is not None:  # name the one damaged file, and what is wrong with it
        how = ("delete it and run with dataset.download=true (torchvision downloads it again)" if can_download else
               f"put a good copy where torchvision.datasets.{cls.__name__} expects it")
        return f"{cls.__name__} file {bad[0]} is corrupt: {bad[1]}. Get it again: {how}"
    shown = ", ".join(f"{p} ({p.stat().st_size} bytes)" for p in files[:4] if p.exists()) or f"the files under {root}"
    reason = " ".join(str(err).split())[:200] or type(err).__name__
    how = (f"delete {'it' if file is not None else 'them'} and run with dataset.download=true (torchvision downloads "
           "them again)" if can_download else
           f"put good copies where torchvision.datasets.{cls.__name__} expects them under {root}")
    return (f"{cls.__name__} is corrupt: torchvision cannot read {shown} ({type(err).__name__}: {reason}): they are "
            f"truncated or not what torchvision expects. Get them again: {how}")


def open_split(cls, cfg, root: Path, train: bool):
    """torchvision's data set object of one split; missing files become a DataMissingError,
    damaged ones a DataCorruptError and arguments the class refuses a ConfigError, each one line."""
    kwargs = {**_split_kwargs(cls, cfg, train), **dict(cfg.torchvision_kwargs or {})}
    can_download = _can_download(cls)
    if can_download:
        kwargs["download"] = bool(cfg.download)
    elif cfg.download:
        raise ConfigError(f"torchvision cannot download {cls.__name__}; get its files yourself and set "
                          "dataset.download=false")
    try:
        return cls(str(root), **kwargs)
    except (RuntimeError, OSError) as err:
        if isinstance(err, RuntimeError) and not MISSING.search(str(err)):
            raise DataCorruptError(_corrupt_message(cls, root, err, can_download)) from None
        raise DataMissingError(_missing_message(cls, root, err, can_download, bool(cfg.download))) from None
    except (TypeError, ValueError) as err:
        if isinstance(err, ValueError) and not ARGUMENT.search(str(err)):
            raise DataCorruptError(_corrupt_message(cls, root, err, can_download)) from None
        args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ConfigError(f"torchvision.datasets.{cls.__name__}({args}) refused: {err}; the split names are "
                          "dataset.train_split / dataset.test_split, other arguments go in "
                          "dataset.torchvision_kwargs (e.g. 'dataset.torchvision_kwargs={split:balanced}' "
                          "for EMNIST)") from None
    except DAMAGED as err:  # AssertionError, EOFError, UnpicklingError, ...: the files, not the arguments
        raise DataCorruptError(_corrupt_message(cls, root, err, can_download)) from None


def _chw(img, mode: str | None = None) -> torch.Tensor:
    """One item's image as uint8 [C, H, W]; PIL images are converted to `mode` (default: "L" for
    grey-scale modes, else "RGB")."""
    if isinstance(img, torch.Tensor):
        return img if img.ndim == 3 else img[None]
    arr = np.asarray(img.convert(mode or ("L" if img.mode in GREY_MODES else "RGB")))
    t = torch.from_numpy(arr.copy())
    return t[None] if t.ndim == 2 else t.permute(2, 0, 1)


def _class_id(target, name: str) -> int:
    if isinstance(target, (int, np.integer)) or (isinstance(target, torch.Tensor) and target.numel() == 1
                                                 and not target.is_floating_point()):
        return int(target)
    raise ConfigError(f"torchvision's {name} gives targets of type {type(target).__name__}, not class ids")


def _from_arrays(ds):
    """(images, labels) from the class's `data` array and `targets`/`labels`, or None when it has
    none in a layout read here, or its first item differs from `__getitem__`'s."""
    data = getattr(ds, "data", None)
    labels = getattr(ds, "targets", None)
    labels = getattr(ds, "labels", None) if labels is None else labels
    if not isinstance(data, (np.ndarray, torch.Tensor)) or labels is None:
        return None
    x, y = torch.as_tensor(np.asarray(data)), torch.as_tensor(np.asarray(labels))
    if x.dtype != torch.uint8 or y.ndim != 1 or len(y) != len(x):
        return None
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[1] not in (1, 3) and x.shape[3] in (1, 3):
        x = x.permute(0, 3, 1, 2).contiguous()
    elif not (x.ndim == 4 and x.shape[1] in (1, 3)):
        return None
    img, target = ds[0]
    if not torch.equal(_chw(img), x[0]) or _class_id(target, type(ds).__name__) != int(y[0]):
        return None
    return x, y.long()


def _from_items(ds, image_size: int | None) -> dict:
    """Every item through `__getitem__`: one colour mode (the first image's: grey or RGB), one
    square size (`image_size`, or the images' own when all share it)."""
    name = type(ds).__name__
    labels = torch.empty(len(ds), dtype=torch.long)
    out, mode = None, None
    files = _file_list(ds)
    for i in range(len(ds)):
        try:
            img, target = ds[i]
        except (OSError, ValueError, SyntaxError, RuntimeError) as err:  # PIL: a truncated or unknown image
            file = files[i] if files and i < len(files) else None
            raise DataCorruptError(_corrupt_message(type(ds), Path(str(ds.root)), err, _can_download(type(ds)),
                                                    file)) from None
        if out is None:
            mode = None if isinstance(img, torch.Tensor) else ("L" if img.mode in GREY_MODES else "RGB")
            first = _chw(img, mode)
            size = image_size or first.shape[-1]
            out = torch.empty((len(ds), first.shape[0], size, size), dtype=torch.uint8)
        t = _chw(img, mode)
        if image_size is None and t.shape[-2:] != (size, size):
            raise ConfigError(f"torchvision's {name} images are not all square of one size (the first is "
                              f"{first.shape[-1]}x{first.shape[-2]}, item {i} is {t.shape[-1]}x{t.shape[-2]}); "
                              "set dataset.image_size=N to resize each to N x N")
        out[i] = resize_uint8(t, size)
        labels[i] = _class_id(target, name)
    return {"images": out, "labels": labels}


def _file_list(ds) -> list[Path] | None:
    """The image files behind a file-backed torchvision data set, when it keeps a list of them."""
    for attr in ("_image_files", "samples", "_samples", "imgs", "_images"):
        items = getattr(ds, attr, None)
        if isinstance(items, list) and items:
            paths = [it[0] if isinstance(it, tuple) else it for it in items]
            if all(isinstance(p, (str, Path)) for p in paths):
                return [Path(p) for p in paths]
    return None


def read_split(cls, cfg, root: Path, train: bool):
    """(images uint8 [N, C, H, W], labels, torchvision's data set object) of one split."""
    ds = open_split(cls, cfg, root, train)
    if len(ds) == 0:
        raise DataMissingError(f"{cls.__name__} is missing: torchvision's reader found no "
                               f"{'training' if train else 'test'} images under {root}")
    arrays = _from_arrays(ds)
    if arrays is not None:
        return (*arrays, ds)
    files = _file_list(ds)
    key = ["torchvision", cls.__name__, str(root.resolve()), _split_kwargs(cls, cfg, train),
           dict(cfg.torchvision_kwargs or {}), cfg.image_size, len(ds),
           folder_fingerprint([(p, "") for p in files]) if files else None]
    items = cached(cfg.cache_dir if files else None, key, lambda: _from_items(ds, cfg.image_size))
    return items["images"], items["labels"], ds


@dataclass
class TorchvisionSchema(ImageFolderSchema):
    torchvision_name: str = "MNIST"
    download: bool = False
    train_split: str = "train"
    test_split: str = "test"
    torchvision_kwargs: dict[str, Any] = field(default_factory=dict)


def load_torchvision_bundle(cfg: TorchvisionSchema, rng: np.random.Generator,
                            aug_generator: torch.Generator) -> DataBundle:
    cls = dataset_class(cfg.torchvision_name)
    root = Path(str(cfg.root)).expanduser()
    x_train, y_train, train_set = read_split(cls, cfg, root, train=True)
    x_test, y_test, _ = read_split(cls, cfg, root, train=False)
    if x_train.shape[1:] != x_test.shape[1:]:
        raise ConfigError(f"torchvision's {cls.__name__} train images are {tuple(x_train.shape[1:])} but test "
                          f"images {tuple(x_test.shape[1:])}; set dataset.image_size=N to resize both to N x N")
    labelled_train, labelled_test = y_train >= 0, y_test >= 0     # e.g. STL-10's -1 = no label
    x_train, y_train, x_test, y_test = (x_train[labelled_train], y_train[labelled_train],
                                        x_test[labelled_test], y_test[labelled_test])
    n_classes = int(max(y_train.max(), y_test.max())) + 1
    classes = getattr(train_set, "classes", None)
    names = ([str(c) for c in classes] if isinstance(classes, (list, tuple)) and len(classes) >= n_classes
             else [str(i) for i in range(n_classes)])
    return image_bundle(cls.__name__, cfg, (x_train, y_train), (x_test, y_test), names, rng, aug_generator,
                        image_size=cfg.image_size or x_train.shape[-1], normalize=cfg.normalize,
                        info={"torchvision_name": cls.__name__, "classes": len(names)}, **public_split_size(cfg))
