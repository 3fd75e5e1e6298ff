"""The typed schema of a run's own sections (the top level, train, warm_start, engine, privacy,
logger, schedule, optimizer) and the checks every schema shares: every key of every config group
with its type and range, checked before any data are read (`check_config_values`), so that a value
of the wrong type or out of range is one `pazo: error:` line, never a traceback deep in the run nor
a silent run.

Types are checked by OmegaConf (the config is merged into the dataclasses: `seed=abc`,
`privacy.secure_mode=maybe` and a key no schema names are refused); ranges by each dataclass's
`__post_init__`. The other groups' schemas sit beside what they configure, found through their
registries: each data set's beside its loader (`pazo/data/`), each model's beside its builder
(`pazo/models/`), each method's beside the method (`pazo/methods/`); the audit section has its own
(`pazo/audit/run.py`). What spans groups (a model that does not read a data set, delta against the
noise) stays in `pazo/run/validate.py`.
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
from pazo.errors import ConfigError, at_least_one, one_of, positive, require, unknown_choice, unknown_key
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


def dropout_rate(value, what: str) -> None:
    fraction(value, what, low_open=False)


# ---------------------------------------------------------------------------- top level

DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?|mps")


#: the longest wait for the other ranks a run may ask for (torch's timeouts overflow far beyond it)
MAX_DISTRIBUTED_TIMEOUT_S = 7 * 24 * 3600


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
        require(self.distributed_timeout_s <= MAX_DISTRIBUTED_TIMEOUT_S, "train.distributed_timeout_s must be at most "
                f"{MAX_DISTRIBUTED_TIMEOUT_S:g} (a week), got {self.distributed_timeout_s!r}")


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


#: the zeroth-order engines (`engine.name`; pazo.zo.engines): here, so that a name is checked before torch loads
ENGINES = ("auto", "vectorised", "inplace")


@dataclass
class EngineSchema:
    name: str = "auto"
    chunk_size: int | None = None
    query_dropout: bool = False

    def __post_init__(self):
        require(self.name in ENGINES, unknown_choice("engine", self.name, ENGINES))
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
            one_of(name, LOGGERS, "logger.report_to name")
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
        kind = number_kind(f.type)
        if kind and isinstance(value, str) and "${" not in value:
            raise ConfigError(number_refusal(f"{where}.{f.name}" if where else f.name, value, kind))
    try:
        OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))
        _CHECKED[memo] = None
        return
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None)
        key = f"{where}.{key}" if where and key else (key or where)
        if isinstance(err, ConfigKeyError):
            raise ConfigError(unknown_key(key, [f.name for f in fields(schema)], where=scope)) from None
        raise ConfigError(type_problem(key, err)) from None


#: a field that takes a number: OmegaConf would turn the string '1' into 1.0 in the typed copy while
#: the run reads the string, so a quoted number is refused by name instead
NUMBER_TYPES = ("int", "float", "int | None", "float | None", int, float)


def number_kind(field_type) -> str | None:
    """What a field of type `field_type` takes, in words ("an integer", "a number"); None when it
    takes no number."""
    if field_type not in NUMBER_TYPES:
        return None
    return "an integer" if field_type in ("int", "int | None", int) else "a number"


def typed_words(value) -> str:
    """A value the command line's grammar read (Hydra's: `true`, `[1,2]`, `{a:1}`, `null`), said as
    the user typed it, with its kind: `the boolean true`, `the list [1,2]`, `the mapping {a:1}`,
    `null`, `the string 'abc'` (Python's `'True'` read as the string the user never typed)."""
    if isinstance(value, (DictConfig, ListConfig)):   # (as OmegaConf's refusal of a merge holds it)
        value = OmegaConf.to_container(value)
    kinds = ((bool, "the boolean "), (list, "the list "), (dict, "the mapping "), (str, "the string "))
    kind = next((words for python_type, words in kinds if isinstance(value, python_type)), "")
    return kind + (repr(value) if isinstance(value, str) else as_typed(value))


def as_typed(value) -> str:
    """`value` written in the command line's grammar (`true`, `null`, `[1,2]`, `{a:1}`)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(as_typed(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{as_typed(v)}" for k, v in value.items()) + "}"
    return str(value)


def number_refusal(key: str, value, kind: str = "a number") -> str:
    """`key` takes `kind` of number and was given `value`, which is none: what was typed, in words."""
    if isinstance(value, str):
        return string_for_number(key, value, kind)
    return f"{key} must be {kind}, got {typed_words(value)}"


def type_problem(key: str, err: OmegaConfBaseException) -> str:
    """OmegaConf's refusal `err` of a value for `key` in the schema's words (`type_message`); a
    number's field given no number (a boolean, a list, a mapping, null, a word) names what was typed
    (`got the boolean true`, not `got 'True'`)."""
    kind = number_kind(_field_type(err))
    value = getattr(err, "value", None)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind and not is_number:
        return number_refusal(key, value, kind)
    return type_message(key, str(err).splitlines()[0])


def _field_type(err: OmegaConfBaseException):
    """The declared type of the dataclass field `err` is about, or None where it names none."""
    schema, name = getattr(err, "object_type", None), str(getattr(err, "key", "") or "")
    if not isinstance(schema, type) or not hasattr(schema, "__dataclass_fields__"):
        return None
    return next((f.type for f in fields(schema) if f.name == name), None)


def string_for_number(key: str, value: str, kind: str = "a number") -> str:
    """A number given as a string (`privacy.epsilon='1'`): say it is a string, and how to write it."""
    try:
        float(value)
    except ValueError:
        return f"{key} must be {kind}, got the string {value!r}"
    return f"{key} must be {kind}, got the string {value!r} (quoted): write {key}={value} without quotes"


def type_message(key: str, message: str) -> str:
    """OmegaConf's type error as the schema's other messages read: `<key> must be ..., got ...`
    (also where Hydra merges a command line's value into a typed section: `method.lr=abc`)."""
    converted = re.match(r"Value '(.*)' of type '(\w+)' could not be converted to (Integer|Float)", message)
    if converted:
        kind = "an integer" if converted.group(3) == "Integer" else "a number"
        if converted.group(2) == "str":
            return string_for_number(key, converted.group(1), kind)
        if converted.group(2) in ("float", "int"):   # (a number, not of the kind: written as typed)
            return f"{key} must be {kind}, got {converted.group(1)}"
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
    check_named_sections(check_section_values(cfg))


def check_named_sections(data: dict) -> None:
    """The rest of `check_config_values`, on the config as `check_section_values` returns it: each
    named group's section (dataset, model, method) against its registered schema."""
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
