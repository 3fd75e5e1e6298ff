"""Image folders read into uint8 tensors: the class-per-folder layout of torchvision's ImageFolder
(used by Tiny-ImageNet's train split and by any out-of-distribution public image set), decoded
once with torchvision.io and optionally cached as one tensor file, so later runs skip the
decoding.

"Another data set as public data" for images lives here too: a folder whose class sub-folders
are named like the private classes (e.g. CINIC-10's ImageNet images for CIFAR-10, or any
hand-collected set) becomes the public split, with its labels mapped onto the private label ids.
So does `image_bundle`, which turns any image data set's tensors into the private, public and
test splits with the public-data options of the paper's settings, and `dataset=image_folder`
(any data set kept as `train/` and `test/` class folders).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pazo.files.cache_files import key_digest, load_entry, save_entry
from pazo.data.base import DataBundle, DatasetSchema, TensorSplit
from pazo.data.images import ImageTransform
from pazo.data.public_split import split_public
from pazo.errors import ConfigError, DataCorruptError, DataMissingError, one_of

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


def resize_uint8(img: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 [C, H, W] -> [C, size, size] (antialiased bilinear; unchanged when already that size)."""
    if img.shape[-2:] == (size, size):
        return img
    return F.interpolate(img[None].float(), size=(size, size), mode="bilinear",
                         antialias=True, align_corners=False).round().clamp(0, 255)[0].byte()


#: how to get an image file of an image folder again (the data sets with an archive say their own)
REPLACE_IMAGE = "replace it with a good copy, or delete it (the folder's other images are read as before)"


def unreadable_image(path: Path, err: Exception, fix: str = REPLACE_IMAGE) -> DataCorruptError:
    """The one line for an image file that cannot be decoded: which file, why, how to get it again."""
    reason = " ".join(str(err).split())
    parts = reason.split(", ", 2)   # torchvision's: "<function>, <source>:<line>, <why>"
    if len(parts) == 3 and ":" in parts[1]:
        reason = parts[2]
    reason = reason.split(". ")[0][:160] or type(err).__name__
    size = path.stat().st_size if path.exists() else 0
    return DataCorruptError(f"image {path} cannot be decoded ({reason}; {size} bytes): it is truncated or not an "
                            f"image; {fix}")


def decode_images(paths: list[Path], size: int, channels: int = 3, fix: str = REPLACE_IMAGE) -> torch.Tensor:
    """uint8 [N, channels, size, size]: torchvision converts each file to RGB (3) or grey-scale (1),
    other sizes are resized. A file that cannot be decoded is a DataCorruptError naming it (`fix`:
    how to get it again)."""
    from torchvision.io import ImageReadMode, decode_image

    mode = {3: ImageReadMode.RGB, 1: ImageReadMode.GRAY}[channels]
    out = torch.empty((len(paths), channels, size, size), dtype=torch.uint8)
    for i, path in enumerate(paths):
        try:
            image = decode_image(str(path), mode=mode)
        except (RuntimeError, OSError, ValueError) as err:
            raise unreadable_image(Path(path), err, fix) from None
        out[i] = resize_uint8(image, size)
    return out


def cached(cache_dir: str | None, key_parts: list, build):
    """`build()` once per key: the result (a dict of tensors/lists) is saved under `cache_dir` and
    used again only if it holds this key and its content hashes to the digest it records
    (`pazo.files.cache_files`); otherwise rebuilt, after one warning."""
    if not cache_dir:
        return build()
    key = key_digest(key_parts)
    path = Path(os.path.expanduser(str(cache_dir))) / "images" / f"{key[:16]}.pt"
    value = load_entry(path, "images", key)
    if value is not None:
        return value
    value = build()
    save_entry(path, "images", key, value)
    return value


def folder_fingerprint(files: list[tuple[Path, str]]) -> list:
    """What invalidates a decoded cache: the file list with sizes and modification times."""
    stats = [(p, name, p.stat()) for p, name in files]
    return [(str(p), name, st.st_size, st.st_mtime_ns) for p, name, st in stats]


def content_hashes(images: torch.Tensor) -> list[bytes]:
    """sha256 of each image's shape and bytes: equal exactly when two images are the same tensor."""
    shape = repr(tuple(images.shape[1:])).encode()
    return [hashlib.sha256(shape + row.tobytes()).digest()
            for row in images.reshape(len(images), -1).contiguous().numpy()]


def _copies(images: torch.Tensor, exclude: dict[str, set[bytes]], dropped: dict[str, int]) -> np.ndarray:
    """Which of `images` are copies of an image in one of the `exclude` sets (counted in `dropped`
    under the first set's name that holds it)."""
    found = np.zeros(len(images), dtype=bool)
    for i, h in enumerate(content_hashes(images)):
        where = next((name for name, hashes in exclude.items() if h in hashes), None)
        if where is not None:
            found[i] = True
            dropped[where] += 1
    return found


def load_public_folder(folder: str | Path, class_names: list[str], size: int, *,
                       per_class: int | None, rng: np.random.Generator, cache_dir: str | None = None,
                       channels: int = 3, exclude: dict[str, set[bytes]] | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Out-of-distribution public images from `folder/<class name>/...`.

    Sub-folders must be named after private classes (a subset is fine: public data need not cover
    every class); `per_class` (None = all) images are drawn from each, seeded. They are decoded
    with the private images' channel count (grey-scale private data gets grey-scale public data).

    An image whose decoded tensor is one of `exclude`'s (`content_hashes` by name: the test images')
    is dropped, and counted in the returned info, so that no test image is trained on. `exclude`
    must hold no private data: which public images are kept, and how many were dropped, would then
    depend on the private set and be released without noise. With `per_class`, each dropped copy is
    replaced by another seeded draw from its class.
    """
    exclude = exclude or {}
    folder = Path(str(folder)).expanduser()
    found, files = _public_class_files(folder, class_names)
    index = {name: i for i, name in enumerate(class_names)}
    by_class = {name: [p for p, n in files if n == name] for name in found}
    picked = _pick_per_class(folder, by_class, per_class, rng)
    chosen = [(by_class[name][i], index[name]) for name in found for i in picked[name]]
    images = cached(cache_dir, ["public_folder", size, channels, folder_fingerprint([(p, "") for p, _ in chosen])],
                    lambda: {"images": decode_images([p for p, _ in chosen], size, channels)})["images"]
    labels = torch.tensor([y for _, y in chosen])
    dropped = dict.fromkeys(exclude, 0)
    keep = ~_copies(images, exclude, dropped)
    images, labels = [images[keep]], [labels[keep]]
    for name in found if per_class is not None else []:      # replace the dropped copies of each class
        missing = per_class - int((labels[0] == index[name]).sum())
        untried = np.setdiff1d(np.arange(len(by_class[name])), picked[name])
        for extra in _replacements(folder / name, by_class[name], untried, missing, per_class, rng,
                                   lambda paths: decode_images(paths, size, channels), exclude, dropped):
            images.append(extra)
            labels.append(torch.full((len(extra),), index[name], dtype=torch.long))
    return torch.cat(images), torch.cat(labels).long(), {
        "public": str(folder), "public_classes_present": len(found),
        **{f"public_copies_of_{name}_dropped": n for name, n in dropped.items()}}


def _public_class_files(folder: Path, class_names: list[str]) -> tuple[list[str], list]:
    """The folder's class names and (image, class) files, refused where the folder is missing,
    names a class the private data does not have, or holds no image."""
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
    return found, files


def _pick_per_class(folder: Path, by_class: dict[str, list], per_class: int | None,
                    rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Each class's chosen file positions: all of them, or `per_class` drawn at random (in order)."""
    picked = {}
    for name, mine in by_class.items():
        if per_class is not None and per_class > len(mine):
            raise ConfigError(f"asked for {per_class} public images of class {name!r} but "
                              f"{folder / name} holds {len(mine)}")
        picked[name] = (np.arange(len(mine)) if per_class is None
                        else np.sort(rng.choice(len(mine), size=per_class, replace=False)))
    return picked


def _replacements(where: Path, paths: list, untried: np.ndarray, missing: int, per_class: int,
                  rng: np.random.Generator, decode, exclude: dict[str, set[bytes]], dropped: dict[str, int]):
    """Decoded images of one class drawn from its untried files until `missing` of them are not
    copies of an excluded image (yielded a draw at a time); a ConfigError where the class runs out."""
    while missing:
        if not len(untried):
            raise ConfigError(f"asked for {per_class} public images of class {where.name!r} but {where} "
                              f"holds only {per_class - missing} that are not copies of test images")
        draw = np.sort(rng.choice(untried, size=min(missing, len(untried)), replace=False))
        untried = np.setdiff1d(untried, draw)
        extra = decode([paths[i] for i in draw])
        extra = extra[~_copies(extra, exclude, dropped)]
        yield extra
        missing -= len(extra)


@dataclass
class ImageSetSchema(DatasetSchema):
    root: str | None = None
    public_source: str = "split"
    public_per_class: int | None = None
    public_imbalance: float = 0.0
    public_folder: str | None = None
    augment_public: bool = False
    cache_dir: str | None = None
    image_size: int | None = None

    def __post_init__(self):
        super().__post_init__()
        one_of(self.public_source, ("split", "folder"), "dataset.public_source")


@dataclass
class ImageFolderSchema(ImageSetSchema):
    normalize: bool = True
    public_fraction: float = 0.04


def public_split_size(cfg: DatasetSchema) -> dict:
    """The size of a public split of the training set: `dataset.public_per_class` images of each
    class when set, else `dataset.public_fraction` of the whole set."""
    if cfg.public_per_class is not None:
        return {"per_class": cfg.public_per_class}
    return {"fraction": cfg.public_fraction}


def image_bundle(name: str, cfg: ImageSetSchema, train: tuple[torch.Tensor, torch.Tensor],
                 test: tuple[torch.Tensor, torch.Tensor], class_names: list[str], rng: np.random.Generator,
                 aug_generator: torch.Generator, *, image_size: int | None = None, normalize: bool = False,
                 info: dict | None = None, **split_size) -> DataBundle:
    """The bundle of an image data set from uint8 (images [N, C, H, W], labels) train and test pairs.

    `dataset.public_source=split` draws the public set from the training set (`split_size`:
    `fraction=` or `per_class=`, with `dataset.public_imbalance`); `folder` takes it from
    `dataset.public_folder` (out-of-distribution public data, decoded at the stored size and
    channel count, without exact copies of any test image) and keeps the whole
    training set private. Public batches are augmented; every
    batch is resized to `image_size` (default `dataset.image_size`) and, with `normalize` (the
    `dataset.normalize` of the data sets that have it), mapped to [-1, 1]."""
    (x_train, y_train), (x_test, y_test) = train, test
    size = image_size or cfg.image_size
    plain = ImageTransform(size, normalize=normalize)
    public_tf = ImageTransform(size, augment=cfg.augment_public, generator=aug_generator, normalize=normalize)
    info = {**(info or {}), "image_size": size, "normalize": normalize, "augment_public": cfg.augment_public,
            "public_source": cfg.public_source}
    if cfg.public_source == "split":
        pub, priv = split_public(y_train.numpy(), rng, imbalance=cfg.public_imbalance, **split_size)
        info.update(public_imbalance=cfg.public_imbalance, **{f"public_{k}": v for k, v in split_size.items()})
        private = TensorSplit(x_train[priv], y_train[priv], plain)
        public = TensorSplit(x_train[pub], y_train[pub], public_tf)
    elif cfg.public_source == "folder":
        # copies of test images are dropped (the test set is not private); copies of training images are
        # not looked for: what is kept, and the count, would depend on the private set without noise
        exclude = {"test": set(content_hashes(x_test))}
        x_pub, y_pub, extra = load_public_folder(cfg.public_folder, class_names, x_train.shape[-1],
                                                 per_class=cfg.public_per_class, rng=rng, cache_dir=cfg.cache_dir,
                                                 channels=x_train.shape[1], exclude=exclude)
        info.update(public_per_class=cfg.public_per_class, **extra)
        private, public = TensorSplit(x_train, y_train, plain), TensorSplit(x_pub, y_pub, public_tf)
    else:
        raise ConfigError(f"dataset.public_source must be split or folder, got {cfg.public_source!r}")
    return DataBundle(name=name, private=private, public=public, test=TensorSplit(x_test, y_test, plain),
                      num_classes=len(class_names), input_shape=(x_train.shape[1], size, size), info=info)


def common_square_size(paths: list[Path], folder: Path) -> int:
    """The one square size all images share, read from the file headers (PIL opens lazily)."""
    from PIL import Image

    sizes = set()
    for path in paths:
        try:
            with Image.open(path) as img:
                sizes.add(img.size)
        except (OSError, ValueError) as err:  # PIL's UnidentifiedImageError is an OSError
            raise unreadable_image(Path(path), err) from None
    (width, height), *others = sorted(sizes)
    if others or width != height:
        shown = ", ".join(f"{w}x{h}" for w, h in sorted(sizes)[:4])
        raise ConfigError(f"the images under {folder} are not all square and of one size ({shown}"
                          f"{' ...' if len(sizes) > 4 else ''}); set dataset.image_size=N to resize each to N x N")
    return width


def read_image_folder(root, image_size: int | None, cache_dir: str | None = None):
    """(train images uint8 [N, C, S, S], train labels, test images, test labels, class names) of
    `root/train/<class>/*` and `root/test/<class>/*`. Classes are the train sub-folders (sorted);
    test classes must be among them. S is `image_size`, or the images' own size when they all
    share one; C is 1 when every image is grey-scale, else 3."""
    if not root:
        raise ConfigError("dataset=image_folder needs dataset.root=<folder holding train/ and test/, "
                          "each with one sub-folder of images per class>")
    root = Path(str(root)).expanduser()
    for part in ("train", "test"):
        if not (root / part).is_dir():
            raise DataMissingError(
                f"image folder data set is missing: no {part}/ folder in {root}. dataset=image_folder reads "
                f"{root}/train/<class>/*.png|jpg and {root}/test/<class>/...; dataset.root sets where we look")
    classes, train_files = list_class_folder(root / "train")
    test_classes, test_files = list_class_folder(root / "test")
    if not train_files or not test_files:
        raise DataMissingError(f"image folder data set is missing: no images ({', '.join(IMG_EXTENSIONS)}) "
                               f"in class sub-folders of {root / ('train' if not train_files else 'test')}")
    unknown = sorted(set(test_classes) - set(classes))
    if unknown:
        raise ConfigError(f"{root / 'test'} has classes that {root / 'train'} lacks: {', '.join(unknown[:5])}"
                          f"{' ...' if len(unknown) > 5 else ''}; test classes must be among the training classes")
    files = train_files + test_files

    def build():
        paths = [p for p, _ in files]
        images = decode_images(paths, image_size or common_square_size(paths, root))
        grey = bool((images[:, 0] == images[:, 1]).all() and (images[:, 1] == images[:, 2]).all())
        return {"images": images[:, :1].clone() if grey else images}

    images = cached(cache_dir, ["image_folder", image_size, folder_fingerprint(files)], build)["images"]
    index = {name: i for i, name in enumerate(classes)}
    labels = torch.tensor([index[name] for _, name in files])
    n = len(train_files)
    return images[:n], labels[:n], images[n:], labels[n:], classes


def load_image_folder_bundle(cfg: ImageFolderSchema, rng: np.random.Generator,
                             aug_generator: torch.Generator) -> DataBundle:
    """Any image classification set kept as `train/` and `test/` class folders, with the public-data
    options of the paper's image settings."""
    x_train, y_train, x_test, y_test, classes = read_image_folder(cfg.root, cfg.image_size, cfg.cache_dir)
    return image_bundle("image_folder", cfg, (x_train, y_train), (x_test, y_test), classes, rng, aug_generator,
                        image_size=x_train.shape[-1], normalize=cfg.normalize,
                        info={"root": str(cfg.root), "classes": len(classes),
                              "outside_guarantee": ["the image size (when dataset.image_size is not set) and the "
                                                    "grey-scale choice are read from the training images, "
                                                    "private ones included, without noise"]},
                        **public_split_size(cfg))
