"""Methods by name, with their facts, and the one way to build a method for a run.

`@register_method(...)` records a method's class, typed config and facts (label, zeroth- or
first-order, uses public data, private, paper reference; what a step costs: its private forwards
and public passes; what it releases: the kind of privatiser the audit's white box hooks; the grid
a sweep runs where a setting's grid file does not name it) and stores the config in Hydra's
ConfigStore twice: as `method=<name>` (a method needs no yaml) and as `<name>_schema`, the schema
of `configs/method/<name>.yaml`. The training loop, the benchmark, the audit, the tables, the
figures, the generated docs and the tests all read the facts from here; a plugin's method
(`pazo.plugins`) registers with the same decorator."""
from __future__ import annotations

import copy
import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from pazo import CONFIG_DIR
from pazo.config_schema import OptimizerSchema, ScheduleSchema
from pazo.errors import ConfigError, unknown_key
from pazo.methods.base import Method, MethodConfig, MethodContext
from pazo.methods.update_rule import StepSchedule
from pazo.privacy.mechanisms import LOCAL_SUMS
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
    #: private no-grad forward passes of one step, from the typed config (zeroth-order: the
    #: benchmark's floor); None for a first-order method
    forwards: Callable[[MethodConfig], int] | None = None
    #: public forward-and-backward passes (of b' examples each) of one step, from the typed config
    public_passes: Callable[[MethodConfig], int] = field(default=lambda cfg: 0)
    #: what one step releases through `Method.privatizer` (RELEASES): what the audit's white box hooks
    release: str = "scalar"
    #: the sweep's grid for this method where a setting's grid file does not name it: (override key,
    #: values) pairs (none: one run at the method's defaults); pairs, so that the facts stay hashable
    sweeps: tuple[tuple[str, tuple], ...] = ()
    #: the two method keys (rows, columns) of its robustness heat map in the paper's figure 6
    #: (`pazo-report figures`); None: the method has none
    heat_map: tuple[str, str] | None = None

    @property
    def zeroth_order(self) -> bool:
        return self.family == "zeroth_order"

    @property
    def white_box(self) -> bool:
        """Whether the audit's white box can hook every release (one privatiser call per step)."""
        return self.release in WHITE_BOX_RELEASES


#: what a step releases: `scalar`, the noisy sum of clipped scalars of each query (ScalarPrivatizer);
#: `joint_scalar`, the q scalars of an example clipped together (JointClipPrivatizer); `vector`, the
#: noisy sum of clipped vectors (VectorPrivatizer); `other`, releases that do not pass through one
#: privatiser (GEP's two sums in a public subspace); `none`, a non-private method
RELEASES = ("scalar", "joint_scalar", "vector", "other", "none")
WHITE_BOX_RELEASES = ("scalar", "joint_scalar", "vector")


def two_point_forwards(cfg) -> int:
    """A two-point estimate's q queries: two forwards each."""
    return 2 * cfg.q


METHODS: Registry[MethodInfo] = Registry("method")


def register_method(name: str, *, config: type[MethodConfig], label: str, family: str, reference: str,
                    uses_public: bool = False, private: bool = True, privacy_note: str | None = None,
                    forwards: Callable[[MethodConfig], int] | None = None,
                    public_passes: Callable[[MethodConfig], int] | None = None, release: str | None = None,
                    sweeps: Mapping[str, list] | None = None, heat_map: tuple[str, str] | None = None):
    """Class decorator: register a method under `name` with its facts and config schema. Derived
    where not given: a zeroth-order method's forwards are a two-point estimate's (2q), its release
    `scalar`; a first-order method's release `vector`; a non-private method releases `none`."""
    if family not in ("zeroth_order", "first_order"):
        raise ValueError(f"family must be zeroth_order or first_order, got {family!r}")
    zeroth = family == "zeroth_order"
    release = release or ("none" if not private else "scalar" if zeroth else "vector")
    if release not in RELEASES:
        raise ValueError(f"release must be one of {', '.join(RELEASES)}, got {release!r}")
    if zeroth and forwards is None:
        forwards = two_point_forwards

    def add(cls: type[Method]) -> type[Method]:
        check_overrides(name, cls)
        info = MethodInfo(name, cls, config, label, family, uses_public, private, reference, privacy_note,
                          forwards=forwards if zeroth else None,
                          public_passes=public_passes or MethodInfo.public_passes,
                          release=release, sweeps=tuple((k, tuple(v)) for k, v in (sweeps or {}).items()),
                          heat_map=heat_map)
        METHODS.register(name, origin=cls.__module__)(info)
        store = ConfigStore.instance()
        store.store(group="method", name=f"{name}_schema", node=config)
        if not (CONFIG_DIR / "method" / f"{name}.yaml").exists():   # (Hydra would match the two up)
            node = OmegaConf.structured(config)
            node.name = name
            store.store(group="method", name=name, node=node)
        return cls
    return add


def check_overrides(name: str, cls: type) -> None:
    """Refuse, when `cls` registers, a method of `Method` it overrides (`step`, most often) that cannot
    take the call pazo makes: the base's positional arguments, with and without its optional ones.
    Otherwise the mismatch is a TypeError traceback at the first step, deep in the loop."""
    for attr, base in vars(Method).items():
        own = getattr(cls, attr, base)
        if attr.startswith("_") or not inspect.isfunction(base) or own is base or not inspect.isfunction(own):
            continue
        expected = inspect.signature(base)
        positional = [p for p in list(expected.parameters.values())[1:]
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = sum(p.default is p.empty for p in positional)
        try:
            for count in {required, len(positional)}:
                inspect.signature(own).bind(cls, *[None] * count)
        except TypeError:
            shown = ", ".join(expected.parameters)
            raise TypeError(f"method {name!r}: {cls.__module__}.{cls.__qualname__}.{attr}"
                            f"({', '.join(inspect.signature(own).parameters)}) cannot take pazo's call; "
                            f"it must accept {attr}({shown})") from None


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
            where = f"method.{err.full_key}" if getattr(err, "full_key", None) else f"method {info.name}"
            raise ConfigError(f"{where}: {msg}") from None
        if len(_TYPED) >= 4096:
            _TYPED.clear()
        _TYPED[key] = typed
    return copy.copy(_TYPED[key])


#: typed method configs by their values: a sweep's check types thousands of runs' configs that share a
#: few method settings, and OmegaConf's merge takes about 17 ms each
_TYPED: dict[str, MethodConfig] = {}


def build_method(cfg, *, model, plan: PrivacyPlan, streams: RandomStreams, public, device, engine,
                 query_train_mode: bool = False, schedule: ScheduleSchema | None = None,
                 optimizer: OptimizerSchema | None = None, sums=LOCAL_SUMS) -> Method:
    """The method of a run: typed config, the plan's noise for its clip, and its context; its step
    size follows the run's typed `schedule` section and its update the `optimizer` one (None:
    constant and sgd); its releases add their batch with `sums` (a data-parallel run's: over the ranks)."""
    config = method_config(cfg)
    info = method_info(config.name)
    ctx = MethodContext(model=model, noise=plan.noise_spec(config.clip), streams=streams, public=public,
                        engine=engine, device=device, query_train_mode=query_train_mode,
                        total_steps=plan.steps, schedule=StepSchedule.of(schedule, plan.steps),
                        optimizer=optimizer, sums=sums)
    return info.cls(config, ctx)
