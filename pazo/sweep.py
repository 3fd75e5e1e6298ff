"""Sweeps over the paper's grids: `pazo-sweep <spec> [--dry-run] [--launcher L] [overrides]`.

Before any run starts, every run's config is composed and validated (`check`): a typo in an
override, a bad grid value or an unknown method is one error line, not a sweep of failed runs.
A sweep spec (`configs/sweeps/<name>.yaml`) names settings, methods, epsilons, seeds and extra
axes; each setting's per-method grid comes from `configs/sweeps/grids/<setting>.yaml` (or, with
`grid: false`, every method runs at its defaults on the data set named by the setting). A spec
with `entry: audit` runs `python -m pazo.audit` (the privacy audit) instead of training. Every
combination is one run with a deterministic directory `<out>/<sweep>/<setting>/<method>/<eps>/<values>,rep=<i>`
(the i-th of the spec's seeds: the seed itself is in the run's config.yaml only),
so relaunching a sweep finds its earlier runs: runs whose `summary.json` says finished are
skipped, the rest are (re)run. Each run is a `python -m pazo.train` (or `pazo.audit`) subprocess (a crash or
out-of-memory ends that run only), launched one after another, several at once with joblib, or
as a SLURM array through submitit. W&B groups runs by `<sweep>/<setting>`.
"""
from __future__ import annotations

import difflib
import itertools
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import submitit
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pazo import gate
from pazo.child_runs import CHILDREN, EXIT_INTERRUPTED, Interrupted, passing_on_interrupts
from pazo.commands import ArgumentParser, quiet_when_the_reader_leaves, summary_of
from pazo.config_schema import integer_at_least, optional, typed
from pazo.console import use_console
from pazo.errors import ConfigError
from pazo.file_kinds import NotRegularFile, read_regular_text, refuse_special
from pazo.interrupts import restore, until_work_starts, work_starts
from pazo.plugins import load_plugins
from pazo.rundir import WriteFault, check_output_dir

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ROOT / "configs" / "sweeps"
log = logging.getLogger("pazo.sweep")  # not __name__: that is "__main__" under `python -m pazo.sweep`
LAUNCHERS = ("sequential", "joblib", "submitit")
SPEC_KEYS = {"name", "table", "settings", "methods", "nonprivate", "epsilons", "seeds", "extra", "entry", "grid",
             "skip_missing_data", "selection", "k"}
#: how a cell's configuration is chosen: grid (every configuration run, the tables pick one; the pick is
#: not accounted) or private (K random runs, the best released, its cost accounted: pazo.selection)
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
    which `command` turns into a training (or audit) command. Not `pazo.experiment.Run`, the
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
            raise ConfigError(f"unknown selection {self.selection!r}; choices: {', '.join(SELECTION_MODES)}")
        if set(self.k) - {"distribution", "mean", "shape"}:
            raise ConfigError(f"k takes distribution, mean and shape, got {sorted(self.k)}")
        if self.entry not in ENTRIES:
            raise ConfigError(f"unknown entry {self.entry!r}; choices: {', '.join(ENTRIES)}")
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


@dataclass
class SequentialLauncher:
    launcher: str = "sequential"


@dataclass
class JoblibLauncher:
    launcher: str = "joblib"
    jobs: int = 2
    threads_per_job: int | None = None

    def __post_init__(self):
        integer_at_least(self.jobs, 1, "jobs")
        optional(integer_at_least, self.threads_per_job, 1, "threads_per_job")


@dataclass
class SubmititLauncher:
    launcher: str = "submitit"
    cluster: str = "slurm"
    partition: str | None = None
    gpus_per_node: int = 1
    cpus_per_task: int = 8
    mem_gb: int = 64
    timeout_min: int = 720
    array_parallelism: int = 16
    setup: list[str] = field(default_factory=list)
    wait: bool = False

    def __post_init__(self):
        if self.cluster not in ("slurm", "local", "debug"):
            raise ConfigError(f"unknown cluster {self.cluster!r}; choices: slurm, local, debug")
        integer_at_least(self.gpus_per_node, 0, "gpus_per_node")
        for key in ("cpus_per_task", "mem_gb", "timeout_min", "array_parallelism"):
            integer_at_least(getattr(self, key), 1, key)


LAUNCHER_SCHEMAS = {"sequential": SequentialLauncher, "joblib": JoblibLauncher, "submitit": SubmititLauncher}


def check_launcher(launcher: dict) -> None:
    """Every launcher setting's type and range (also on a dry run: a sweep that passes one launches)."""
    kind = launcher.get("launcher", "sequential")
    if kind not in LAUNCHERS:
        raise ConfigError(f"unknown launcher {kind!r}; choices: {', '.join(LAUNCHERS)}")
    try:
        typed(LAUNCHER_SCHEMAS[kind], launcher, "", scope="this launcher")
    except ConfigError as err:
        raise ConfigError(f"launcher {kind}: {err}") from None


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
            axes = {**grid["methods"].get(method, registered_grid(method, setting, grid)), **spec["extra"]}
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


class _View(dict):
    """A plain config with attribute access, as validate_config reads it: reading a DictConfig
    costs about 2 ms a run, too slow for the thousands of runs of a sweep."""
    __slots__ = ()

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"missing key {key!r}") from None


def _view(value):
    return _View({k: _view(v) for k, v in value.items()}) if isinstance(value, dict) else value


def _one_line(err: Exception) -> str:
    """Hydra's multi-line message as one line: its choices joined, the search path dropped."""
    lines = [line.strip() for line in str(err).split("\nConfig search path")[0].splitlines() if line.strip()]
    if getattr(err, "options", None):
        from pazo.cli import unknown_group_option

        return unknown_group_option(lines[0], err.options) or f"{lines[0]}; choices: {', '.join(err.options)}"
    if err.__cause__ is not None:      # e.g. "Error merging override x" does not say why
        lines.append(str(err.__cause__).splitlines()[0])
    return " ".join(lines)


class _UserOverrideError(ConfigError):
    """The user's own override is wrong: one message for the whole sweep, not one per run."""


def _composition_groups(runs) -> dict:
    """Runs by what Hydra composes differently (setting, experiment, method, private or not, the
    config-group choices): each group is composed once and its runs' own values set on a copy."""
    groups: dict = {}
    for run in runs:
        choices = tuple((k, v) for k, v in run.params if "." not in k)
        groups.setdefault((run.setting, run.experiment, run.method, run.epsilon is None, choices), []).append(run)
    return groups


class _Checker:
    """Composes the real config tree and sets a run's values as its command line would."""

    def __init__(self, extra: list[str], config_name: str = "config"):
        self.parser, self.extra, self._values = OverridesParser.create(), extra, {}
        self.config_name = config_name
        try:
            self.extra_keys = {o.key_or_group for o in self.parser.parse_overrides(extra)}
        except HydraException as err:
            raise ConfigError(f"bad override in {' '.join(extra)!r}: {_one_line(err)}") from None

    def compose(self, overrides: list[str]):
        try:
            return compose(config_name=self.config_name, overrides=overrides)
        except HydraException as err:
            if not str(err).startswith("Could not override '"):
                raise ConfigError(_one_line(err)) from None
            key = str(err).split("'")[1]
        line = next((o for o in overrides if o.partition("=")[0] == key), key)
        parent = key.rpartition(".")[0]
        try:    # name the keys that do exist there
            cfg = compose(config_name=self.config_name, overrides=[o for o in overrides if o != line])
            node = OmegaConf.select(cfg, parent) if parent else cfg
        except HydraException:
            node = None
        where = (f"{parent or 'the top level'} has {', '.join(sorted(node))}" if OmegaConf.is_dict(node)
                 else f"there is no {parent!r}")
        close = difflib.get_close_matches(key.rpartition(".")[2], list(node), n=1) if OmegaConf.is_dict(node) else []
        where += "".join(f"; did you mean {parent + '.' if parent else ''}{match}?" for match in close)
        error = _UserOverrideError if line in self.extra else ConfigError
        raise error(f"unknown key {key!r} in override {line!r} ({where}; to add a key use +{line})")

    def apply(self, plain: _View, run: PlannedRun) -> None:
        """Set the run's seed, epsilon and grid values in `plain`, parsed by Hydra's grammar from
        the `key=value` the run's command line carries; the user's overrides come last and win."""
        values = [("seed", run.seed), *([] if run.epsilon is None else [("privacy.epsilon", run.epsilon)]),
                  *((k, v) for k, v in run.params if "." in k)]
        for key, value in values:
            if key in self.extra_keys:
                continue
            line = f"{key}={fmt(value)}"
            if line not in self._values:
                self._values[line] = self.parser.parse_overrides([line])[0].value()
            *path, name = key.split(".")
            node = plain
            for part in path:
                node = node[part]
            node[name] = self._values[line]


def check(runs: list[PlannedRun], extra: list[str], entry: str = "train") -> int:
    """Compose and validate every run's config (Hydra, then `pazo.validate.validate_config`) before
    any run starts; raise one ConfigError naming the commonest problem and how many runs have it.

    Composing takes 0.1-0.3 s a config (over 7 minutes for Table 1's 3226 runs), so each (setting,
    method, private or not, config-group choices) is composed once, with the user's overrides,
    and validated as composed; every run's own values (seed, epsilon, grid) are then set in a plain
    copy of that config and validated there (under 1 s for Table 1). Returns the number of
    compositions."""
    from pazo.validate import validate_config  # imports torch (seconds): not needed by --help

    errors = (ValueError, KeyError, AttributeError, OmegaConfBaseException, HydraException)
    checker, groups, problems = _Checker(extra, ENTRIES[entry]), _composition_groups(runs), {}
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        for members in groups.values():
            try:
                cfg = checker.compose([*members[0].overrides(), *extra])
                validate_config(cfg)
                plain = _view(OmegaConf.to_container(cfg, resolve=True))
            except _UserOverrideError:
                raise
            except errors as err:
                problems.setdefault(str(err), []).extend(m.run_id for m in members)
                continue
            for run in members:
                try:
                    checker.apply(plain, run)
                    validate_config(plain)
                except errors as err:
                    problems.setdefault(str(err), []).append(run.run_id)
    if problems:
        (message, ids), *others = sorted(problems.items(), key=lambda item: -len(item[1]))
        also = f"; {len(others)} other problem(s), e.g. {others[0][0]}" if others else ""
        raise ConfigError(f"{message} ({len(ids)} of {len(runs)} runs, e.g. {ids[0]}){also}")
    return len(groups)


def missing_data(runs: list[PlannedRun], extra: list[str], entry: str = "train") -> dict[str, str]:
    """The settings whose data cannot be read, each with the loader's one-line message (what is
    missing, where it was looked for, how to get it): each setting's data set is read once, as its
    first run would read it, with the user's overrides (`dataset.root=...`)."""
    from pazo.data import build_dataset  # imports torch: not needed by --help
    from pazo.errors import DataMissingError
    from pazo.rng import RandomStreams

    firsts = {}
    for run in runs:
        firsts.setdefault(run.setting, run)
    out = {}
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        checker = _Checker(extra, ENTRIES[entry])
        for setting, run in firsts.items():
            cfg = checker.compose([*run.overrides(), *extra])
            try:
                build_dataset(cfg.dataset, RandomStreams(cfg.seed))
            except DataMissingError as err:
                out[setting] = str(err).splitlines()[0]
    return out


def check_replicates(planned: list[tuple[PlannedRun, Path]]) -> None:
    """A run directory is named by its seed's place in the spec (`rep=<i>`): one that an earlier
    sweep ran with another seed (a spec whose seeds list changed order) is refused, rather than
    skipped as finished or continued under another seed. A run's file that is not a regular file (a
    FIFO named summary.json would block its reader for good) is refused first."""
    for run, run_dir in planned:
        check_regular_run_files(run_dir)
        try:
            then = yaml.safe_load(read_regular_text(run_dir / "config.yaml")).get("seed")
        except (OSError, AttributeError, yaml.YAMLError):  # not run yet, or no readable config
            continue
        if then is not None and then != run.seed:
            raise ConfigError(f"{run_dir} was run with another seed than this spec's seed number {run.replicate + 1} "
                              "(run directories are named by a seed's place in the spec's seeds list): keep each "
                              "seed's place in the list, or give another --out")


def check_regular_run_files(run_dir: Path) -> None:
    """A ConfigError naming a file of `run_dir` the sweep reads that exists and is not a regular file."""
    for name in ("config.yaml", "summary.json", "metrics.jsonl"):
        try:
            refuse_special(run_dir / name)
        except NotRegularFile as err:
            raise ConfigError(f"{err}: a run's files must be regular files; move it away, or give another "
                              "--out") from None


def check_earlier_runs(planned: list[tuple[PlannedRun, Path]], extra: list[str], skipped: set[str],
                       entry: str = "train") -> None:
    """Refuse the sweep, before any run starts, where a run directory holds a run of another
    configuration (another extra override, grid value or default: `pazo.attempts.config_changes`,
    the rule a launch into it applies) that the sweep would skip (`skipped` states) or that released
    rows: its numbers would stand in the tables under this command."""
    from pazo.attempts import config_changes, released_rows  # imports torch: not needed by --help
    from pazo.checkpoint import read_summary

    existing = [(run, run_dir) for run, run_dir in planned if (run_dir / "config.yaml").exists()]
    configs = composed_configs([run for run, _ in existing], extra, entry) if existing else []
    refused = {}
    for (run, run_dir), cfg in zip(existing, configs):
        if status(run_dir) in skipped or released_rows(run_dir, read_summary(run_dir / "summary.json")):
            if changed := config_changes(run_dir, cfg):
                refused[run.run_id] = changed
    if refused:
        first, changed = next(iter(refused.items()))
        raise ConfigError(f"{len(refused)} of {len(planned)} runs of this sweep were run with another config "
                          f"(e.g. {first}: {'; '.join(changed[:3])}); their results would stand for this command: "
                          "relaunch with the overrides they ran with, or give another --out")


def status(run_dir: Path) -> str:
    """finished | failed | incomplete (started, no summary) | new."""
    summary = run_dir / "summary.json"
    if summary.exists():
        try:
            return json.loads(read_regular_text(summary)).get("status", "incomplete")
        except (OSError, ValueError, AttributeError):   # (cut short, not JSON, not a file: never waited on)
            return "incomplete"
    return "incomplete" if run_dir.exists() else "new"


def command(run: PlannedRun, run_dir: Path, extra: list[str], entry: str = "train") -> list[str]:
    return [sys.executable, "-m", f"pazo.{entry}", *run.overrides(),
            f"logger.group={run.sweep}/{run.setting}", f"logger.name='{run.run_id}'",
            f"hydra.run.dir='{run_dir}'", *extra]


def without_seed(cmd: list[str]) -> list[str]:
    """The command as the run's stdout.log and --dry-run show it: the seed's value left out (it
    goes only to the run's config.yaml)."""
    return ["seed=..." if arg.startswith("seed=") else arg for arg in cmd]


def run_one(cmd: list[str], run_dir: str, threads: int | None = None) -> int | None:
    """One training run as a subprocess (`pazo.child_runs`); its output goes to `<run_dir>/stdout.log`.
    `threads` caps its CPU threads: runs side by side that each spin up one OpenMP thread per core
    slow each other down many times over (36x for DP-SGD on digits, two runs on two cores). None:
    not started, a Ctrl-C stopped the sweep."""
    if CHILDREN.stopping:
        return None
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with gate.open_released(Path(run_dir) / "stdout.log", append=True) as out:  # a relaunch appends: earlier lines stay
        out.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(without_seed(cmd))}\n".encode())
        return CHILDREN.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)


class TrainJob(submitit.helpers.Checkpointable):
    """One run as a SLURM job. On preemption or at its time limit submitit calls `checkpoint`,
    which requeues the same command; the run itself saves a checkpoint on the scheduler's signal
    (SIGTERM/SIGUSR1/SIGUSR2) and the requeued job resumes from it."""

    def __call__(self, cmd: list[str], run_dir: str) -> int:
        return run_one(cmd, run_dir)


def _report(i: int, n: int, run: PlannedRun, run_dir: Path, seconds: float) -> None:
    state = status(run_dir)
    acc = ""
    if state == "finished":
        summary = json.loads(read_regular_text(run_dir / "summary.json"))
        accuracy = summary.get("final_test_accuracy")
        acc = f" acc {accuracy:.4f}" if isinstance(accuracy, (int, float)) else ""
    log.info(f"[{i}/{n}] {run.run_id}: {state}{acc} ({seconds:.0f} s)")


def check_sweep_folder(sweep_dir: Path) -> None:
    """The sweep's folder below `--out` made (if need be) and written into once, before any run: a
    folder that cannot be (read-only, no permission, a file in the way, a full disk) is one
    ConfigError, not a traceback out of the first run's start."""
    try:
        check_output_dir(sweep_dir, "the sweep folder", "--out")
    except WriteFault as err:
        raise ConfigError(f"cannot write into the sweep folder {sweep_dir}: {err.reason}; no run was started") from None


def check_can_launch(launcher: dict, overrides: list[str]) -> None:
    """What this machine must have before the first run starts: the device the overrides ask for
    (`device=cuda` without CUDA), and SLURM's commands for a SLURM launcher; one ConfigError each,
    instead of runs that fail one by one or submitit's traceback."""
    from pazo.experiment import resolve_device

    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+~") == "device":
            try:
                resolve_device(value)
            except ConfigError as err:
                raise ConfigError(f"{override}: {err}; no run was started") from None
    if launcher.get("launcher") == "submitit" and launcher.get("cluster", "slurm") == "slurm" \
            and shutil.which("sbatch") is None:
        raise ConfigError("the SLURM launcher needs SLURM's sbatch, which is not on this machine's PATH; run the "
                          "sweep on the cluster's login node, or use --launcher sequential or joblib; no run was "
                          "started")


def launch(todo: list[tuple[PlannedRun, Path, list[str]]], launcher: dict, sweep_dir: Path,
           quiet: bool = False) -> None:
    """Run `todo` with the launcher; `quiet`: no line per run (a private selection's runs: their number
    and scores stay private). A Ctrl-C stops the runs in progress after their step, starts no other
    and raises `Interrupted` once they have ended (`pazo.child_runs`), saying how many of `todo`
    finished unless `quiet`."""
    kind = launcher.get("launcher", "sequential")
    if kind == "submitit":
        try:
            return launch_submitit(todo, launcher, sweep_dir, quiet)
        except KeyboardInterrupt:
            raise Interrupted("the jobs submitted go on under SLURM (squeue lists them; scancel stops them), "
                              "and a relaunch once they have ended runs the rest") from None
    with passing_on_interrupts() as children:
        if kind == "sequential":
            _launch_sequential(todo, quiet)
        elif kind == "joblib":
            _launch_joblib(todo, launcher, quiet)
        else:
            raise ValueError(f"unknown launcher {kind!r}")  # main() validates it first
        stopped, signum = children.stopping, children.signum
    if stopped:
        finished = "" if quiet else f"{sum(status(d) == 'finished' for _, d, _ in todo)} of {len(todo)} runs finished; "
        raise Interrupted(f"{finished}the runs in progress stopped, each saying where in its stdout.log", signum)


def _launch_sequential(todo, quiet: bool) -> None:
    for i, (run, run_dir, cmd) in enumerate(todo, 1):
        t0 = time.time()
        if run_one(cmd, str(run_dir)) is not None and not quiet:
            _report(i, len(todo), run, run_dir, time.time() - t0)


def _launch_joblib(todo, launcher: dict, quiet: bool) -> None:
    """Several runs at once (threads, each waiting on its run's subprocess)."""
    from joblib import Parallel, delayed

    jobs = int(launcher.get("jobs", 2))
    threads = launcher.get("threads_per_job") or max(1, (os.cpu_count() or 1) // jobs)

    def timed(run, run_dir, cmd):
        t0 = time.time()
        started = run_one(cmd, str(run_dir), threads) is not None
        return run, run_dir, time.time() - t0, started

    done = Parallel(n_jobs=jobs, prefer="threads", return_as="generator_unordered")(
        delayed(timed)(*item) for item in todo)
    for i, (run, run_dir, seconds, started) in enumerate(done, 1):
        if started and not quiet:
            _report(i, len(todo), run, run_dir, seconds)


def launch_submitit(todo, launcher: dict, sweep_dir: Path, quiet: bool = False) -> None:
    executor = submitit.AutoExecutor(folder=str(sweep_dir / ".submitit" / "%j"),
                                     cluster=launcher.get("cluster", "slurm"))
    executor.update_parameters(
        name=todo[0][0].sweep, timeout_min=int(launcher.get("timeout_min", 720)),
        gpus_per_node=int(launcher.get("gpus_per_node", 1)), cpus_per_task=int(launcher.get("cpus_per_task", 8)),
        mem_gb=int(launcher.get("mem_gb", 64)), slurm_partition=launcher.get("partition"),
        slurm_array_parallelism=int(launcher.get("array_parallelism", 16)),
        slurm_setup=list(launcher.get("setup", [])))
    jobs = executor.map_array(TrainJob(), [cmd for *_, cmd in todo], [str(d) for _, d, _ in todo])
    if not quiet:
        log.info(f"submitted {len(jobs)} jobs ({jobs[0].job_id if jobs else '-'} ...); "
                 f"logs under {sweep_dir / '.submitit'}")
    if launcher.get("wait"):
        for (run, run_dir, _), job in zip(todo, jobs):
            job.result()
        for i, (run, run_dir, _) in enumerate(todo, 1):
            if not quiet:
                _report(i, len(todo), run, run_dir, 0.0)


def composed_configs(runs: list[PlannedRun], extra: list[str], entry: str = "train") -> list:
    """Each run's config as its command line composes it (plain, attribute access), each (setting,
    method, config-group choices) composed once, as `check` does."""
    import copy

    checker, groups, out = _Checker(extra, ENTRIES[entry]), _composition_groups(runs), {}
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        for members in groups.values():
            plain = _view(OmegaConf.to_container(checker.compose([*members[0].overrides(), *extra]), resolve=True))
            for run in members:
                mine = copy.deepcopy(plain)
                checker.apply(mine, run)
                out[run] = mine
    return [out[run] for run in runs]


@dataclass
class Cell:
    """One table cell under private selection: its configurations (the grid a draw picks from) and
    the seeds, one selection each."""
    setting: str
    method: str
    epsilon: float
    configurations: list[PlannedRun]
    seeds: list[int]

    @property
    def cell_id(self) -> str:
        return f"{self.setting}/{self.method}/eps={fmt(self.epsilon)}"


def selection_cells(runs: list[PlannedRun]) -> list[Cell]:
    """The private runs of a sweep as cells: (setting, method, epsilon), each configuration once."""
    cells: dict[tuple, Cell] = {}
    for run in runs:
        cell = cells.setdefault((run.setting, run.method, run.epsilon),
                                Cell(run.setting, run.method, run.epsilon, [], []))
        if run.seed not in cell.seeds:
            cell.seeds.append(run.seed)
        if run.seed == cell.seeds[0]:
            cell.configurations.append(run)
    return list(cells.values())


def selection_costs(cells: list[Cell], extra: list[str], k) -> list:
    """Each cell's cost (pazo.selection.cell_cost): the private set's size read once a setting, each
    distinct (q, T, epsilon) calibrated once through the sigma cache."""
    from pazo.selection import cell_cost, private_size

    configs = composed_configs([r for c in cells for r in c.configurations], extra)
    sizes, costs, i = {}, [], 0
    for cell in cells:
        mine, i = configs[i:i + len(cell.configurations)], i + len(cell.configurations)
        if cell.setting not in sizes:
            with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
                first = _Checker(extra).compose([*cell.configurations[0].overrides(), *extra])
            sizes[cell.setting] = private_size(first)
        try:
            costs.append(cell_cost(mine, k, len(cell.seeds), sizes[cell.setting]))
        except ConfigError as err:   # a dry run lists every cell's problem; a launch refuses the first
            costs.append(err)
    return costs


def _k_of(spec: dict, args):
    from pazo.selection import k_distribution

    given = {"distribution": args.k, "mean": args.k_mean, "shape": args.k_shape}
    merged = {"distribution": "geometric", "mean": 10.0, **spec["k"],
              **{a: v for a, v in given.items() if v is not None}}
    return k_distribution(merged["distribution"], merged["mean"], merged.get("shape"))


def private_selection(spec: dict, runs: list[PlannedRun], args, launcher: dict, sweep_dir: Path) -> int:
    """`--selection private`: the ordinary runs (non-private methods) as usual; per private cell and
    seed, the K drawn runs under `<sweep>/.private/` (W&B off, secure mode, the spec's seed), then the
    best of each released to `<setting>/<method>/eps=<e>/selected,seed=<s>`. Prints each cell's cost;
    K, the runs' progress and their scores are never printed."""
    if spec["entry"] != "train":
        raise ConfigError("private selection selects training runs; an audit sweep (entry: audit) has none")
    k = _k_of(spec, args)
    cells = selection_cells([r for r in runs if r.epsilon is not None])
    t0 = time.time()
    costs = selection_costs(cells, args.overrides, k)
    ordinary = [(r, sweep_dir / r.run_id) for r in runs if r.epsilon is None]
    log.info(f"sweep {spec['name']}: private selection, {len(cells)} cell(s) x {len(spec['seeds'])} seed(s), "
             f"{len(ordinary)} non-private run(s) in {sweep_dir}; costs in {time.time() - t0:.1f} s")
    for cell, cost in zip(cells, costs):
        what = f"cannot be accounted: {cost}" if isinstance(cost, ConfigError) else cost.line()
        log.info(f"  {cell.cell_id} ({len(cell.configurations)} configurations): {what}")
    if args.dry_run:
        return 0
    refused = [(cell, cost) for cell, cost in zip(cells, costs) if isinstance(cost, ConfigError)]
    if refused:
        raise ConfigError(f"cell {refused[0][0].cell_id} cannot be accounted: {refused[0][1]}"
                          + (f" ({len(refused) - 1} other cell(s) too)" if len(refused) > 1 else ""))
    check_sweep_folder(sweep_dir)
    done = {"finished", "failed"} if args.skip_failed else {"finished"}
    todo_ordinary = [(r, d, command(r, d, args.overrides)) for r, d in ordinary if status(d) not in done]
    private, todo_private = _selection_runs(cells, costs, k, sweep_dir, args.overrides, done)
    if todo_private:
        log.info("  the selections' runs log nothing to W&B (logger.mode=disabled) and draw their noise and batches "
                 "from the operating system (privacy.secure_mode=true): only the released runs are outputs")
    _launch_selection(todo_ordinary, todo_private, launcher, sweep_dir)
    if launcher.get("launcher") == "submitit" and not launcher.get("wait"):
        log.info("relaunch the same command once the jobs have ended: it releases each selection's best run")
        return 0
    released = _release_selections(private, sweep_dir)
    ordinary_done = sum(status(d) == "finished" for _, d in ordinary)
    total = sum(len(c.seeds) for c in cells)
    log.info(f"sweep {spec['name']}: {released} selection(s) released now, one run each, "
             f"{total - len(private)} earlier, of {total}"
             + (f"; {ordinary_done} of {len(ordinary)} non-private runs finished" if ordinary else ""))
    return 0 if released == len(private) and ordinary_done == len(ordinary) else 1


@dataclass
class Selection:
    """One cell and seed's selection this launch runs: its K runs' folders, where its best goes, and
    the time that stamps the release."""
    cell: Cell
    cost: Any
    seed: int
    dirs: list[Path]
    public: Path
    stamp: float


def _selection_runs(cells: list[Cell], costs: list, k, sweep_dir: Path, overrides: list[str],
                    done: set[str]) -> tuple[list[Selection], list]:
    """The selections not yet released, each drawn (or its draw read back), and the runs of theirs
    still to run. Every run of a cell and seed has the spec's seed (one split, whose n the cost used)
    and `selection.RUN_OVERRIDES` after the user's overrides: W&B off, secure mode."""
    from pazo import selection as sel

    set_here = {o.partition("=")[0] for o in sel.RUN_OVERRIDES}
    extra = [o for o in overrides if o.partition("=")[0].lstrip("+~") not in set_here] + list(sel.RUN_OVERRIDES)
    launched_at = float(round(time.time()))    # one time for every draw of this launch, whatever their K
    private, todo = [], []
    for cell, cost in zip(cells, costs):
        for replicate, seed in enumerate(cell.seeds):
            public = sweep_dir / cell.cell_id / f"selected,seed={seed}"
            if (public / "summary.json").exists():   # released once: rerunning its runs would be a second release
                continue
            folder = sweep_dir / sel.PRIVATE / cell.cell_id / f"seed={seed}"
            drawn = sel.load_or_draw(folder / "selection.json", k, [r.run_id for r in cell.configurations],
                                     launched_at)
            dirs = []
            for draw in drawn["draws"]:
                run = replace(cell.configurations[draw["configuration"]], seed=seed, replicate=replicate)
                dirs.append(sel.private_dir(folder / draw["name"]))
                if status(dirs[-1]) not in done:
                    todo.append((run, dirs[-1], command(run, dirs[-1], extra)))
            private.append(Selection(cell, cost, seed, dirs, public, drawn["launched_at"]))
    return private, todo


def _launch_selection(todo_ordinary: list, todo_private: list, launcher: dict, sweep_dir: Path) -> None:
    """The non-private runs, then the selections' (quiet: no line per run). An interrupt is said in
    one line that counts the non-private runs and not the selections' (their number is K's)."""
    from pazo import selection as sel

    try:
        if todo_ordinary:
            launch(todo_ordinary, launcher, sweep_dir)
        if todo_private:
            launch(todo_private, launcher, sweep_dir / sel.PRIVATE, quiet=True)
    except Interrupted as stop:
        finished = sum(status(d) == "finished" for _, d, _ in todo_ordinary)
        ordinary = f"{finished} of {len(todo_ordinary)} non-private runs finished; " if todo_ordinary else ""
        submitted = f"; {stop}" if launcher.get("launcher") == "submitit" else ""
        raise Interrupted(f"{ordinary}no selection was released by this launch (its draws, finished runs and the "
                          f"stopped runs' checkpoints are kept, private){submitted}", stop.signum) from None


def _release_selections(private: list[Selection], sweep_dir: Path) -> int:
    """Each selection's best run released (every run has ended: one without a summary failed); the
    private workspace sealed. Returns how many were released."""
    from pazo import selection as sel

    released = 0
    for s in private:
        best = sel.choose(s.dirs)
        if best is None:
            log.info(f"  {s.cell.cell_id} seed {s.seed}: nothing released (no run of the selection has a score)")
            continue
        sel.release(s.dirs[best], s.public, {**s.cost.record(), "seed": s.seed, "validation_metric": sel.SCORE},
                    s.stamp, sweep_dir)
        released += 1
    if (sweep_dir / sel.PRIVATE).exists():
        sel.seal(sweep_dir / sel.PRIVATE)
    return released


def parse_sets(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--set takes key=value, got {pair!r}")
        out[key] = yaml.safe_load(value) if value else value
    return out


def select_methods(spec: dict, methods: str) -> list[str]:
    """The spec's methods named in `--methods a,b`; a name the spec lacks, or none at all, is an
    error (a typo would otherwise run nothing, silently)."""
    names = [m.strip() for m in methods.split(",") if m.strip()]
    unknown = [m for m in names if m not in spec["methods"]]
    if unknown or not names:
        what = f"has unknown method(s) {', '.join(map(repr, unknown))}" if unknown else "selects no method"
        raise ConfigError(f"--methods {methods!r} {what}; sweep {spec['name']} has {', '.join(spec['methods'])}")
    return [m for m in spec["methods"] if m in names]


def main(argv: list[str] | None = None) -> int:
    """`pazo-sweep`: a Ctrl-C ends it in one line saying what was done, exit status 130, no traceback
    (a SIGTERM or SIGHUP during its runs: the same, exit status 143 or 129)."""
    try:
        return _main(argv)
    except Interrupted as stop:
        log.error(f"pazo: {stop.how}: {stop}; the same command resumes the sweep")
        return stop.exit_status
    except KeyboardInterrupt:
        log.error("pazo: interrupted while no run was in progress: the runs that had finished and the selections "
                  "released are kept; the same command resumes the sweep")
    return EXIT_INTERRUPTED


def _main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="pazo-sweep", description=summary_of(__doc__))
    parser.add_argument("spec", help="a name in configs/sweeps/ (e.g. table1_cifar10) or a YAML path")
    parser.add_argument("overrides", nargs="*",
                        help="extra pazo.train overrides for every run, e.g. dataset.root=/data")
    parser.add_argument("--dry-run", action="store_true", help="print the runs and stop")
    parser.add_argument("--show", type=int, default=5, help="override lines shown by --dry-run")
    parser.add_argument("--launcher", default="sequential", help="sequential | joblib | slurm, or a YAML path")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="launcher setting")
    parser.add_argument("--out", default=str(Path("outputs") / "sweeps"),
                        help="sweeps folder (default: outputs/sweeps below the working directory)")
    parser.add_argument("--methods", default=None, help="only these methods (comma-separated)")
    parser.add_argument("--max-runs", type=int, default=MAX_RUNS, metavar="N",
                        help=f"refuse a grid of more than N runs, counted before any is made (default {MAX_RUNS:,})")
    parser.add_argument("--skip-failed", action="store_true", help="also skip runs that ended as failed")
    parser.add_argument("--selection", default=None, choices=SELECTION_MODES,
                        help="grid: run every configuration (default, or the spec's selection); private: per "
                             "cell and seed a random number K of runs, each a random configuration, only the best "
                             "released, the selection's total epsilon accounted")
    parser.add_argument("--k", default=None, help="private selection: the distribution of K (geometric, "
                        "logarithmic, truncated_negative_binomial, poisson; default the spec's, else geometric)")
    parser.add_argument("--k-mean", type=float, default=None, help="private selection: E[K] (default 10)")
    parser.add_argument("--k-shape", type=float, default=None,
                        help="private selection: the truncated negative binomial's shape eta > 0")
    args = parser.parse_intermixed_args(argv)
    use_console()
    load_plugins()   # (its runs' subprocesses load them too: the entry points, and PAZO_PLUGINS inherited)
    try:
        spec = load_spec(args.spec)
        if args.methods is not None:
            spec = {**spec, "methods": select_methods(spec, args.methods)}
        runs = enumerate_runs(spec, args.max_runs)
        launcher = {**load_yaml(args.launcher, SWEEPS / "launchers", "launcher"), **parse_sets(args.set)}
        check_launcher(launcher)
        t0 = time.time()
        composed = check(runs, args.overrides, spec["entry"])
        missing = missing_data(runs, args.overrides, spec["entry"])
        if missing and not spec["skip_missing_data"] and not args.dry_run:
            (setting, message), *others = missing.items()
            also = f" (and the data of {len(others)} other setting(s))" if others else ""
            raise ConfigError(f"setting {setting}: {message.rstrip('.')}{also}; no run was started (or set "
                              "skip_missing_data: true in the spec to leave such settings out)")
    except ConfigError as err:
        log.error(f"pazo: error: {err}")
        return 2
    for setting, message in missing.items():
        if not spec["skip_missing_data"]:   # (a dry run: the plan is shown whole, the gap said)
            log.info(f"sweep {spec['name']}: setting {setting} cannot run here, its data are missing: {message}")
            continue
        log.info(f"sweep {spec['name']}: setting {setting} skipped, its data are missing: {message}")
        runs = [r for r in runs if r.setting != setting]
    if not runs:  # a sweep that ran nothing has not done what was asked: the user's one line, exit 2
        log.error(f"pazo: error: sweep {spec['name']}: nothing to run, the data of every setting are missing "
                  "(each setting's line above says what is missing and how to get it)")
        return 2
    sweep_dir = Path(args.out).resolve() / spec["name"]
    if (args.selection or spec["selection"]) == "private":
        try:
            work_starts()   # (the runs' Ctrl-C: each records it)
            return private_selection(spec, runs, args, launcher, sweep_dir)
        except ConfigError as err:
            log.error(f"pazo: error: {err}")
            return 2
    planned = [(r, sweep_dir / r.run_id) for r in runs]
    done = {"finished", "failed"} if args.skip_failed else {"finished"}
    try:
        check_replicates(planned)
        check_earlier_runs(planned, args.overrides, done, spec["entry"])
    except ConfigError as err:
        log.error(f"pazo: error: {err}")
        return 2
    states = {d: status(d) for _, d in planned}
    todo = [(r, d, command(r, d, args.overrides, spec["entry"])) for r, d in planned if states[d] not in done]
    counts = {s: list(states.values()).count(s) for s in ("finished", "failed", "incomplete", "new")}
    log.info(f"sweep {spec['name']}: {len(runs)} runs in {sweep_dir} "
             f"({', '.join(f'{v} {k}' for k, v in counts.items() if v)}); {len(todo)} to run; "
             f"every config valid ({composed} compositions, {time.time() - t0:.1f} s)")
    for (setting, method), n in Counter((r.setting, r.method) for r in runs).items():
        log.info(f"  {setting:14s} {method:13s} {n:5d}")
    if args.dry_run:
        for _, _, cmd in todo[:args.show]:
            log.info("  " + " ".join(cmd[3:]))
        return 0
    if not todo:
        return 0
    try:
        check_sweep_folder(sweep_dir)
        check_can_launch(launcher, args.overrides)
    except ConfigError as err:
        log.error(f"pazo: error: {err}")
        return 2
    work_starts()   # (the runs' Ctrl-C: each records it)
    launch(todo, launcher, sweep_dir)
    if launcher.get("launcher") == "submitit" and not launcher.get("wait"):
        return 0
    final = [status(d) for _, d, _ in todo]
    log.info(f"sweep {spec['name']}: {final.count('finished')} of {len(todo)} runs finished"
             + (f"; not finished: {len(todo) - final.count('finished')} (see their stdout.log; "
                "relaunch the same command to re-run them)" if final.count("finished") < len(todo) else ""))
    return 0 if final.count("finished") == len(todo) else 1


@quiet_when_the_reader_leaves
def cli(argv: list[str] | None = None) -> int:
    """`pazo-sweep`, `python -m pazo.sweep`: `main`, with a Ctrl-C before the first run is launched
    one line and exit 130 (`pazo.interrupts`); the handler found is put back at the end."""
    previous = until_work_starts("before the sweep launched a run: nothing was run")
    try:
        return main(argv)
    finally:
        restore(previous)


if __name__ == "__main__":
    sys.exit(cli())
