"""Prompted tasks for language models (the DPZero and DP-ZO settings): MeZO's and LM-BFF's prompts,
one templated loader for classification (`dataset=sst2`, `dataset=glue_prompt dataset.task=...`)
and SQuAD for generation (`dataset=squad`).

Data are Hugging Face data sets kept with `save_to_disk` under `dataset.root` (`<root>/<task>`;
`dataset.download=true` fetches the Hub copy named in `pazo.text.prompts.TASKS`). Samples, all
seeded by `dataset.data_seed` (MeZO and DPZero use 13, 21, 42, 87, 100) or, when it is null, by
the run's `split` stream:

* private: `k_shot` examples per class (DPZero's RoBERTa setting, 512) or `n_train` in all
  (DPZero's and DP-ZO's OPT settings, 1000) of the training split;
* validation: `val_k_shot` per class or `n_val` in all from the rest of the training split;
* test: `test_size` examples of the task's evaluation split (null: all of it);
* public (`public_source`): `none`, `split` (`public_per_class` per class or `public_size` in all
  from the rest of the training split) or `folder` (another task's or corpus' saved data set,
  `public_folder`, its split `public_split`, its columns renamed to the task's by
  `public_columns`; e.g. SST-2 as public data for another sentiment task).

Classification templates (specified with the label words in `pazo.text.prompts`; `model_kind`
picks the causal or the masked one; label words keep their leading space):

* causal (MeZO, OPT): SST-2 `<text> It was` + ` terrible`/` great`; RTE `<premise>\\nDoes this mean
  that "<hypothesis>" is true? Yes or No?\\n` + `Yes`/`No`. The prompt is encoded with the
  tokenizer's special tokens (OPT's `</s>` in front) and scored at its last token.
* masked (LM-BFF, RoBERTa): SST-2 / SST-5 `<s><text> It was<mask>.</s>`; MNLI / SNLI / RTE
  `<s><premise minus its last character>?<mask>, <hypothesis, first letter lower-cased></s>`;
  TREC `<s><mask>: <text></s>`. Each piece is tokenised on its own.

SQuAD (MeZO's prompt): `Title: <title>\\nContext: <context>\\nQuestion: <question>\\nAnswer:`, the
target ` <first gold answer>\\n`; generation stops at the newline. Too long an input loses tokens
from the front of the prompt (after the tokenizer's leading special token), as in MeZO.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pazo.config_schema import integer_at_least, optional
from pazo.data.base import DataBundle, DatasetSchema, TensorSplit
from pazo.data.saved_hub import load_saved, read_saved
from pazo.errors import ConfigError, DataMissingError, one_of
from pazo.text.prompts import TaskSpec, resolve_label_words, squad_prompt, task_spec
from pazo.text.tokens import pad_token_id

CAUSAL_MODELS = ("hf_causal_lm",)
MASKED_MODELS = ("hf_masked_lm", "roberta_prompt")
SEEDS = (13, 21, 42, 87, 100)   # MeZO's and DPZero's data seeds


def model_kind(model_name: str) -> str:
    if model_name in CAUSAL_MODELS:
        return "causal"
    if model_name in MASKED_MODELS:
        return "masked"
    raise ConfigError(f"prompted tasks need a language model (model=hf_causal_lm or hf_masked_lm), "
                      f"not model={model_name}")


# --- encoding -------------------------------------------------------------------------------------
def _specials(tokenizer) -> int:
    """How many special tokens the tokenizer puts in front of a text (OPT's </s>, LLaMA's <s>)."""
    probe = tokenizer.encode("a", add_special_tokens=False)
    full = tokenizer.encode("a")
    return full.index(probe[0]) if probe and probe[0] in full else 0


def encode_causal(tokenizer, text: str, max_length: int) -> list[int]:
    """The prompt with the tokenizer's special tokens; too long, it loses tokens after the leading
    special ones (the end of a prompt, next to the answer, is kept)."""
    ids = tokenizer.encode(text)
    if len(ids) > max_length:
        keep = _specials(tokenizer)
        ids = ids[:keep] + ids[len(ids) - (max_length - keep):]
    return ids


def encode_masked(tokenizer, pieces: list, max_length: int) -> list[int]:
    """LM-BFF pieces, each tokenised on its own; too long, the longest text piece loses its end."""
    special = {"<cls>": tokenizer.cls_token_id, "<sep>": tokenizer.sep_token_id, "<mask>": tokenizer.mask_token_id}
    if None in special.values():
        raise ConfigError("the tokenizer lacks a cls, sep or mask token: use a masked LM's tokenizer")
    parts = [[special[p]] if p in special else tokenizer.encode(p, add_special_tokens=False) for p in pieces]
    texts = [i for i, p in enumerate(pieces) if p not in special]
    while sum(map(len, parts)) > max_length:
        longest = max(texts, key=lambda i: len(parts[i]), default=None)
        if longest is None or not parts[longest]:
            raise ConfigError(f"max_length {max_length} leaves no room for the template")
        parts[longest] = parts[longest][:len(parts[longest]) - (sum(map(len, parts)) - max_length)]
    return [t for part in parts for t in part]


def pad_rows(rows: list[list[int]], pad: int) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows), default=1)), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row, dtype=torch.long)
    return out


class TrimRightPadding:
    """Drop the trailing columns that are padding in every row of a batch ([B, L] ids, or [B, 2, L]
    ids and answer mask), so a batch costs its own length."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, x: torch.Tensor, device) -> torch.Tensor:
        ids = x[:, 0] if x.dim() == 3 else x
        used = (ids != self.pad_id).any(dim=0).nonzero()
        length = int(used.max()) + 1 if len(used) else 1
        return x[..., :length].to(device)


class GenerationSplit(TensorSplit):
    """Question-answer examples: inputs [N, 2, L] (ids of prompt + answer, right-padded; 1 on the
    answer tokens), the gold answers of each example and its prompt length; no classes."""

    def __init__(self, inputs, answers: list[list[str]], prompt_lengths: torch.Tensor, transform=None):
        super().__init__(inputs, torch.zeros(len(inputs), dtype=torch.long), transform)
        self.answers, self.prompt_lengths = list(answers), prompt_lengths.long()

    def prompt_ids(self, i: int) -> list[int]:
        return self.inputs[i, 0, :int(self.prompt_lengths[i])].tolist()

    def class_histogram(self, num_classes: int) -> list[int]:
        return []

    def subset(self, indices) -> GenerationSplit:
        idx = torch.as_tensor(np.asarray(indices), dtype=torch.long)
        return GenerationSplit(self.inputs[idx], [self.answers[i] for i in idx.tolist()],
                               self.prompt_lengths[idx], self.transform)


# --- sampling -------------------------------------------------------------------------------------
def sample_rows(labels: np.ndarray | None, rng: np.random.Generator, *, per_class: int | None = None,
                total: int | None = None, taken: np.ndarray | None = None, what: str = "") -> np.ndarray:
    """Sorted row indices: `per_class` of each class or `total` in all, none among `taken`."""
    n = len(labels)
    pool = np.setdiff1d(np.arange(n), taken) if taken is not None else np.arange(n)
    if per_class is not None:
        if labels is None:
            raise ConfigError(f"{what}: examples per class need classes; use n_train / n_val / public_size")
        chosen = []
        for c in np.unique(labels[labels >= 0]):
            rows = pool[labels[pool] == c]
            if per_class > len(rows):
                raise ConfigError(f"asked for {per_class} {what} examples of class {c} but only {len(rows)} remain")
            chosen.append(rng.choice(rows, size=per_class, replace=False))
        return np.sort(np.concatenate(chosen)) if chosen else np.empty(0, dtype=np.int64)
    if total is None:
        return np.empty(0, dtype=np.int64)
    if total > len(pool):
        raise ConfigError(f"asked for {total} {what} examples but only {len(pool)} remain")
    return np.sort(rng.choice(pool, size=total, replace=False))


def _load_task_data(cfg, spec: TaskSpec):
    root = Path(str(cfg.root)).expanduser()
    data = load_saved(root, spec.name, spec.hub, spec.hub_config, cfg.download)
    for split in (spec.train_split, spec.test_split):
        if split not in data:
            raise ConfigError(f"{root / spec.name} has no split {split!r} (it has {', '.join(data)}); it should "
                              f"be {spec.hub}" + (f" ({spec.hub_config})" if spec.hub_config else "") + " as saved")
        absent = [c for c in (*spec.columns, spec.label_column) if c not in data[split].column_names]
        if absent:
            raise ConfigError(f"split {split!r} of {root / spec.name} has no column {', '.join(absent)} "
                              f"(it has {', '.join(data[split].column_names)})")
    return data[spec.train_split], data[spec.test_split]


def _public_pool(cfg, spec: TaskSpec):
    """The public data set of `public_source=folder`, its columns renamed to the task's."""
    from datasets import DatasetDict

    path = Path(str(cfg.public_folder)).expanduser()
    if not path.exists():
        raise DataMissingError(f"public data set {path} does not exist: it should be a Hugging Face data set "
                               "written with save_to_disk; set dataset.public_folder to it, or "
                               "dataset.public_source=split / none")
    data = read_saved(path, f"save it again with save_to_disk (the folder {path} is read as it is)")
    if isinstance(data, DatasetDict):
        if cfg.public_split not in data:
            raise ConfigError(f"{path} has no split {cfg.public_split!r} (it has {', '.join(data)})")
        data = data[cfg.public_split]
    wanted = list(spec.columns) + [spec.label_column]
    given = list(cfg.public_columns) if cfg.public_columns else wanted
    if len(given) != len(wanted):
        raise ConfigError(f"dataset.public_columns names {len(given)} columns; task {spec.name} needs "
                          f"{len(wanted)} ({', '.join(wanted)}: text columns, then the label)")
    absent = [c for c in given if c not in data.column_names]
    if absent:
        raise ConfigError(f"public data set {path} has no column {', '.join(absent)} (it has "
                          f"{', '.join(data.column_names)}); set dataset.public_columns")
    rename = {g: w for g, w in zip(given, wanted) if g != w}
    data = data.select_columns(given)
    return data.rename_columns(rename) if rename else data


def _labels(split, spec: TaskSpec) -> np.ndarray | None:
    return None if spec.generation else np.asarray(split[spec.label_column], dtype=np.int64)


def _rng(cfg, streams) -> np.random.Generator:
    return np.random.default_rng(cfg.data_seed) if cfg.data_seed is not None else streams.numpy["split"]


@dataclass
class PromptTaskSchema(DatasetSchema):
    task: str = "sst2"
    root: str = "data"
    download: bool = False
    tokenizer: str = ""
    model_kind: str = ""
    data_seed: int | None = None
    k_shot: int | None = 512
    n_train: int | None = None
    val_k_shot: int | None = None
    n_val: int | None = None
    test_size: int | None = 1000
    max_length: int = 256
    label_words: list[str] | None = None
    public_source: str = "none"
    public_per_class: int | None = None
    public_size: int | None = None
    public_folder: str | None = None
    public_split: str = "train"
    public_columns: list[str] | None = None
    max_new_tokens: int | None = None
    val_fraction: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        optional(integer_at_least, self.data_seed, 0, "dataset.data_seed")
        one_of(self.public_source, ("none", "split", "folder"), "dataset.public_source")


def load_prompt_bundle(cfg: PromptTaskSchema, streams, tokenizer) -> DataBundle:
    """A prompted task (`cfg.task`) as private / validation / public / test splits of token ids."""
    spec = task_spec(cfg.task)
    kind = model_kind(cfg.model_kind)
    _refuse_sizes(cfg, spec, kind)
    rng = _rng(cfg, streams)
    train, test = _load_task_data(cfg, spec)
    train, y_train = _gold_labelled(train, _labels(train, spec))
    train_labels = y_train if y_train is not None else np.zeros(len(train))
    private_idx = sample_rows(train_labels, rng, per_class=cfg.k_shot, total=cfg.n_train,
                              what=f"{spec.name} train")
    val_idx = sample_rows(train_labels, rng, per_class=cfg.val_k_shot or None, total=cfg.n_val or None,
                          taken=private_idx, what=f"{spec.name} validation")
    test = _test_sample(cfg, spec, _gold_labelled(test, _labels(test, spec))[0], rng)
    public = _public_split(cfg, spec, train, train_labels, np.concatenate([private_idx, val_idx]), rng)
    if spec.generation:
        encode = _squad_encoder(tokenizer, cfg.max_length)
    else:
        encode = _classification_encoder(tokenizer, spec, kind, cfg.max_length)
    info = _bundle_info(cfg, spec, kind)
    val = train.select(val_idx) if len(val_idx) else None
    return DataBundle(name=spec.name, private=encode(train.select(private_idx)), public=encode(public),
                      test=encode(test), val=encode(val) if val is not None else None,
                      num_classes=1 if spec.generation else len(spec.classes),
                      input_shape=(cfg.max_length,), info=info)


def _refuse_sizes(cfg, spec: TaskSpec, kind: str) -> None:
    """The settings a prompted task cannot run with, refused before any data is read."""
    if spec.generation and kind != "causal":
        raise ConfigError(f"task {spec.name} is answered by generation: use model=hf_causal_lm")
    if cfg.k_shot is not None and cfg.n_train is not None:
        raise ConfigError("set dataset.k_shot (examples per class) or dataset.n_train (in all), not both")
    if cfg.k_shot is None and cfg.n_train is None:
        raise ConfigError("set dataset.k_shot (examples per class) or dataset.n_train (examples in all)")


def _gold_labelled(ds, labels: np.ndarray | None):
    """(rows, labels) without the rows that have no gold label (GLUE / SNLI mark them -1)."""
    if labels is not None and (labels < 0).any():
        keep = np.flatnonzero(labels >= 0)
        return ds.select(keep), labels[keep]
    return ds, labels


def _test_sample(cfg, spec: TaskSpec, test, rng: np.random.Generator):
    """The test split, or `dataset.test_size` of its rows drawn at random (in their order)."""
    if cfg.test_size is None:
        return test
    if cfg.test_size > len(test):
        raise ConfigError(f"asked for {cfg.test_size} test examples but split {spec.test_split!r} holds "
                          f"{len(test)}")
    return test.select(np.sort(rng.choice(len(test), size=cfg.test_size, replace=False)))


def _public_split(cfg, spec: TaskSpec, train, train_labels: np.ndarray, taken: np.ndarray,
                  rng: np.random.Generator):
    """The public rows `dataset.public_source` names: none, train rows outside the private and
    validation ones (split), or a folder's (folder)."""
    source = cfg.public_source
    if source == "split":
        return train.select(sample_rows(train_labels, rng, per_class=cfg.public_per_class,
                                        total=cfg.public_size, taken=taken, what=f"{spec.name} public"))
    if source == "folder":
        return _public_folder_rows(cfg, spec, rng)
    if source == "none":
        return train.select([])
    raise ConfigError(f"dataset.public_source must be none, split or folder, got {source!r}")


def _public_folder_rows(cfg, spec: TaskSpec, rng: np.random.Generator):
    """The public folder's labelled rows (labels checked against the task's classes), sampled when
    `dataset.public_per_class` or `dataset.public_size` asks."""
    pool = _public_pool(cfg, spec)
    y_pool = _labels(pool, spec)
    if y_pool is not None:
        pool = pool.select(np.flatnonzero(y_pool >= 0))
        y_pool = y_pool[y_pool >= 0]
        if y_pool.max(initial=0) >= len(spec.classes):
            raise ConfigError(f"public labels go up to {y_pool.max()} but task {spec.name} has "
                              f"{len(spec.classes)} classes")
    if cfg.public_per_class is not None or cfg.public_size is not None:
        pool = pool.select(sample_rows(y_pool if y_pool is not None else np.zeros(len(pool)), rng,
                                       per_class=cfg.public_per_class, total=cfg.public_size,
                                       what="public"))
    return pool


def _bundle_info(cfg, spec: TaskSpec, kind: str) -> dict:
    """What the run's summary records of the data: the task, its template, sizes and sources."""
    source = cfg.public_source
    info = {"task": spec.name, "template": kind, "max_length": cfg.max_length,
            "data_seed": cfg.data_seed, "public_source": source,
            **{k: getattr(cfg, k) for k in ("k_shot", "n_train", "val_k_shot", "n_val", "test_size",
                                       "public_per_class", "public_size") if getattr(cfg, k) is not None}}
    if source == "folder":
        info["public"] = str(cfg.public_folder)
    if spec.generation:
        info["metric"] = "f1 (test_accuracy holds the F1; test_exact_match beside it)"
        info["outside_guarantee"] = ["a private answer too long for max_length ends the run before training, "
                                     "with its length in the error"]
    else:
        info["label_words"] = dict(zip(spec.classes, resolve_label_words(spec.name, kind, cfg.label_words)))
    return info


def _classification_encoder(tokenizer, spec: TaskSpec, kind: str, max_length: int):
    pad = pad_token_id(tokenizer) if kind == "causal" else tokenizer.pad_token_id
    trim = TrimRightPadding(pad)

    def encode(ds) -> TensorSplit:
        texts = zip(*(ds[c] for c in spec.columns)) if len(ds) else []
        if kind == "causal":
            rows = [encode_causal(tokenizer, spec.causal(*t), max_length) for t in texts]
        else:
            rows = [encode_masked(tokenizer, spec.masked(*t), max_length) for t in texts]
        return TensorSplit(pad_rows(rows, pad), torch.as_tensor(np.asarray(ds[spec.label_column], dtype=np.int64)),
                           trim)
    return encode


def encode_squad_example(tokenizer, title: str, context: str, question: str, answer: str,
                         max_length: int) -> tuple[list[int], int]:
    """(ids of prompt + ` answer\\n`, prompt length); the prompt loses tokens from its front to fit."""
    target = tokenizer.encode(" " + answer + "\n", add_special_tokens=False)
    if len(target) >= max_length:
        raise ConfigError(f"an answer of {len(target)} tokens does not fit in max_length {max_length}")
    prompt = encode_causal(tokenizer, squad_prompt(title, context, question), max_length - len(target))
    return prompt + target, len(prompt)


def _squad_encoder(tokenizer, max_length: int):
    pad = pad_token_id(tokenizer)
    trim = TrimRightPadding(pad)

    def encode(ds) -> GenerationSplit:
        rows, lengths, answers = [], [], []
        for title, context, question, ans in zip(ds["title"], ds["context"], ds["question"], ds["answers"]):
            golds = list(ans["text"])
            if not golds:
                raise ConfigError("a SQuAD example has no gold answer (SQuAD v2's unanswerable questions are "
                                  "not supported)")
            ids, n_prompt = encode_squad_example(tokenizer, title, context, question, golds[0], max_length)
            rows.append(ids)
            lengths.append(n_prompt)
            answers.append(golds)
        ids = pad_rows(rows, pad)
        mask = torch.zeros_like(ids)
        for i, (row, n_prompt) in enumerate(zip(rows, lengths)):
            mask[i, n_prompt:len(row)] = 1
        return GenerationSplit(torch.stack([ids, mask], dim=1), answers, torch.tensor(lengths), trim)
    return encode
