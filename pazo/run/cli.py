"""What the command lines share (`pazo-train`, `pazo-audit`): the user's mistakes that end a run
in one `pazo: error:` line, the check of a command line's overrides before anything starts, and
Hydra's own writes of a launch's record turned into one line where the disk refuses them."""
from __future__ import annotations

import os
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from pazo import CONFIG_DIR

from pazo.run import gate
from pazo.errors import ConfigError, close_match, unknown_key, unknown_option
from pazo.files.file_kinds import EMPTY_PATH
from pazo.files.rundir import STAGING_PREFIX, WriteFault, check_output_dir, existing_dirs, remove_created_dirs
from pazo.privacy.accountants import BudgetError
from pazo.registry import UnknownNameError

#: a user's mistake, not a fault: one line and exit 2 (DataMissingError is a FileNotFoundError)
USER_ERRORS = (ConfigError, BudgetError, UnknownNameError, FileNotFoundError)
#: a training run given the audit's debug break (its command line or its config)
DEBUG_ONLY = ("audit.debug_break is a debug-only switch that breaks the privacy guarantee on purpose; "
              "only the privacy audit (python -m pazo.audit) accepts it")


def register_resolvers() -> None:
    """The interpolations pazo's configs use (`${pazo_unique:}` in `hydra.run.dir`: a short random
    token per process, so that two runs started in the same second get two directories). Every
    entry point that composes configs/ imports this module, which calls it once."""
    OmegaConf.register_new_resolver("pazo_unique", lambda: secrets.token_hex(3), use_cache=True, replace=True)
    OmegaConf.register_new_resolver("pazo_job_dir", job_dir, replace=True)


def job_dir(override_dirname: str, overrides, num) -> str:
    """A multirun job's directory (`${pazo_job_dir:...}` in `hydra.sweep.subdir`): its overrides
    but the seed, which goes to config.yaml only (the seed_secret assumption); a job given a seed
    also gets its number, `job=<n>`, so that jobs that differ only in their seed do not share one."""
    seeded = any(str(o).split("=", 1)[0].lstrip("+~") == "seed" for o in overrides)
    if not seeded:
        return override_dirname
    return f"{override_dirname},job={num}" if override_dirname else f"job={num}"


def guard_hydra_record_writes() -> None:
    """Hydra writes a launch's record (`.hydra/config.yaml`, `hydra.yaml`, `overrides.yaml`) itself,
    before any of pazo's code runs; a disk that fills up during those writes (the check before the
    launch found room for a probe, not for the record) or refuses them ends in one `pazo: error:`
    line and exit 75, the fault status, instead of Hydra's traceback, and the launch's staging
    folder is removed, so the directory keeps the record it had. The record holds the seed, which
    the guarantee assumes secret: its files are readable by their owner only (0600)."""
    import hydra.core.utils as hydra_utils

    save = hydra_utils._save_config
    if getattr(save, "pazo_guarded", False):
        return

    def save_config(cfg, filename: str, output_dir) -> None:
        if LAUNCH is not None and Path(output_dir).name.startswith(STAGING_PREFIX):
            LAUNCH.run_dir = Path(output_dir).parents[1]   # (Hydra has made the run directory by now)
        try:
            save(cfg, filename, output_dir)
            gate.make_owner_only(Path(output_dir) / filename)   # (the record holds the seed, assumed secret)
        except OSError as err:
            fault = WriteFault(Path(output_dir) / filename, err)
            if Path(output_dir).name.startswith(STAGING_PREFIX):
                shutil.rmtree(output_dir, ignore_errors=True)
            print(f"pazo: error: {fault}; nothing of this launch was recorded: free space (or fix the "
                  "permissions), then run the same command again", file=sys.stderr)
            raise LaunchFault(fault) from None   # (an exit: Hydra reports every Exception)

    save_config.pazo_guarded = True
    hydra_utils._save_config = save_config


class LaunchFault(SystemExit):
    """A write the machine refused before a single run's launch was accepted (a full disk: the check
    of where it writes, Hydra's record of the launch), its line said: exit 75 (EX_TEMPFAIL). An
    exit, which Hydra lets through; under torchrun `pazo.train` tells the other ranks before it
    leaves, so that they do not wait for this one until `train.distributed_timeout_s`."""

    def __init__(self, fault: WriteFault):
        super().__init__(os.EX_TEMPFAIL)
        self.fault = fault


@dataclass
class Launch:
    """A single run's launch: the run directory its command line names (`planned`, as Hydra resolves
    it, to the second), the directories of that path that existed before the launch, and the run
    directory Hydra made (`run_dir`, known once Hydra writes the launch's record). A launch refused or
    interrupted before it is accepted removes the empty directories it made (`leave_no_trace`)."""

    planned: Path
    existed: frozenset[Path]
    run_dir: Path | None = None

    @classmethod
    def plan(cls, argv: list[str], config_name: str = "config") -> Launch:
        planned = planned_run_dir(argv, config_name)
        return cls(planned, existing_dirs(planned))

    def leave_no_trace(self) -> None:
        """Remove the directories this launch made that are empty (rmdir only: a file keeps its folder)."""
        remove_created_dirs(self.run_dir or self.planned, self.existed)


#: the launch of this process's single run (`pazo-train`, `pazo-audit`), while it is under way
LAUNCH: Launch | None = None


def check_single_launch(argv: list[str], config_name: str = "config") -> str | None:
    """Before Hydra runs a single run: plan its launch (`LAUNCH`) and check where it would write
    (`check_output_location`); the problem, a user's, or None. A full disk is one line and exit 75
    here (`LaunchFault`), before anything was written. A launch refused here leaves none of the
    folders the check made."""
    global LAUNCH
    launch = None
    try:
        launch = LAUNCH = Launch.plan(argv, config_name)   # (before the check below makes folders)
        check_output_location(argv, config_name)
    except (ConfigError, WriteFault) as err:
        if launch is not None:
            launch.leave_no_trace()
        if isinstance(err, ConfigError):
            return str(err)
        print(f"pazo: error: {err}; nothing was written: free space and run the same command again",
              file=sys.stderr)
        raise LaunchFault(err) from None
    return None


def launch_single(argv: list[str], start) -> None:
    """`start()` (an entry point's Hydra command line) for the single run `argv` names, with Hydra's
    record of it staged in `.hydra/launch-<pid>-<token>/` (the run accepts or drops it); whatever
    ends the launch before it is accepted, the directories it made and left empty go."""
    global LAUNCH
    from pazo.files.rundir import staging_subdir

    if "hydra.output_subdir" not in [a.split("=", 1)[0].lstrip("+~") for a in argv]:
        sys.argv.append(f"hydra.output_subdir={staging_subdir()}")
    try:
        start()
    finally:
        launch, LAUNCH = LAUNCH, None
        if launch is not None:
            launch.leave_no_trace()


def planned_run_dir(argv: list[str], config_name: str = "config") -> Path:
    """The absolute run directory of a single run's command line: `hydra.run.dir` (given, else the
    config's), resolved as Hydra resolves it (its time and token are this moment's: the directory
    Hydra makes a moment later may differ in them, never in the folders above)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    where = override_value(argv, "hydra.run.dir")
    if where is None or "${" in where:
        try:
            with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
                cfg = compose(config_name=config_name, overrides=list(argv), return_hydra_config=True)
            HydraConfig.instance().set_config(cfg)
            where = str(OmegaConf.select(cfg, "hydra.run.dir", throw_on_resolution_failure=True))
        except Exception as err:   # a hydra.* override Hydra cannot compose or resolve: the user's, said in one line
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(f"the run directory (hydra.run.dir) does not resolve: {first}") from None
    return Path(os.path.abspath(Path(where).expanduser()))


def launched_into(run_dir: Path) -> None:
    """Hydra has made the run directory `run_dir` of this process's single run (its task says so)."""
    if LAUNCH is not None:
        LAUNCH.run_dir = Path(run_dir)


register_resolvers()
guard_hydra_record_writes()


MULTIRUN_FLAGS = ("-m", "--multirun")


def unknown_flag(flags: list[str], own: tuple[str, ...] = ()) -> str | None:
    """The first of `flags` that neither Hydra's command line (its own parser's options) nor the
    entry point (`own`, e.g. `--plan`) knows, in one line with the close match, or None: Hydra's
    argparse would print its usage and a line of its own wording."""
    from hydra._internal.utils import get_args_parser

    known = (*get_args_parser()._option_string_actions, *own)
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name not in known:
            match = close_match(name, [k for k in known if k.startswith("--")])
            hint = f"; did you mean {match}?" if match else ""
            return f"unknown option {name}{hint} (--help lists the options)"
    return None


@dataclass
class MultirunJob:
    """One job of a multirun as Hydra's basic sweeper expands it: its number (Hydra's `job.num`),
    all its overrides, and the swept ones (what tells it from the other jobs)."""

    num: int
    overrides: list[str]
    swept: list[str]

    @property
    def label(self) -> str:
        """The swept overrides but the seed (which goes to config.yaml only, the seed_secret
        assumption: not to the terminal or a scheduler's log); a seeded job is named by its number,
        `job=<n>`, as its directory is (`job_dir`)."""
        shown = [o for o in self.swept if o.split("=", 1)[0].lstrip("+~") != "seed"]
        if len(shown) < len(self.swept):
            shown.append(f"job={self.num}")
        return " ".join(shown) or f"job {self.num}"


def multirun_jobs(argv: list[str]) -> list[MultirunJob] | None:
    """The jobs of `pazo-train -m a=1,2 b=x,y`, in Hydra's order (`BasicSweeper.split_arguments`,
    the sweeper pazo's configs use); None unless `argv` is a multirun with no other Hydra flag.
    A sweep Hydra's grammar refuses is a ConfigError."""
    flags = [a for a in argv if a.startswith("-")]
    if not flags or any(f not in MULTIRUN_FLAGS for f in flags):
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        overrides = OverridesParser.create().parse_overrides([a for a in argv if not a.startswith("-")])
        batches = BasicSweeper.split_arguments(overrides, None)
    except HydraException as err:
        raise ConfigError(" ".join(str(err).split())) from None
    swept = {o.key_or_group for o in overrides if o.is_sweep_override()}
    jobs = [job for batch in batches for job in batch]
    return [MultirunJob(num, list(job), [o for o in job if o.split("=", 1)[0].lstrip("+~") in swept])
            for num, job in enumerate(jobs)]


def check_multirun(argv: list[str], config_name: str = "config", check=None) -> str | None:
    """Every job of a multirun checked as a single run is (`check_overrides`) before the first
    starts: the first bad job's line (`job 3 of 4 (method=sgd2): ...`), or None."""
    try:
        jobs = multirun_jobs(argv)
    except ConfigError as err:
        return str(err)
    for job in jobs or []:
        problem = check_overrides(job.overrides, config_name, check)
        if problem:
            return f"job {job.num + 1} of {len(jobs)} ({job.label}) of the multirun: {problem}; no job was started"
    return None


#: the folders a command line may name for Hydra to write a run, or a multirun, into
HYDRA_DIRS = ("hydra.run.dir", "hydra.sweep.dir")
#: the config's keys that name a folder or file to read (every key of configs/ so named: a test holds
#: the list to them); given empty, `Path("")` would read the current folder. (An empty cache_dir is
#: read as null: no cache.)
CONFIG_PATHS = ("dataset.root", "dataset.public_folder", "dataset.tokenizer", "model.path")


def check_overrides(argv: list[str], config_name: str = "config", check=None,
                    own_flags: tuple[str, ...] = ()) -> str | None:
    """Compose the config (`config_name`) with the command line's overrides as Hydra will and check
    its values (`pazo.run.validate.validate_config`: every key's type and range, then what spans
    groups): the first line of the error (an unknown key, a value of the wrong type or out of range,
    a missing config group option), or None. `check(cfg)`: the entry point's own checks (e.g. the
    audit's settings), raising ConfigError. First, in pazo's words, what Hydra would word its own
    way: an argument its grammar cannot read (`not_an_override`), a list for one option, a section
    renamed to another option (`renamed_section`), and an option neither Hydra nor the entry point
    knows (`unknown_flag`; `own_flags`: the entry point's own). A multirun (`-m`): each of its jobs
    (`check_multirun`); Hydra's other flags (--help, --cfg, ...) are left to Hydra."""
    from pazo.run.door import list_for_one_choice, renamed_section

    flags = [a for a in argv if a.startswith("-")]
    problem = _unreadable_command_line(argv, flags, own_flags)
    if problem:
        return problem
    if any(a in MULTIRUN_FLAGS for a in argv):
        return check_multirun(argv, config_name, check)
    if flags:
        return None
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides = [a for a in argv if not a.startswith("hydra.")]
    problem = list_for_one_choice(overrides) or renamed_section(overrides, config_name)
    if problem is None and "torch" not in sys.modules:   # (the audit's own check words its values better)
        problem = refusal_before_torch(overrides, config_name, values=check is None or config_name == "config")
    if problem:
        return problem
    from pazo.run.validate import validate_config  # (also registers the method schemas Hydra composes with)

    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            try:
                cfg = compose(config_name=config_name, overrides=overrides)
            except HydraException as err:
                unknown = explain_unknown_key(err, overrides, lambda o: compose(config_name=config_name, overrides=o))
                if unknown:
                    return unknown
                raise
        try:
            validate_config(cfg)
        except ConfigError as err:   # the entry point's own rule for its own config says it better
            own = _own_check(check, cfg) if config_name != "config" else None
            return own or str(err)
        if check is not None:
            check(cfg)
    except ConfigError as err:
        return str(err)
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        lines = _error_lines(err)
        return (merged_type_problem(err) or _unknown_option(lines) or "; ".join(dict.fromkeys(lines[:2]))
                or type(err).__name__)
    return None


def _unreadable_command_line(argv: list[str], flags: list[str], own_flags: tuple[str, ...]) -> str | None:
    """What Hydra would refuse in its own words before composing anything: an option neither it nor
    the entry point knows (`unknown_flag`), an argument its grammar cannot read (`not_an_override`),
    an empty folder to run or sweep into (Hydra would write into the current folder), or an empty path
    the config reads (the run would read the current folder)."""
    from pazo.run.door import not_an_override

    unreadable = not_an_override([a for a in argv if a not in flags]) if set(flags) <= set(MULTIRUN_FLAGS) else None
    return (unknown_flag(flags, own_flags) or unreadable
            or next((f"{key}: {EMPTY_PATH}" for key in (*HYDRA_DIRS, *CONFIG_PATHS)
                         if override_value(argv, key) == ""), None))


def merged_type_problem(err: Exception) -> str | None:
    """Hydra's `Error merging override method.lr=abc` (a value the method's typed section cannot
    hold) in the schema's own words (`method.lr must be a number, got the string 'abc'`, `got the
    boolean true`); else None."""
    from omegaconf.errors import ValidationError

    from pazo.config_schema import type_problem

    cause, key = err.__cause__, getattr(err.__cause__, "full_key", None)
    if isinstance(cause, ValidationError) and key:
        return type_problem(str(key), cause)
    return None


def _error_lines(err: Exception) -> list[str]:
    """The lines of Hydra's or OmegaConf's error (and its cause) that say what is wrong."""
    lines = [line.strip() for e in (err, err.__cause__) if e is not None for line in str(e).splitlines()]
    return [line for line in lines if line and not line.startswith(("full_key", "object_type", "To append"))]


def refusal_before_torch(overrides: list[str], config_name: str = "config", values: bool = True) -> str | None:
    """The line `check_overrides` refuses `overrides` with, where it is found without the method,
    data set and model registries (whose modules import torch: seconds before a refusal): an
    option not in its config group, a key not in its section (the method's too, where it is one
    of pazo's: `pazo.run.door.method_keys`), and with `values` the first part of the full check
    (`pazo.run.door.check_run_sections`: the run's own sections in order, the schedule against the
    steps). The method's values are typed by its registered schema when the full check composes: a
    method override may be refused there first, so after one nothing later is said here. None:
    nothing found here, and the full check decides."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from pazo.run.door import check_run_sections, method_schemas_stood_in

    with method_schemas_stood_in(), initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        try:
            cfg = compose(config_name=config_name, overrides=overrides)
        except HydraException as err:
            return _composition_refusal(err, overrides, lambda o: compose(config_name=config_name, overrides=o))
        except OmegaConfBaseException:
            return None
    if not values or _method_overrides(overrides):
        return None
    try:
        check_run_sections(cfg)
    except ConfigError as err:
        return str(err)
    except OmegaConfBaseException:   # (e.g. an interpolation that does not resolve: the full check's to word)
        pass
    return None


def _method_overrides(overrides: list[str]) -> list[int]:
    """The positions of the overrides that set a key of the method (`method.lr=abc`, not `method=`)."""
    return [at for at, text in enumerate(overrides) if text.split("=", 1)[0].lstrip("+~").startswith("method.")]


def _composition_refusal(err: Exception, overrides: list[str], compose) -> str | None:
    """Hydra's refusal of a composition where its meaning is certain without the registries: an
    option not in its group's (`method=pazom`), a key that one of pazo's methods does not have
    (`pazo.run.door.method_keys`) on the first override of the method's keys, a key not in another
    section on an override before any of the method's keys (an earlier override of the method's may
    be refused first by its schema, which types its values when the full check composes)."""
    lines = _error_lines(err)
    if lines and "_schema'" not in lines[0] and _unknown_option(lines):
        return _unknown_option(lines)
    key = _unknown_key_named(str(err))
    if key is None:
        return None
    keys = [text.split("=", 1)[0].lstrip("+~") for text in overrides]
    first_method = min(_method_overrides(overrides), default=len(overrides))
    if key.split(".")[0] == "method":   # (the first of the method's overrides: none before it to refuse first)
        first = keys[first_method:first_method + 1] == [key]
        return explain_unknown_key(err, overrides, compose, method_keys_known=True) if first else None
    if key not in keys[:first_method]:
        return None
    return explain_unknown_key(err, overrides, compose)


def _unknown_key_named(message: str) -> str | None:
    """The key of Hydra's "Could not override 'train.foo'", or None for another message."""
    import re

    found = re.match(r"Could not (?:override|append to config)[^']*'([^']+)'", message)
    return found.group(1) if found else None


def _unknown_option(lines: list[str]) -> str | None:
    """Hydra's "Could not find 'method/pazom'" and the group's "Available options" after it as one
    line naming the close match (`unknown_group_option`), or its "Could not load 'logger/csv'" for an
    option of a list (`logger=[wandb,csv]`, which Hydra loads one by one, listing no options)
    (`missing_list_option`); None for another error."""
    if len(lines) >= 2 and lines[1].startswith("Available options"):
        return unknown_group_option(lines[0], [o for o in lines[2:] if o.isidentifier()])
    return missing_list_option(lines[0]) if lines else None


#: what a user who gives a config group a list most likely meant, by group
LIST_HINTS = {"logger": "; logger= picks one config (W&B's settings): the loggers the rows go to are a list of "
                        "their own, e.g. logger.report_to=[csv,tensorboard] (any of {loggers})"}


def missing_list_option(message: str) -> str | None:
    """Hydra's "Could not load 'logger/tensorboard'" for an option of a config group that is none:
    one line naming it, the close match and the group's options (its yaml files and the options
    registered in code), with what a list of that group most likely meant (`LIST_HINTS`)."""
    import re

    from hydra.core.config_store import ConfigStore

    from pazo.config_schema import LOGGERS

    found = re.search(r"Could not load '(?P<group>[^'/]+)/(?P<option>[^'/]+)'", message)
    folder = CONFIG_DIR / found["group"] if found else None
    if folder is None or not folder.is_dir() or (folder / f"{found['option']}.yaml").exists():
        return None
    stored = ConfigStore.instance().repo.get(found["group"], {})
    options = {p.stem for p in folder.glob("*.yaml")} | {name.removesuffix(".yaml") for name in stored}
    hint = LIST_HINTS.get(found["group"], "").format(loggers=", ".join(LOGGERS))
    return unknown_group_option(f"Could not find '{found['group']}/{found['option']}'", options) + hint


def unknown_group_option(message: str, options) -> str | None:
    """Hydra's "Could not find 'method/pazom'" (`message`) with the group's options as one line
    naming the close match (`pazo.errors.unknown_option`); None for another message."""
    import re

    found = re.search(r"Could not find '(?P<group>[^']+)/(?P<option>[^'/]+)'", message)
    if not found:
        return None
    return unknown_option(found["group"], found["option"], [o for o in options if not str(o).endswith("_schema")])


def explain_unknown_key(err: Exception, overrides: list[str], compose,
                        method_keys_known: bool = False) -> str | None:
    """Hydra's "Could not override 'method.k'" as one line that names the close match and the keys
    there are (`pazo.errors.unknown_key`), found by composing the config without that override
    (`compose(overrides)`); None for another error of composition, and with `method_keys_known`
    where the method composed is not one of pazo's (`pazo.run.door.method_keys`: a stand-in for
    its schema has not its keys)."""
    from omegaconf import OmegaConf

    from pazo.run.door import method_keys

    key = _unknown_key_named(str(err))
    cfg = None if key is None else _composed_without(key, overrides, compose)
    if cfg is None or (method_keys_known and cfg.method.get("name") not in method_keys()):
        return None
    parts, node = key.split("."), cfg
    for depth, part in enumerate(parts):
        if not OmegaConf.is_dict(node):
            return None
        if part not in node:
            missing = ".".join(parts[:depth + 1])
            where = ".".join(parts[:depth]) or None
            aliases = _method_aliases(cfg) if where == "method" else {}
            if where == "method" and "name" in node:
                where = f"method {node.name}"
            return unknown_key(missing, list(node.keys()), aliases, where=where)
        node = node[part]
    return None


def _composed_without(key: str, overrides: list[str], compose):
    """The config composed without `key`'s override, to list the keys there are: with the other
    overrides, else (they hold another mistake, e.g. `method.lr=abc`) with the config groups'
    options alone, which decide what keys a section has; None if neither composes."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    rest = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != key]
    for attempt in (rest, [o for o in rest if "." not in o.split("=", 1)[0]]):
        try:
            return compose(attempt)
        except (HydraException, OmegaConfBaseException):
            continue
    return None


def _method_aliases(cfg) -> dict[str, str]:
    """The method's paper symbols for its keys (e.g. DP-AggZO's `k` for `q`): for pazo's own methods
    as their source declares them (`pazo.run.door.method_keys`, without torch), else the registry's."""
    from pazo.run.door import method_keys

    known = method_keys().get(cfg.method.get("name"))
    if known is not None:
        return dict(known.aliases)
    from pazo.methods import method_info

    try:
        return dict(getattr(method_info(cfg.method.name).config, "ALIASES", {}))
    except Exception:  # an unknown method is said elsewhere
        return {}


def _own_check(check, cfg) -> str | None:
    """The entry point's own check of a config the general one refused (e.g. the audit's "an audit
    needs a private method" rather than a training run's advice to use privacy=none), or None."""
    if check is None:
        return None
    try:
        check(cfg)
    except ConfigError as err:
        return str(err)
    except Exception:  # the config is broken in a way only the general check names
        return None
    return None


def override_value(argv: list[str], key: str) -> str | None:
    """The value of the last `key=...` on the command line as Hydra reads it (quotes removed), or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for arg in reversed(argv):
        if arg.split("=", 1)[0].lstrip("+~") == key:
            try:
                value = OverridesParser.create().parse_override(arg).value()
            except Exception:  # Hydra itself says what is wrong with it
                return None
            return None if value is None else str(value)
    return None


def check_output_location(argv: list[str], config_name: str = "config") -> None:
    """The run directory (`hydra.run.dir`, else the configured default), or the fixed folder above
    a directory named per launch, checked before Hydra writes there: a file in its place, no write
    access or a full disk is one line instead of Hydra's traceback."""
    where = override_value(argv, "hydra.run.dir")
    if where is None:
        where = str(OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / f"{config_name}.yaml").hydra.run)["dir"])
    fixed = where.split("${", 1)[0]
    if "${" in where:  # the launch's own directory is made below the part that does not vary
        fixed = fixed.rsplit("/", 1)[0] if "/" in fixed else "."
    check_output_dir(Path(fixed or ".").expanduser())
