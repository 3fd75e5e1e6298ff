"""IMDB sentiment with Amazon Polarity reviews as out-of-distribution public data (setting 3 of
the PAZO paper).

Both come from Hugging Face `datasets`, kept on disk with `save_to_disk`: `<root>/imdb` (splits
train/test, columns text, label) and `<root>/amazon_polarity` (split train, columns title,
content, label). `download=true` fetches them from the Hub and saves them there.

Vocabulary (`pazo.data.text`): the `vocab_size` most frequent lower-cased `\\w+` tokens, ids 2..,
PAD = 0, UNK = 1, counted by default on the public Amazon reviews (as they are encoded, so no
privacy is spent on it); `vocab_source=private` counts it on IMDB train as the paper does, a
release no noise covers, which the summary records. Every review is cut or padded to
`max_length` tokens. Every selection (the public sample, the test subset) is seeded, unlike the
authors' code.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pazo.data.base import DataBundle, DatasetSchema, TensorSplit
from pazo.data.saved_hub import load_saved
from pazo.data.text import encode, source_vocab
from pazo.errors import ConfigError, one_of

HUB = {"imdb": "stanfordnlp/imdb", "amazon_polarity": "fancyzhx/amazon_polarity"}


@dataclass
class ImdbSchema(DatasetSchema):
    root: str = "data"
    download: bool = False
    vocab_size: int = 10000
    vocab_source: str = "public"
    max_length: int = 290
    public_size: int = 2000
    public_with_title: bool = False
    test_size: int | None = 2000

    def __post_init__(self):
        super().__post_init__()
        one_of(self.vocab_source, ("public", "private"), "dataset.vocab_source")


def load_imdb_bundle(cfg: ImdbSchema, rng: np.random.Generator) -> DataBundle:
    root = Path(str(cfg.root)).expanduser()
    imdb, amazon = (load_saved(root, name, HUB[name], None, cfg.download) for name in ("imdb", "amazon_polarity"))
    train, test, pool = imdb["train"], imdb["test"], amazon["train"]
    if cfg.public_size > len(pool) or cfg.test_size > len(test):
        raise ConfigError(f"asked for {cfg.public_size} public / {cfg.test_size} test reviews but "
                               f"{root} holds {len(pool)} Amazon / {len(test)} IMDB test reviews")
    pub_idx = np.sort(rng.choice(len(pool), size=cfg.public_size, replace=False))
    test_idx = np.sort(rng.choice(len(test), size=cfg.test_size, replace=False))
    public = pool.select(pub_idx)
    public_texts = [f"{t} {c}" if cfg.public_with_title else c
                    for t, c in zip(public["title"], public["content"])]
    test = test.select(test_idx)
    vocab, provenance = source_vocab(cfg.vocab_source, public_texts, train["text"], cfg.vocab_size)

    def split(texts, labels):
        return TensorSplit(encode(texts, vocab, cfg.max_length), torch.tensor(labels))

    return DataBundle(
        name="imdb", private=split(train["text"], train["label"]),
        public=split(public_texts, public["label"]), test=split(test["text"], test["label"]),
        num_classes=2, input_shape=(cfg.max_length,),
        info={"vocab_size": cfg.vocab_size, "max_length": cfg.max_length, "public": "amazon_polarity",
              "public_size": cfg.public_size, "test_size": cfg.test_size, **provenance})
