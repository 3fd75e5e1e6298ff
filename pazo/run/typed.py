"""A run's config typed once, at the door of the command that runs or reads it (`RunConfig`):
each section its schema's dataclass, and the fingerprints hashed from its values cast to their
schema's types. Apart from the checks (`pazo.run.validate`), which a launch runs first: a finished
run's config, read back, and a sweep's settings are typed here without them."""
from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf

from pazo.config_schema import (SECTIONS, EngineSchema, LoggerSchema, OptimizerSchema, PrivacySchema, ScheduleSchema,
                                TopSchema, TrainSchema, WarmStartSchema, typed_values)
from pazo.data import DATASETS
from pazo.methods import METHODS, MethodConfig, method_config, method_info
from pazo.models import MODELS
from pazo.run.fingerprint import computation_fingerprint, config_fingerprint


def typed_config(cfg) -> dict:
    """The resolved config with every value its schema names cast to the schema's type (the
    method's by its registered config): what the fingerprints hash, so that `privacy.epsilon=1`
    and `privacy.epsilon=1.0` are one computation."""
    method = cfg.get("method") if hasattr(cfg, "get") else None
    name = method.get("name") if hasattr(method, "get") else None
    return typed_values(cfg, {"method": method_info(name).config} if name in METHODS else None)


@dataclass(frozen=True)
class RunConfig:
    """A run's config typed once, at the door of the command that runs or reads it: each section
    its schema's dataclass (`pazo.config_schema`; the data set's and the model's registered schemas,
    beside their loader and builder, which take these sections; the method's registered config);
    `raw` is the DictConfig it was made from (written once, as the run's config.yaml), `values` the
    resolved config with each value cast to its schema's type (`typed_config`), and its two
    fingerprints, hashed from `values` once: `fingerprint`, what a checkpoint resumes by
    (`pazo.run.fingerprint.config_fingerprint`), and `computation`, what keys the secret streams
    (`computation_fingerprint`)."""
    seed: int
    device: str
    dataset: object
    model: object
    method: MethodConfig
    train: TrainSchema
    privacy: PrivacySchema
    engine: EngineSchema
    warm_start: WarmStartSchema
    logger: LoggerSchema
    schedule: ScheduleSchema
    optimizer: OptimizerSchema
    raw: DictConfig = field(repr=False)
    values: dict = field(repr=False, default_factory=dict)
    fingerprint: str = field(repr=False, default="")
    computation: str = field(repr=False, default="")


def run_config(cfg: DictConfig) -> RunConfig:
    """`cfg` (checked: `validate_config`, or `check_config_values` for a run read back) as
    `RunConfig`, each section through its schema (a section absent from `cfg` at its defaults)."""
    data = OmegaConf.to_container(cfg, resolve=True)
    sections = {name: _typed(schema, data.get(name) or {}) for name, schema in SECTIONS.items()}
    sections["dataset"] = _typed(DATASETS.get(data["dataset"]["name"]).schema, data["dataset"])
    sections["model"] = _typed(MODELS.get(data["model"]["name"]).schema, data["model"])
    top = _typed(TopSchema, {k: data[k] for k in ("seed", "device", "sweep_name") if k in data})
    values = typed_config(cfg)
    return RunConfig(seed=top.seed, device=top.device, method=method_config(cfg.method), raw=cfg, values=values,
                     fingerprint=config_fingerprint(values), computation=computation_fingerprint(values), **sections)


def _typed(schema: type, values: dict):
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))
