"""The typed schema of a run's config: every key of every config group with its type and range,
checked before any data are read (`check_config_values`), so that a value of the wrong type or
out of range is one `pazo: error:` line, never a traceback deep in the run nor a silent run.

Types are checked by OmegaConf (the config is merged into the dataclasses below: `seed=abc`,
`privacy.secure_mode=maybe` and a key no schema names are refused); ranges by each dataclass's
`__post_init__`. The method group has its own schemas (`pazo/methods/`, one per method, also
Hydra's), the audit section its own (`pazo/audit/run.py`). What spans groups (a model that does
not read a data set, delta against the noise) stays in `pazo/run/validate.py`.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, InterpolationResolutionError, MissingMandatoryValue, OmegaConfBaseException

from pazo.catalog import DATASETS, MODELS
from pazo.errors import ConfigError, at_least_one, one_of, positive, require, unknown_key
from pazo.registry import UnknownNameError
from pazo.threads import valid_threads



def integer_at_least(value, low: int, what: str) -> None:
    require(isinstance(value, int) and not isinstance(value, bool) and value >= low,
            f"{what} must be an integer >= {low}, got {value!r}")


def fraction(value, what: str, *, low_open: bool = True, high_open: bool = True) -> None:
    """`value` in (0, 1), [0, 1), (0, 1] ... as the flags say."""
    ok = isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (value > 0 if low_open else value >= 0) and (value < 1 if high_open else value <= 1)
    require(ok, f"{what} must be in {'(' if low_open else '['}0, 1{')' if high_open else ']'}, got {value!r}")


def optional(check, value, *args, **kwargs) -> None:
    if value is not None:
        check(value, *args, **kwargs)


# ---------------------------------------------------------------------------- top level

DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?|mps")


@dataclass
class TrainSchema:
    epochs: float = 30
    steps: int | None = None
    batch_size: int = 64
    evals_per_epoch: float | None = 4
    eval_batch_size: int = 1024
    log_every: int = 10
    checkpoint_every: int | None = None
    checkpoint_minutes: float = 10
    keep_checkpoint: bool = False
    save_model: bool = True
    progress_seconds: float = 60
    threads: Any = "auto"   # auto or an integer >= 1 (pazo.threads)
    distributed_timeout_s: float = 300   # under torchrun: the wait for the other ranks (pazo.run.distributed)

    def __post_init__(self):
        require(valid_threads(self.threads), f"train.threads must be auto or an integer >= 1, got {self.threads!r}")
        positive(self.epochs, "train.epochs")
        optional(at_least_one, self.steps, "train.steps")
        at_least_one(self.batch_size, "train.batch_size")
        if self.evals_per_epoch is not None:
            require(self.evals_per_epoch >= 0, f"train.evals_per_epoch must be >= 0, got {self.evals_per_epoch!r}")
        at_least_one(self.eval_batch_size, "train.eval_batch_size")
        at_least_one(self.log_every, "train.log_every")
        optional(at_least_one, self.checkpoint_every, "train.checkpoint_every")
        positive(self.checkpoint_minutes, "train.checkpoint_minutes")
        require(self.progress_seconds >= 0, f"train.progress_seconds must be >= 0, got {self.progress_seconds!r}")
        positive(self.distributed_timeout_s, "train.distributed_timeout_s")


@dataclass
class WarmStartSchema:
    epochs: int = 0
    lr: float = 0.1
    batch_size: int = 64
    cache: bool = True

    def __post_init__(self):
        integer_at_least(self.epochs, 0, "warm_start.epochs")
        positive(self.lr, "warm_start.lr")
        at_least_one(self.batch_size, "warm_start.batch_size")


@dataclass
class EngineSchema:
    name: str = "auto"
    chunk_size: int | None = None
    query_dropout: bool = False

    def __post_init__(self):
        optional(at_least_one, self.chunk_size, "engine.chunk_size")


#: step-size schedules (`schedule=`) and optimisers (`optimizer=`) of every method (pazo.methods.update_rule)
SCHEDULES = ("constant", "warmup", "cosine", "step", "inv_sqrt")
OPTIMIZERS = ("sgd", "momentum", "adam")


@dataclass
class ScheduleSchema:
    name: str = "constant"
    warmup_steps: int = 0
    decay_every: int = 1000
    gamma: float = 0.1
    final: float = 0.0

    def __post_init__(self):
        one_of(self.name, SCHEDULES, "schedule.name")
        integer_at_least(self.warmup_steps, 0, "schedule.warmup_steps")
        require(self.name != "warmup" or self.warmup_steps >= 1,
                f"schedule.warmup_steps must be >= 1 for schedule=warmup, got {self.warmup_steps!r}")
        at_least_one(self.decay_every, "schedule.decay_every")
        fraction(self.gamma, "schedule.gamma", high_open=False)
        fraction(self.final, "schedule.final", low_open=False, high_open=False)


@dataclass
class OptimizerSchema:
    name: str = "sgd"
    beta: float = 0.9
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self):
        one_of(self.name, OPTIMIZERS, "optimizer.name")
        for key in ("beta", "beta1", "beta2"):
            fraction(getattr(self, key), f"optimizer.{key}", low_open=False)
        positive(self.eps, "optimizer.eps")


@dataclass
class PrivacySchema:
    epsilon: float | None = 1.0
    delta: float | None = None
    sigma: float | None = None
    adjacency: str = "add_remove"
    sampling: str = "poisson"
    eps_error: float | None = None
    secure_mode: bool = False
    cache_dir: str | None = None
    accountant: str = "prv"

    def __post_init__(self):
        one_of(self.accountant, ("prv", "rdp", "pld"), "privacy.accountant")
        optional(positive, self.epsilon, "privacy.epsilon")
        optional(positive, self.sigma, "privacy.sigma")
        optional(positive, self.eps_error, "privacy.eps_error")
        one_of(self.adjacency, ("add_remove", "replace_one"), "privacy.adjacency")


#: the loggers a run's rows may be mirrored to (`logger.report_to`; `pazo.run.loggers` writes all but W&B)
LOGGERS = ("wandb", "tensorboard", "csv")


@dataclass
class LoggerSchema:
    mode: str = "offline"
    project: str = "pazo"
    entity: str | None = None
    group: str | None = None
    name: str | None = None
    tags: list[str] = field(default_factory=list)
    verbose: bool = False
    private_diagnostics: bool = False
    report_to: list[str] = field(default_factory=lambda: ["wandb"])

    def __post_init__(self):
        one_of(self.mode, ("offline", "online", "disabled"), "logger.mode")
        for name in self.report_to:
            require(name in LOGGERS, f"unknown logger {name!r} in logger.report_to; choices: {', '.join(LOGGERS)}")
        twice = sorted({name for name in self.report_to if list(self.report_to).count(name) > 1})
        require(not twice, f"logger.report_to names {', '.join(twice)} more than once")


@dataclass
class TopSchema:
    seed: int = 0
    device: str = "auto"
    sweep_name: str = "default"

    def __post_init__(self):
        integer_at_least(self.seed, 0, "seed")
        require(self.seed < 2 ** 63, f"seed must be below 2**63, got {self.seed!r}")
        require(DEVICE.fullmatch(self.device) is not None,
                f"unknown device {self.device!r}; choices: auto, cpu, cuda, cuda:N, mps")


# ---------------------------------------------------------------------------- data sets

@dataclass
class DatasetSchema:
    """What several data sets share; each adds its own keys."""
    name: str = ""
    val_fraction: float = 0.1

    def __post_init__(self):
        fraction(self.val_fraction, "dataset.val_fraction", low_open=False)
        for key in ("image_size", "n_train", "n_val", "public_size", "public_per_class", "k_shot", "test_size",
                    "max_length", "premise_limit", "vocab_size", "max_new_tokens"):
            optional(at_least_one, getattr(self, key, None), f"dataset.{key}")
        for key in ("public_fraction", "test_fraction"):
            optional(fraction, getattr(self, key, None), f"dataset.{key}")
        if getattr(self, "public_imbalance", None) is not None:
            fraction(self.public_imbalance, "dataset.public_imbalance", low_open=False)
        if getattr(self, "val_k_shot", None) is not None:
            integer_at_least(self.val_k_shot, 0, "dataset.val_k_shot")


@dataclass
class DigitsSchema(DatasetSchema):
    test_fraction: float = 0.2
    public_fraction: float = 0.1
    public_imbalance: float = 0.5


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
class Cifar10Schema(ImageSetSchema):
    download: bool = False
    public_fraction: float = 0.04


@dataclass
class TinyImagenetSchema(ImageSetSchema):
    download: bool = False


@dataclass
class ImageFolderSchema(ImageSetSchema):
    normalize: bool = True
    public_fraction: float = 0.04


@dataclass
class TorchvisionSchema(ImageFolderSchema):
    torchvision_name: str = "MNIST"
    download: bool = False
    train_split: str = "train"
    test_split: str = "test"
    torchvision_kwargs: dict[str, Any] = field(default_factory=dict)


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


# ---------------------------------------------------------------------------- models

def dropout_rate(value, what: str) -> None:
    fraction(value, what, low_open=False)


@dataclass
class SmallCnnSchema:
    name: str = "small_cnn"
    width: int = 16
    dropout: float = 0.0

    def __post_init__(self):
        at_least_one(self.width, "model.width")
        dropout_rate(self.dropout, "model.dropout")


@dataclass
class LstmSchema:
    name: str = "lstm"
    vocab_size: int = 10000
    embed: int = 128
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.2

    def __post_init__(self):
        for key in ("vocab_size", "embed", "hidden", "layers"):
            at_least_one(getattr(self, key), f"model.{key}")
        dropout_rate(self.dropout, "model.dropout")


@dataclass
class NfResnetSchema:
    name: str = "nf_resnet18"
    width: int = 64
    stem: str = "auto"
    alpha: float = 0.2
    beta: float = 1.0

    def __post_init__(self):
        at_least_one(self.width, "model.width")
        one_of(self.stem, ("auto", "cifar", "imagenet"), "model.stem")
        positive(self.alpha, "model.alpha")
        positive(self.beta, "model.beta")


@dataclass
class VitSchema:
    name: str = "vit"
    variant: str = "vit_tiny_patch16_224"
    pretrained: bool = False
    checkpoint: str | None = None
    attention: str = "eager"
    patch_size: int | None = None
    depth: int | None = None
    embed_dim: int | None = None
    num_heads: int | None = None

    def __post_init__(self):
        one_of(self.attention, ("eager", "fused"), "model.attention")
        for key in ("patch_size", "depth", "embed_dim", "num_heads"):
            optional(at_least_one, getattr(self, key), f"model.{key}")


@dataclass
class RobertaPromptSchema:
    name: str = "roberta_prompt"
    path: str = ""
    download: bool = False
    label_words: list[str] | None = None
    dropout: float | None = None

    def __post_init__(self):
        optional(dropout_rate, self.dropout, "model.dropout")


@dataclass
class LoraSchema:
    enabled: bool = False
    rank: int = 8
    alpha: float = 16
    dropout: float = 0.0
    target_modules: list[str] | None = None

    def __post_init__(self):
        at_least_one(self.rank, "model.lora.rank")
        positive(self.alpha, "model.lora.alpha")
        dropout_rate(self.dropout, "model.lora.dropout")


@dataclass
class HfLmSchema:
    name: str = ""
    path: str = ""
    download: bool = False
    random_init: bool = False
    dtype: str = "float32"
    attention: str = "sdpa"
    device_map: Any = None
    dropout: float | None = None
    lora: LoraSchema = field(default_factory=LoraSchema)
    task: str | None = None
    label_words: list[str] | None = None

    def __post_init__(self):
        one_of(self.dtype, ("float32", "float16", "bfloat16"), "model.dtype")
        one_of(self.attention, ("sdpa", "eager"), "model.attention")
        optional(dropout_rate, self.dropout, "model.dropout")


@dataclass
class HfCausalLmSchema(HfLmSchema):
    stop: str = "\n"
    max_new_tokens: int = 50

    def __post_init__(self):
        super().__post_init__()
        at_least_one(self.max_new_tokens, "model.max_new_tokens")


#: the groups whose schema is their option's: `dataset.name` / `model.name` -> the registration's schema
#: (`pazo.catalog`; pazo's own are registered in `pazo.data` and `pazo.models`, a plugin's in its module)
NAMED_GROUPS = {"dataset": DATASETS, "model": MODELS}

#: config section -> its schema (dataset and model: by their `name`)
SECTIONS = {"train": TrainSchema, "warm_start": WarmStartSchema, "engine": EngineSchema, "privacy": PrivacySchema,
            "logger": LoggerSchema, "schedule": ScheduleSchema, "optimizer": OptimizerSchema}
#: sections that have their own schemas elsewhere (method: pazo/methods/, audit: pazo/audit/run.py)
CHECKED_ELSEWHERE = ("method", "audit", "dataset", "model", "hydra")


#: sections already found good, by their values: a sweep checks thousands of runs that share them
_CHECKED: dict[tuple[type, str], None] = {}


def typed(schema: type, values: dict, where: str, scope: str | None = None) -> None:
    """Check `values` against `schema`: a value of the wrong type, a key the schema lacks or one
    out of range is one ConfigError naming the full key."""
    memo = (schema, json.dumps(values, sort_keys=True, default=repr))
    if memo in _CHECKED:
        return
    for f in fields(schema):  # OmegaConf reads 2, "yes" or "on" as true: a switch takes true or false only
        value = values.get(f.name) if isinstance(values, dict) else None
        if f.type in ("bool", bool, "bool | None") and value is not None and not isinstance(value, bool) \
                and not (isinstance(value, str) and "${" in value):
            key = f"{where}.{f.name}" if where else f.name
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        if f.type in NUMBER_TYPES and isinstance(value, str) and "${" not in value:
            kind = "an integer" if f.type in ("int", "int | None", int) else "a number"
            raise ConfigError(string_for_number(f"{where}.{f.name}" if where else f.name, value, kind))
    try:
        OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))
        _CHECKED[memo] = None
        return
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None)
        key = f"{where}.{key}" if where and key else (key or where)
        message = str(err).splitlines()[0]
        if isinstance(err, ConfigKeyError):
            raise ConfigError(unknown_key(key, [f.name for f in fields(schema)], where=scope)) from None
        raise ConfigError(_type_message(key, message)) from None


#: a field that takes a number: OmegaConf would turn the string '1' into 1.0 in the typed copy while
#: the run reads the string, so a quoted number is refused by name instead
NUMBER_TYPES = ("int", "float", "int | None", "float | None", int, float)


def string_for_number(key: str, value: str, kind: str = "a number") -> str:
    """A number given as a string (`privacy.epsilon='1'`): say it is a string, and how to write it."""
    try:
        float(value)
    except ValueError:
        return f"{key} must be {kind}, got the string {value!r}"
    return f"{key} must be {kind}, got the string {value!r} (quoted): write {key}={value} without quotes"


def _type_message(key: str, message: str) -> str:
    """OmegaConf's type error as the schema's other messages read: `<key> must be ..., got ...`."""
    converted = re.match(r"Value '(.*)' of type '\w+' could not be converted to (Integer|Float)", message)
    if converted:
        kind = "an integer" if converted.group(2) == "Integer" else "a number"
        return f"{key} must be {kind}, got {converted.group(1)!r}"
    boolean = re.match(r"Value '(.*)' is not a valid bool", message)
    if boolean:
        return f"{key} must be true or false, got {boolean.group(1)!r}"
    container = re.search(r"is not a (ListConfig|DictConfig)", message)
    if container:
        return f"{key} must be a {'list' if container.group(1) == 'ListConfig' else 'mapping'}"
    return f"{key}: {message}"


def resolvable(node) -> Any:
    """A DictConfig as plain containers, its interpolations resolved; a value whose interpolation
    cannot be resolved (e.g. `dataset.tokenizer: ${model.path}` with a model that has no path) is
    left out, for its schema's default to stand in: the cross-group checks refuse such a pairing."""
    if isinstance(node, DictConfig):
        out = {}
        for key in node:
            try:
                value = node[key]
            except (InterpolationResolutionError, MissingMandatoryValue):
                continue
            out[key] = resolvable(value)
        return out
    if isinstance(node, ListConfig):
        return OmegaConf.to_container(node, resolve=True)
    return node


def _plain(value):
    """Dicts (or subclasses of dict, such as the sweep's attribute views) as plain dicts."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def check_config_values(cfg) -> None:
    """Type and range of every key of a composed run config (train, audit or benchmark), before
    any data are read: one ConfigError for the first bad value."""
    data = check_section_values(cfg)
    for group, registry in NAMED_GROUPS.items():
        values = data.get(group)
        if isinstance(values, dict):   # an unregistered name is refused, not left unchecked
            try:
                schema = registry.get(values.get("name")).schema
            except UnknownNameError as err:
                raise ConfigError(str(err)) from None
            typed(schema, values, group)


def check_section_values(cfg) -> dict:
    """`check_config_values` of the top level and the `SECTIONS`, which need no registry (the
    refusals said before torch loads, `pazo.run.cli.refusal_before_torch`); the config as plain
    containers, resolved."""
    data = resolvable(cfg) if isinstance(cfg, DictConfig) else _plain(cfg)
    top = {k: v for k, v in data.items() if k not in SECTIONS and k not in CHECKED_ELSEWHERE}
    typed(TopSchema, top, "")
    for name, schema in SECTIONS.items():
        if name in data:
            typed(schema, data[name] or {}, name)
    return data


def typed_values(cfg, extra: dict[str, type] | None = None) -> dict:
    """The resolved config as plain containers, each value a schema names cast to that schema's
    type (`privacy.epsilon=1` reads 1.0, as the run uses it), every other key as it is: two
    spellings of one config are one config. `extra`: schemas of sections kept elsewhere, e.g.
    `{"method": <the method's registered config class>}`. A section that does not fit its schema
    is left as it is (validation says why)."""
    data = resolvable(cfg) if isinstance(cfg, DictConfig) else _plain(cfg)
    schemas = {name: schema for name, schema in SECTIONS.items()}
    for group, registry in NAMED_GROUPS.items():
        values = data.get(group)
        if isinstance(values, dict) and values.get("name") in registry:
            schemas[group] = registry.get(values["name"]).schema
    schemas.update(extra or {})
    top = {k: v for k, v in data.items() if k not in SECTIONS and k not in CHECKED_ELSEWHERE}
    out = {**data, **_cast(TopSchema, top)}
    for name, schema in schemas.items():
        if isinstance(data.get(name), dict):
            out[name] = _cast(schema, data[name])
    return out


def _cast(schema: type, values: dict) -> dict:
    """`values` with each key `schema` has cast to its type (the others, and all of them where the
    schema refuses the values, as they are)."""
    named = {f.name for f in fields(schema)}
    try:
        merged = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(schema),
                                                        {k: v for k, v in values.items() if k in named}),
                                        resolve=True)
    except (OmegaConfBaseException, ValueError, TypeError):
        return values
    return {k: merged[k] if k in named else v for k, v in values.items()}
