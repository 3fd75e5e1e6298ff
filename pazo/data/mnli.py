"""MNLI with SNLI as public data (setting 4 of the PAZO paper), for a prompt-based masked LM.

Both come from Hugging Face `datasets`, kept with `save_to_disk`: `<root>/mnli` (GLUE MNLI:
splits train and validation_matched; columns premise, hypothesis, label with 0 entailment,
1 neutral, 2 contradiction) and `<root>/snli` (split train, same columns; label -1 = no gold
label, dropped). `download=true` fetches them from the Hub.

Private data: `k_shot` examples per class of MNLI train, test: `test_size` of dev_matched, public:
`public_per_class` per class of SNLI train - every sample drawn with the run's data seed (MeZO and
DPZero use seeds 13, 21, 42, 87, 100; the PAZO code took the first rows).

Validation: `val_k_shot` (default `k_shot`) examples per class of the rest of MNLI train, a second
k-shot sample disjoint from the private one (the dev set of LM-BFF, MeZO and DPZero, of the
training set's size), drawn from the `validation` stream. Carving it from the k-shot sample
instead (`val_fraction`, with `val_k_shot=0`) would train on fewer than the paper's k examples.

Template (LM-BFF `*cls**sent-_0*?*mask*,*+sentl_1**sep+*`): `<s>` premise without its last
character, `?`, `<mask>`, `,`, then " " + hypothesis with its first letter lower-cased, `</s>`;
each piece is tokenised on its own. The premise is capped at `premise_limit` tokens and the
hypothesis cut so that the whole stays within `max_length`; the mask is always kept.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from pazo.data.base import DataBundle, DatasetSchema, TensorSplit
from pazo.data.saved_hub import load_saved
from pazo.errors import ConfigError, require

HUB = {"mnli": ("nyu-mll/glue", "mnli"), "snli": ("stanfordnlp/snli", None)}
LABELS = ["entailment", "neutral", "contradiction"]      # the GLUE / SNLI label ids 0, 1, 2


def encode_prompt(tokenizer, premise: str, hypothesis: str, premise_limit: int, max_length: int) -> list[int]:
    def enc(text):
        return tokenizer.encode(text, add_special_tokens=False)

    first = enc(premise[:-1])[:premise_limit]
    second = enc(" " + hypothesis[:1].lower() + hypothesis[1:])
    head = [tokenizer.cls_token_id, *first, *enc("?"), tokenizer.mask_token_id, *enc(",")]
    room = max_length - len(head) - 1
    if room < 0:
        raise ConfigError(f"max_length {max_length} leaves no room for the template after a "
                          f"{len(first)}-token premise; raise max_length or lower premise_limit")
    return [*head, *second[:room], tokenizer.sep_token_id]


def encode_pairs(tokenizer, premises, hypotheses, premise_limit: int, max_length: int) -> torch.Tensor:
    """Padded ids [N, longest] (pad = tokenizer.pad_token_id)."""
    rows = [encode_prompt(tokenizer, p, h, premise_limit, max_length) for p, h in zip(premises, hypotheses)]
    out = torch.full((len(rows), max(len(r) for r in rows)), tokenizer.pad_token_id, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row)
    return out


class TrimPadding:
    """Drop the columns that are padding in every row of a batch: a batch of short pairs then
    costs its own length, not the longest example's of the whole split."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, ids: torch.Tensor, device) -> torch.Tensor:
        used = (ids != self.pad_id).any(dim=0).nonzero()
        length = int(used.max()) + 1 if len(used) else 1
        return ids[:, :length].to(device)


def _per_class(split, per_class: int, rng: np.random.Generator, what: str,
               taken: np.ndarray | None = None) -> np.ndarray:
    """Sorted row indices of `per_class` rows of each class, none of them among `taken`."""
    labels = np.asarray(split["label"])
    chosen = []
    for c in range(len(LABELS)):
        pool = np.flatnonzero(labels == c)
        if taken is not None:
            pool = np.setdiff1d(pool, taken)
        if per_class > len(pool):
            raise ConfigError(f"asked for {per_class} {what} examples of class {LABELS[c]} but only "
                              f"{len(pool)} exist")
        chosen.append(rng.choice(pool, size=per_class, replace=False))
    return np.sort(np.concatenate(chosen))


@dataclass
class MnliSchema(DatasetSchema):
    root: str = "data"
    download: bool = False
    tokenizer: str = ""
    k_shot: int = 512
    public_per_class: int = 100
    test_size: int | None = 1000
    max_length: int = 256
    premise_limit: int = 240
    label_words: list[str] = field(default_factory=list)
    val_k_shot: int | None = None
    val_fraction: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        require(len(self.label_words) == 3, f"dataset.label_words must be three words (entailment, neutral, "
                                            f"contradiction), got {self.label_words!r}")


def load_mnli_bundle(cfg: MnliSchema, rng: np.random.Generator, tokenizer,
                     val_rng: np.random.Generator | None = None) -> DataBundle:
    """`val_rng` draws the `val_k_shot` validation sample (none without it or with `val_k_shot=0`)."""
    root = Path(str(cfg.root)).expanduser()
    mnli, snli = (load_saved(root, name, *HUB[name], cfg.download) for name in ("mnli", "snli"))
    train, dev, pool = mnli["train"], mnli["validation_matched"], snli["train"]
    private_idx = _per_class(train, cfg.k_shot, rng, "MNLI train")
    private = train.select(private_idx)
    val_k_shot = cfg.val_k_shot or 0
    val = (train.select(_per_class(train, val_k_shot, val_rng, "MNLI train validation", taken=private_idx))
           if val_k_shot and val_rng is not None else None)
    if cfg.test_size > len(dev):
        raise ConfigError(f"asked for {cfg.test_size} test examples but dev_matched holds {len(dev)}")
    test = dev.select(np.sort(rng.choice(len(dev), size=cfg.test_size, replace=False)))
    public = pool.select(_per_class(pool, cfg.public_per_class, rng, "SNLI train"))
    trim = TrimPadding(tokenizer.pad_token_id)

    def split(ds):
        ids = encode_pairs(tokenizer, ds["premise"], ds["hypothesis"], cfg.premise_limit, cfg.max_length)
        return TensorSplit(ids, torch.tensor(ds["label"]), trim)

    return DataBundle(
        name="mnli", private=split(private), public=split(public), test=split(test),
        val=split(val) if val is not None else None, num_classes=len(LABELS), input_shape=(cfg.max_length,),
        info={"k_shot": cfg.k_shot, "public": "snli", "public_per_class": cfg.public_per_class,
              "test_size": cfg.test_size, "max_length": cfg.max_length,
              "label_words": dict(zip(LABELS, cfg.label_words)),
              **({"val_k_shot": val_k_shot} if val is not None else {})})
