"""Data sets and models by name, with their facts, as methods are (`pazo.methods.registry`).

A data set's registration (`@register_dataset`, in `pazo.data` or a plugin) binds its loader, its
typed config (the schema beside the loader: `dataset.*` is checked against it, and the loader is
handed the `dataset` section as an instance of it) and what it produces: the kind of input, and
where fixed its shape and number of classes, and whether it can give a public split. A model's
(`@register_model`, in `pazo.models` or a plugin) binds its builder, its schema (the builder is
handed the `model` section as an instance of it) and the kinds of input it accepts. Validation
pairs the two by these facts, not by names; each registration also stores its config in Hydra's
ConfigStore as `dataset=<name>` / `model=<name>` where there is no yaml of that name, so a new data
set or model needs no file but its module.

This module sits below `pazo.config_schema`, which reads the registries; the registrations and
their schemas sit above it, in `pazo.data` and `pazo.models`."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from pazo import CONFIG_DIR
from pazo.registry import Registry

#: what a data set's examples are, as a model's error message names them; a plugin may use a kind
#: of its own (its message then says "<kind> inputs")
INPUT_KINDS = {"image": "images", "tokens": "token ids", "features": "feature vectors",
               "mlm_prompt": "a prompt task", "lm_prompt": "a prompted task",
               "lm_generation": "a prompted task answered by generation"}


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    load: Callable            # (typed section, streams) -> DataBundle, before the validation split is carved
    schema: type              # the typed config of `dataset.*`
    produces: str             # the kind of input (INPUT_KINDS)
    input_shape: tuple | None = None   # one example's shape, where the data set fixes it
    classes: int | None = None         # where the data set fixes it
    public_split: bool = True          # whether it can give a public split (methods with public data)

    def __call__(self, cfg, streams):
        return self.load(cfg, streams)


@dataclass(frozen=True)
class ModelInfo:
    name: str
    build: Callable           # (typed section, input_shape, num_classes) -> nn.Module
    schema: type              # the typed config of `model.*`
    accepts: tuple[str, ...]  # the kinds of input it reads (INPUT_KINDS)

    def __call__(self, cfg, input_shape, num_classes):
        return self.build(cfg, input_shape, num_classes)


DATASETS: Registry[DatasetInfo] = Registry("dataset")
MODELS: Registry[ModelInfo] = Registry("model")


def _store(group: str, name: str, schema: type) -> None:
    """`group=<name>` from the ConfigStore: the schema's defaults, where configs/ has no yaml of that
    name (Hydra would otherwise match the two up)."""
    if (CONFIG_DIR / group / f"{name}.yaml").exists():
        return
    node = OmegaConf.structured(schema)
    node.name = name
    ConfigStore.instance().store(group=group, name=name, node=node)


def register_dataset(name: str, *, schema: type, produces: str, input_shape: tuple | None = None,
                     classes: int | None = None, public_split: bool = True):
    """Decorator of a loader `(cfg, streams) -> DataBundle`: register it under `name` with its facts."""
    def add(load: Callable) -> Callable:
        info = DatasetInfo(name, load, schema, produces, tuple(input_shape) if input_shape else None, classes,
                           public_split)
        DATASETS.register(name, origin=load.__module__)(info)
        _store("dataset", name, schema)
        return load
    return add


def register_model(name: str, *, schema: type, accepts: tuple[str, ...] | str):
    """Decorator of a builder `(cfg, input_shape, num_classes) -> nn.Module`: register it under `name`
    with its schema and the kinds of input it accepts."""
    accepts = (accepts,) if isinstance(accepts, str) else tuple(accepts)

    def add(build: Callable) -> Callable:
        MODELS.register(name, origin=build.__module__)(ModelInfo(name, build, schema, accepts))
        _store("model", name, schema)
        return build
    return add


def input_phrase(kind: str) -> str:
    return INPUT_KINDS.get(kind, f"{kind} inputs")


def pairing_problem(dataset: str, model: str) -> str | None:
    """Why model `model` cannot read data set `dataset` (its input kind is not one the model
    accepts), naming the models that can; None when it can. Both names registered."""
    produces = DATASETS.get(dataset).produces
    if produces in MODELS.get(model).accepts:
        return None
    able = [n for n, info in MODELS.items() if produces in info.accepts]
    reads = " or ".join(input_phrase(kind) for kind in MODELS.get(model).accepts)
    return (f"dataset={dataset} is {input_phrase(produces)} for model={' or '.join(able) or '(none registered)'}, "
            f"not model={model} (which reads {reads})")
