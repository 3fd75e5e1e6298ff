"""Methods by name, with their facts, and the one way to build a method for a run.

`@register_method(...)` records a method's class, typed config and facts (label, zeroth- or
first-order, uses public data, private, paper reference) and registers the config as the Hydra
schema of `configs/method/<name>.yaml`. The training loop, the benchmark, the tables, the figures
and the tests all read the facts from here."""
from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from pazo.errors import ConfigError, unknown_key
from pazo.methods.base import Method, MethodConfig, MethodContext
from pazo.privacy.plan import PrivacyPlan
from pazo.registry import Registry
from pazo.rng import RandomStreams


@dataclass(frozen=True)
class MethodInfo:
    name: str
    cls: type[Method]
    config: type[MethodConfig]
    label: str                 # as in the paper's tables
    family: str                # "zeroth_order" | "first_order"
    uses_public: bool          # needs the public split (checked before compute)
    private: bool              # False: runs only with privacy=none (MeZO, SGD)
    reference: str             # where the algorithm is defined
    privacy_note: str | None = None  # what the printed epsilon means, where it needs saying

    @property
    def zeroth_order(self) -> bool:
        return self.family == "zeroth_order"


METHODS: Registry[MethodInfo] = Registry("method")


def register_method(name: str, *, config: type[MethodConfig], label: str, family: str, reference: str,
                    uses_public: bool = False, private: bool = True, privacy_note: str | None = None):
    """Class decorator: register a method under `name` with its facts and config schema."""
    if family not in ("zeroth_order", "first_order"):
        raise ValueError(f"family must be zeroth_order or first_order, got {family!r}")

    def add(cls: type[Method]) -> type[Method]:
        METHODS.register(name)(MethodInfo(name, cls, config, label, family, uses_public, private, reference,
                                          privacy_note))
        ConfigStore.instance().store(group="method", name=f"{name}_schema", node=config)
        return cls
    return add


def method_info(name: str) -> MethodInfo:
    return METHODS.get(name)


def method_names(family: str | None = None) -> list[str]:
    """Names in registration order (the order of the paper's tables), optionally one family."""
    return [n for n, info in METHODS.items() if family is None or info.family == family]


def method_config(cfg) -> MethodConfig:
    """The typed, validated config of a method from a DictConfig or dict with a `name` (missing
    fields take the config class's defaults); a bad value is one ConfigError."""
    if isinstance(cfg, MethodConfig):
        return cfg
    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    info = method_info(data.get("name"))
    key = json.dumps(data, sort_keys=True, default=repr)
    if key not in _TYPED:
        try:
            typed = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(info.config), data))
        except ConfigKeyError as err:
            fields = [f.name for f in dataclasses.fields(info.config)]
            raise ConfigError(unknown_key(f"method.{err.key}", fields, getattr(info.config, "ALIASES", {}),
                                          where=f"method {info.name}")) from None
        except OmegaConfBaseException as err:
            msg = str(err).splitlines()[0]
            raise ConfigError(f"method {info.name}: {msg}") from None
        if len(_TYPED) >= 4096:
            _TYPED.clear()
        _TYPED[key] = typed
    return copy.copy(_TYPED[key])


#: typed method configs by their values: a sweep's check types thousands of runs' configs that share a
#: few method settings, and OmegaConf's merge takes about 17 ms each
_TYPED: dict[str, MethodConfig] = {}


def build_method(cfg, *, model, plan: PrivacyPlan, streams: RandomStreams, public, device, engine,
                 query_train_mode: bool = False) -> Method:
    """The method of a run: typed config, the plan's noise for its clip, and its context."""
    config = method_config(cfg)
    info = method_info(config.name)
    ctx = MethodContext(model=model, noise=plan.noise_spec(config.clip), streams=streams, public=public,
                        engine=engine, device=device, query_train_mode=query_train_mode,
                        total_steps=plan.steps)
    return info.cls(config, ctx)
