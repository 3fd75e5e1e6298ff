"""A sweep's checks before any run starts: every run's config composed and validated (`check`), the
settings whose data are missing, and what earlier launches left in the run directories (another
seed, another config, a file that is not a regular file); `status` reads a run's state."""
from __future__ import annotations

import difflib
import json
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pazo.errors import ConfigError
from pazo.files.file_kinds import NotRegularFile, read_regular_text, refuse_special
from pazo.files.rundir import WriteFault, check_output_dir
from pazo.run.door import not_an_override
from pazo.sweep.spec import ENTRIES, ROOT, PlannedRun, fmt


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
        from pazo.run.cli import unknown_group_option

        return unknown_group_option(lines[0], err.options) or f"{lines[0]}; choices: {', '.join(err.options)}"
    from pazo.run.cli import merged_type_problem

    typed = merged_type_problem(err)   # (`method.lr must be a number, got the string 'abc'`)
    if typed:
        return typed
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
        except Exception:   # (Hydra's grammar errors, of several types): the first unreadable one, in pazo's words
            raise ConfigError(not_an_override(extra)) from None

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
    """Compose and validate every run's config (Hydra, then `pazo.run.validate.validate_config`) before
    any run starts; raise one ConfigError naming the commonest problem and how many runs have it.

    Composing takes 0.1-0.3 s a config (over 7 minutes for Table 1's 3226 runs), so each (setting,
    method, private or not, config-group choices) is composed once, with the user's overrides,
    and validated as composed; every run's own values (seed, epsilon, grid) are then set in a plain
    copy of that config and validated there (under 1 s for Table 1). Returns the number of
    compositions."""
    from pazo.run.validate import validate_config  # imports torch (seconds): not needed by --help

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
    from pazo.run.typed import run_config

    firsts = {}
    for run in runs:
        firsts.setdefault(run.setting, run)
    out = {}
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        checker = _Checker(extra, ENTRIES[entry])
        for setting, run in firsts.items():
            cfg = checker.compose([*run.overrides(), *extra])
            try:
                build_dataset(run_config(cfg).dataset, RandomStreams(cfg.seed))
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
    configuration (another extra override, grid value or default: `pazo.run.attempts.config_changes`,
    the rule a launch into it applies) that the sweep would skip (`skipped` states) or that released
    rows: its numbers would stand in the tables under this command."""
    from pazo.run.attempts import config_changes, released_rows  # imports torch: not needed by --help
    from pazo.run.checkpoint import read_summary
    from pazo.run.typed import typed_config

    existing = [(run, run_dir) for run, run_dir in planned if (run_dir / "config.yaml").exists()]
    configs = composed_configs([run for run, _ in existing], extra, entry) if existing else []
    refused = {}
    for (run, run_dir), cfg in zip(existing, configs):
        if status(run_dir) in skipped or released_rows(run_dir, read_summary(run_dir / "summary.json")):
            if changed := config_changes(run_dir, typed_config(cfg)):
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


def check_sweep_folder(sweep_dir: Path) -> None:
    """The sweep's folder below `--out` made (if need be) and written into once, before any run: a
    folder that cannot be (read-only, no permission, a file in the way, a full disk) is one
    ConfigError, not a traceback out of the first run's start."""
    try:
        check_output_dir(sweep_dir, "the sweep folder", "--out")
    except WriteFault as err:
        raise ConfigError(f"cannot write into the sweep folder {sweep_dir}: {err.reason}; no run was started") from None


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
