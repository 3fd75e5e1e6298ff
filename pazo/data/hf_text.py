"""Any Hugging Face text-classification data set kept with `save_to_disk` (`dataset=hf_text`, for
model=lstm): `<root>/<hf_name>`, a DatasetDict whose splits (`train_split`, `test_split`), text
column (`text_column`, and `text_pair_column` for sentence pairs) and label column
(`label_column`) the config names. `download=true` fetches `hub_id` (default: `hf_name`) from the
Hub with `datasets` and saves it there.

Classes: the label column's ClassLabel names, else its sorted distinct values (integers or
strings); rows labelled -1 or None (no gold label, e.g. GLUE test splits) are dropped. Words,
vocabulary and padding as in the IMDB setting (`pazo.data.text`).

Privacy: the vocabulary is counted on the public texts by default, which costs no privacy;
`vocab_source=private` counts it on the private texts, and the run summary records that this
release is outside the guarantee.

Public data: a seeded split of the training set (`public_fraction` or `public_per_class`, with
`public_imbalance`), or with `public_source=folder` another saved data set at `public_folder`
(split `public_split`, the same column names, labels matched by class name; `public_per_class`
per class, seeded, or all of it) as out-of-distribution public data.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pazo.data.base import DataBundle, DatasetSchema, TensorSplit
from pazo.data.image_folder import public_split_size
from pazo.data.public_split import split_public
from pazo.data.saved_hub import load_saved, read_saved
from pazo.data.text import encode, source_vocab
from pazo.errors import ConfigError, DataMissingError, one_of


def _split(data, name: str, where: Path, cfg):
    from datasets import DatasetDict

    if not isinstance(data, DatasetDict):
        raise ConfigError(f"{where} holds one split, not a DatasetDict; save the data set with its splits "
                          "(datasets.load_dataset(...).save_to_disk(...))")
    if name not in data:
        raise ConfigError(f"{where} has no split {name!r} (it has {', '.join(data)}); set dataset.train_split / "
                          "dataset.test_split")
    split = data[name]
    wanted = [cfg.text_column, cfg.label_column] + ([cfg.text_pair_column] if cfg.text_pair_column else [])
    absent = [c for c in wanted if c not in split.column_names]
    if absent:
        raise ConfigError(f"split {name!r} of {where} has no column {', '.join(map(repr, absent))} (it has "
                          f"{', '.join(split.column_names)}); set dataset.text_column / text_pair_column / "
                          "label_column")
    return split


def class_ids(split, column: str, names: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Class ids of a split's label column (-1 where there is no label) and the class names: a
    ClassLabel's names or the sorted distinct values, unless `names` (another split's) are given."""
    from datasets import ClassLabel

    feature, values = split.features[column], split[column]
    if isinstance(feature, ClassLabel):
        own = list(feature.names)
        value_names = [own[v] if v is not None and v >= 0 else None for v in values]
    else:
        own = [str(v) for v in sorted({v for v in values if v is not None and v != -1})]
        value_names = [str(v) if v is not None and v != -1 else None for v in values]
    names = own if names is None else names
    index = {name: i for i, name in enumerate(names)}
    unknown = sorted({n for n in value_names if n is not None and n not in index})
    if unknown:
        raise ConfigError(f"labels {', '.join(unknown[:5])} of column {column!r} are not among the training "
                          f"classes {', '.join(names[:10])}")
    return np.array([-1 if n is None else index[n] for n in value_names], dtype=np.int64), names


def _labelled(split, ids: np.ndarray):
    keep = np.flatnonzero(ids >= 0)
    return split.select(keep), ids[keep]


def _public_folder(cfg, names: list[str]):
    path = Path(str(cfg.public_folder)).expanduser()
    if not path.exists():
        raise DataMissingError(f"public data set {path} does not exist: it should be a Hugging Face data set "
                               "written with save_to_disk, with the same text and label columns; set "
                               "dataset.public_folder to it, or dataset.public_source=split")
    again = f"save it again with save_to_disk (the folder {path} is read as it is)"
    pool = _split(read_saved(path, again), cfg.public_split, path, cfg)
    return _labelled(pool, class_ids(pool, cfg.label_column, names)[0])


@dataclass
class HfTextSchema(DatasetSchema):
    root: str = "data"
    hf_name: str | None = None
    download: bool = False
    hub_id: str | None = None
    hub_config: str | None = None
    train_split: str = "train"
    test_split: str = "test"
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    test_size: int | None = None
    vocab_size: int = 10000
    vocab_source: str = "public"
    max_length: int = 128
    public_source: str = "split"
    public_fraction: float = 0.04
    public_per_class: int | None = None
    public_imbalance: float = 0.0
    public_folder: str | None = None
    public_split: str = "train"

    def __post_init__(self):
        super().__post_init__()
        one_of(self.vocab_source, ("public", "private"), "dataset.vocab_source")
        one_of(self.public_source, ("split", "folder"), "dataset.public_source")


def load_hf_text_bundle(cfg: HfTextSchema, rng: np.random.Generator) -> DataBundle:
    if not cfg.hf_name:
        raise ConfigError("dataset=hf_text needs dataset.hf_name=<folder under dataset.root written by "
                          "datasets' save_to_disk>")
    root = Path(str(cfg.root)).expanduser()
    data = load_saved(root, cfg.hf_name, cfg.hub_id or cfg.hf_name, cfg.hub_config, cfg.download)
    where = root / cfg.hf_name
    train, test = (_split(data, name, where, cfg) for name in (cfg.train_split, cfg.test_split))
    y_all, names = class_ids(train, cfg.label_column)
    train, y_train = _labelled(train, y_all)
    test, y_test = _labelled(test, class_ids(test, cfg.label_column, names)[0])
    info = {"hf_name": cfg.hf_name, "classes": len(names), "vocab_size": cfg.vocab_size,
            "max_length": cfg.max_length, "public_source": cfg.public_source,
            "unlabelled_dropped": len(y_all) - len(y_train),
            "outside_guarantee": ["the class list (when the label column is not a ClassLabel) and "
                                  "unlabelled_dropped are read from the private split's labels without noise"]}

    if cfg.public_source == "split":
        size = public_split_size(cfg)
        pub, priv = split_public(y_train, rng, imbalance=cfg.public_imbalance, **size)
        public, y_public = train.select(pub), y_train[pub]
        private, y_private = train.select(priv), y_train[priv]
        info.update(public_imbalance=cfg.public_imbalance, **{f"public_{k}": v for k, v in size.items()})
    elif cfg.public_source == "folder":
        pool, y_pool = _public_folder(cfg, names)
        if cfg.public_per_class is not None:
            chosen = split_public(y_pool, rng, per_class=cfg.public_per_class, imbalance=cfg.public_imbalance)[0]
            pool, y_pool = pool.select(chosen), y_pool[chosen]
        public, y_public, private, y_private = pool, y_pool, train, y_train
        info.update(public=str(cfg.public_folder), public_per_class=cfg.public_per_class,
                    public_imbalance=cfg.public_imbalance)
    else:
        raise ConfigError(f"dataset.public_source must be split or folder, got {cfg.public_source!r}")
    if cfg.test_size is not None:
        if cfg.test_size > len(test):
            raise ConfigError(f"asked for {cfg.test_size} test examples but split {cfg.test_split!r} holds {len(test)}")
        keep = np.sort(rng.choice(len(test), size=cfg.test_size, replace=False))
        test, y_test = test.select(keep), y_test[keep]
        info["test_size"] = cfg.test_size

    def texts(split) -> tuple[list[str], list[str] | None]:
        return split[cfg.text_column], (split[cfg.text_pair_column] if cfg.text_pair_column else None)

    def all_texts(split) -> list[str]:
        first, second = texts(split)
        return list(first) + list(second or [])

    vocab, provenance = source_vocab(cfg.vocab_source, all_texts(public), all_texts(private), cfg.vocab_size)
    info.update(provenance, outside_guarantee=[*info["outside_guarantee"], *provenance.get("outside_guarantee", [])])

    def tensors(split, labels):
        first, second = texts(split)
        return TensorSplit(encode(first, vocab, cfg.max_length, pairs=second), torch.as_tensor(labels))

    return DataBundle(name=cfg.hf_name, private=tensors(private, y_private), public=tensors(public, y_public),
                      test=tensors(test, y_test), num_classes=len(names), input_shape=(cfg.max_length,), info=info)
