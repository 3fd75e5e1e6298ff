"""A sweep spec (`configs/sweeps/<name>.yaml`) and its grids (`configs/sweeps/grids/<setting>.yaml`):
read within their bounds (size, and YAML nodes counted as expanded), typed (`SpecSchema`), and
enumerated as the planned runs, one deterministic directory each (`PlannedRun.run_id`)."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pazo.config_schema import typed
from pazo.errors import ConfigError, unknown_choice
from pazo.files.file_kinds import read_regular_text

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "configs" / "sweeps"
SPEC_KEYS = {"name", "table", "settings", "methods", "nonprivate", "epsilons", "seeds", "extra", "entry", "grid",
             "skip_missing_data", "selection", "k"}
#: how a cell's configuration is chosen: grid (every configuration run, the tables pick one; the pick is
#: not accounted) or private (K random runs, the best released, its cost accounted: pazo.sweep.selection)
SELECTION_MODES = ("grid", "private")
#: the most runs a sweep enumerates unless `--max-runs` says more (each run is a folder and a process)
MAX_RUNS = 100_000
#: a sweep, grid or launcher file's bounds, checked before YAML expands its aliases: its size, and
#: its nodes counted as expanded (a "billion laughs" of nested aliases is a few lines)
MAX_SPEC_BYTES = 1_000_000
MAX_SPEC_NODES = 10_000
#: what a run is: `python -m pazo.<entry>`, and the config it composes
ENTRIES = {"train": "config", "audit": "audit"}


def fmt(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class PlannedRun:
    """One run a sweep plans (`enumerate_runs`): its setting, method, epsilon, seed and grid values,
    which `command` turns into a training (or audit) command. Not `pazo.run.build.Run`, the
    assembled run a training process is made of."""

    sweep: str
    setting: str
    experiment: str | None
    method: str
    epsilon: float | None          # None: non-private
    seed: int
    params: tuple[tuple[str, object], ...]
    replicate: int = 0             # the seed's place in the spec's seeds: names the run, the seed does not

    @property
    def run_id(self) -> str:
        """The run's directory below the sweep's, also its W&B name: never the seed (the
        seed_secret assumption keeps it in config.yaml), its place in the spec's seeds instead."""
        eps = "nonprivate" if self.epsilon is None else f"eps={fmt(self.epsilon)}"
        values = ",".join(f"{k.split('.')[-1]}={fmt(v)}" for k, v in self.params)
        last = f"{values},rep={self.replicate}" if values else f"rep={self.replicate}"
        return "/".join([self.setting, self.method, eps, last])

    def overrides(self) -> list[str]:
        """The config overrides of the run's command line (those the run's config.yaml records)."""
        out = [f"experiment={self.experiment}"] if self.experiment else [f"dataset={self.setting}"]
        out += [f"method={self.method}", f"seed={self.seed}", f"sweep_name={self.sweep}"]
        out += ["privacy=none"] if self.epsilon is None else [f"privacy.epsilon={fmt(self.epsilon)}"]
        return out + [f"{k}={fmt(v)}" for k, v in self.params]


def load_yaml(name_or_path: str, folder: Path, what: str) -> dict:
    """A sweep, grid or launcher file as a dict: a missing file, one that is not YAML or not a
    mapping, or one larger than its bounds (`check_yaml_size`) is one ConfigError naming it."""
    path = Path(name_or_path)
    if not path.suffix:
        path = folder / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ConfigError(f"unknown {what} {name_or_path!r} (no {path}); choices: {', '.join(known)}")
    try:
        text = read_regular_text(path)
    except OSError as err:
        raise ConfigError(f"{what} file {path} cannot be read ({err})") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{what} file {path} is not valid YAML ({type(err).__name__}: {err})") from None
    check_yaml_size(path, text, what)
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (yaml.YAMLError, OmegaConfBaseException, UnicodeDecodeError, ValueError) as err:
        first = " ".join(str(err).split())[:200]
        raise ConfigError(f"{what} file {path} is not valid YAML ({type(err).__name__}: {first})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} file {path} is not a mapping of settings (it holds a {type(data).__name__})")
    return data


def check_yaml_size(path: Path, text: str, what: str) -> None:
    """Refuse a file over MAX_SPEC_BYTES, or whose YAML expands to more than MAX_SPEC_NODES nodes,
    before anything expands it: its node graph (`yaml.compose`, where an alias is the node it
    names, not a copy) is counted with each alias counted whole."""
    if len(text) > MAX_SPEC_BYTES:
        raise ConfigError(f"{what} file {path} has {len(text):,} characters, more than a sweep's files may hold "
                          f"({MAX_SPEC_BYTES:,})")
    try:
        nodes = expanded_nodes(yaml.compose(text, Loader=yaml.SafeLoader), {}, MAX_SPEC_NODES)
    except RecursionError:   # (nested deeper than Python's stack: no spec is)
        nodes = None
    except yaml.YAMLError as err:
        first = " ".join(str(err).split())[:200]
        raise ConfigError(f"{what} file {path} is not valid YAML ({type(err).__name__}: {first})") from None
    if nodes is None or nodes > MAX_SPEC_NODES:
        raise ConfigError(f"{what} file {path} expands to more than {MAX_SPEC_NODES:,} YAML nodes (aliases "
                          "nested in aliases, or an alias inside itself); write its values out")


def expanded_nodes(node, memo: dict, limit: int) -> int | None:
    """How many nodes `node` stands for once every alias in it is copied out, at most `limit` + 1
    (counting stops there); None for a node inside itself, which never ends."""
    if node is None or isinstance(node, yaml.ScalarNode):
        return 1
    if id(node) in memo:
        return memo[id(node)]
    memo[id(node)] = None   # (in progress: reached again below, it contains itself)
    children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
    total = 1
    for child in children:
        count = expanded_nodes(child, memo, limit)
        if count is None:
            return None
        total = min(total + count, limit + 1)
    memo[id(node)] = total
    return total


def check_folder_name(value, what: str) -> None:
    """A spec's value that names a folder below `--out` (the sweep's name, a setting, a method): one
    plain name, never a path that would write elsewhere."""
    if not isinstance(value, str) or value.strip() in ("", ".", "..") or any(c in value for c in "/\\\0"):
        raise ConfigError(f"{what} {value!r} names a folder below --out: give a plain name (no '/' or '\\', "
                          "not '.' or '..')")


def check_axis(where: str, key: str, values) -> None:
    """A grid axis: a non-empty list of scalars, none naming a folder (each becomes `key=value` in
    its run's folder name and an override on its command line)."""
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{where}: {key} must be a non-empty list, got {values!r}"[:300])
    for value in values:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: {key} must list plain values (numbers, strings, true/false), "
                              f"got a {type(value).__name__} among them")
        if any(c in fmt(value) for c in "/\\\0"):
            raise ConfigError(f"{where}: {key} value {fmt(value)!r} would name a folder below --out; "
                              "give values without '/' or '\\'")


@dataclass
class SpecSchema:
    """A sweep spec's keys and their types (configs/sweeps/<name>.yaml)."""
    name: str = MISSING
    table: str | None = None
    settings: list[str] = MISSING
    methods: list[str] = MISSING
    nonprivate: list[str] = field(default_factory=list)
    epsilons: list[float] = MISSING
    seeds: list[int] = field(default_factory=lambda: [0])
    extra: dict[str, Any] = field(default_factory=dict)
    entry: str = "train"     # train: each run is `python -m pazo.train`; audit: `python -m pazo.audit`
    grid: bool = True        # false: each method at its own defaults (the setting is the data set)
    skip_missing_data: bool = False  # true: a setting whose data files are missing is left out, named with why
    selection: str = "grid"  # private: per cell and seed, K random runs and only the best released (accounted)
    k: dict[str, Any] = field(default_factory=dict)  # the distribution of K: {distribution, mean, shape}

    def __post_init__(self):
        if self.selection not in SELECTION_MODES:
            raise ConfigError(unknown_choice("selection", self.selection, SELECTION_MODES))
        if set(self.k) - {"distribution", "mean", "shape"}:
            raise ConfigError(f"k takes distribution, mean and shape, got {sorted(self.k)}")
        if self.entry not in ENTRIES:
            raise ConfigError(unknown_choice("entry", self.entry, ENTRIES))
        for key in ("settings", "methods", "epsilons", "seeds"):
            if not getattr(self, key):
                raise ConfigError(f"{key} must be a non-empty list")
        if any(not (math.isfinite(e) and e > 0) for e in self.epsilons):
            raise ConfigError(f"epsilons must be positive numbers, got {self.epsilons}")
        if any(s < 0 for s in self.seeds):
            raise ConfigError(f"seeds must be integers >= 0, got {self.seeds}")
        for key, values in self.extra.items():
            check_axis("extra", key, values)
        check_folder_name(self.name, "name")
        for key in ("settings", "methods"):
            for value in getattr(self, key):
                check_folder_name(value, f"{key[:-1]}")
        stray = [m for m in self.nonprivate if m not in self.methods]
        if stray:
            raise ConfigError(f"nonprivate names {stray}, which are not among its methods")


def load_spec(name_or_path: str) -> dict:
    spec = load_yaml(name_or_path, SWEEPS, "sweep")
    unknown = set(spec) - SPEC_KEYS
    missing = {"name", "settings", "methods", "epsilons"} - set(spec)
    if unknown or missing:
        raise ConfigError(f"sweep {name_or_path}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}")
    try:
        typed(SpecSchema, spec, "", scope="a sweep spec")
    except ConfigError as err:
        raise ConfigError(f"sweep {name_or_path}: {err}") from None
    spec.setdefault("nonprivate", [])
    spec.setdefault("seeds", [0])
    spec.setdefault("extra", {})
    spec.setdefault("entry", "train")
    spec.setdefault("grid", True)
    spec.setdefault("skip_missing_data", False)
    spec.setdefault("selection", "grid")
    spec.setdefault("k", {})
    return spec


def load_grid(setting: str) -> dict:
    """A setting's grid: `methods`, a mapping of method to a mapping of key to a list of values."""
    grid = load_yaml(setting, SWEEPS / "grids", "grid")
    methods = grid.get("methods")
    if not isinstance(methods, dict) or not all(isinstance(a, dict) for a in methods.values()):
        raise ConfigError(f"grid {setting}: methods must map each method to its axes "
                          f"({{key: [values]}}), got {methods!r}"[:300])
    return grid


def setting_grid(spec: dict, setting: str) -> dict:
    """The grid a setting's runs come from: `grid: false`, every method at its own defaults (the
    setting is the data set), only the spec's axes; a grid file, `configs/sweeps/grids/<setting>.yaml`;
    none for a registered data set, each method's registered grid (`registered_grid`)."""
    if not spec.get("grid", True):
        return {"experiment": None, "methods": {m: {} for m in spec["methods"]}}
    if not (SWEEPS / "grids" / f"{setting}.yaml").is_file() and registered_dataset(setting):
        return {"experiment": None, "methods": {}}
    return load_grid(setting)


def registered_dataset(setting: str) -> bool:
    """Whether a setting with no grid file is a registered data set (its runs: `dataset=<setting>`)."""
    from pazo.data import DATASETS  # imports torch: not needed by --help

    return setting in DATASETS


def registered_grid(method: str, setting: str, grid: dict) -> dict:
    """The grid of a method the setting's grid file does not name: what its registration says it
    sweeps (`MethodInfo.sweeps`; none: one run at its defaults). An unknown method is an error."""
    from pazo.methods import METHODS, method_info  # imports torch: not needed by --help

    if method not in METHODS:
        raise ConfigError(f"grid {setting} has no method {method!r}; it has {', '.join(grid['methods']) or 'none'}")
    return {key: list(values) for key, values in method_info(method).sweeps}


def grid_cells(spec: dict):
    """Each setting and method of the spec with its axes and epsilons, every axis checked."""
    for setting in spec["settings"]:
        grid = setting_grid(spec, setting)
        for method in spec["methods"]:
            own = grid["methods"][method] if method in grid["methods"] else registered_grid(method, setting, grid)
            axes = {**own, **spec["extra"]}
            for key, values in axes.items():
                check_axis(f"grid {setting}/{method}", key, values)
            epsilons = [None] if method in spec["nonprivate"] else spec["epsilons"]
            yield setting, grid, method, axes, epsilons


def count_runs(spec: dict) -> int:
    """How many runs the spec's grid has (the product of its axes' lengths), without making them."""
    return sum(len(epsilons) * math.prod(len(v) for v in axes.values()) * len(spec["seeds"])
               for _, _, _, axes, epsilons in grid_cells(spec))


def enumerate_runs(spec: dict, max_runs: int = MAX_RUNS) -> list[PlannedRun]:
    """The spec's runs; a grid of more than `max_runs` is refused, counted, before any is made."""
    total = count_runs(spec)
    if total > max_runs:
        raise ConfigError(f"sweep {spec['name']}: its grid has {total:,} runs, more than the limit of {max_runs:,}; "
                          "narrow its axes (or --methods), or raise the limit with --max-runs")
    runs = []
    replicates = list(enumerate(spec["seeds"]))
    for setting, grid, method, axes, epsilons in grid_cells(spec):
        for eps, combo, (i, seed) in itertools.product(epsilons, itertools.product(*axes.values()), replicates):
            runs.append(PlannedRun(spec["name"], setting, grid.get("experiment"), method,
                                   None if eps is None else float(eps), int(seed), tuple(zip(axes, combo)), i))
    ids = [r.run_id for r in runs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"sweep {spec['name']}: two runs share a directory name; "
                          "grid keys must differ in their last part")
    return runs


def select_methods(spec: dict, methods: str) -> list[str]:
    """The spec's methods named in `--methods a,b`; a name the spec lacks, or none at all, is an
    error (a typo would otherwise run nothing, silently)."""
    names = [m.strip() for m in methods.split(",") if m.strip()]
    unknown = [m for m in names if m not in spec["methods"]]
    if unknown:
        raise ConfigError(f"sweep {spec['name']}, --methods {methods!r}: "
                          f"{unknown_choice('method', unknown[0], spec['methods'])}")
    if not names:
        raise ConfigError(f"--methods {methods!r} selects no method; sweep {spec['name']} has "
                          f"{', '.join(spec['methods'])}")
    return [m for m in spec["methods"] if m in names]
