"""The refusals a command line can be given before torch loads (`pazo.run.cli.check_overrides`).

Checking a run's overrides in full reads the method, data set and model registries, whose modules
import torch: seconds on a loaded machine before a one-line refusal. Most mistakes need none of
that: a list where a config group takes one name (`list_for_one_choice`), a config group's option
that is not one, a key that is not there, a value the sections' schemas refuse (an engine's name
too), a schedule that does not fit the steps given (`check_run_sections`;
`pazo.run.cli.refusal_before_torch`, which composes with `method_schemas_stood_in`), a key that
pazo's method does not have (`method_keys`, read from the methods' source). What needs the
registries (the method's values, the data set's and model's) is left to the full check, which
starts with `check_run_sections` and so refuses the same command lines with the same lines, the
same mistake first where there are several."""
from __future__ import annotations

import ast
import functools
import itertools
import re
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from pazo import CONFIG_DIR
from pazo.config_schema import check_section_values
from pazo.errors import ConfigError, close_match

#: config groups whose option may be a list on purpose (Hydra merges the options in order)
LIST_GROUPS = ("logger",)


#: how a run goes without what a group's option gives, where another key turns it off too
TURNED_OFF = {"privacy": "a run without privacy, as a non-private method needs, is privacy=none or "
                         "privacy.epsilon=null"}


def one_choice_defaults() -> dict[str, str | None]:
    """The config groups of `configs/config.yaml`'s defaults (dataset, model, method, ...) that take
    one option, each with its default as written there (`${dataset}_${method}` for tuning, None for
    experiment): every group but Hydra's own and `LIST_GROUPS`."""
    defaults = {}
    for entry in OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "config.yaml"))["defaults"]:
        if isinstance(entry, dict):
            key, default = next(iter(entry.items()))
            group = key.split()[-1]
            if "/" not in group and group not in LIST_GROUPS:
                defaults[group] = default
    return defaults


def one_choice_groups() -> list[str]:
    """The config groups that take one option (`one_choice_defaults`)."""
    return list(one_choice_defaults())


def group_options(group: str) -> list[str]:
    """The options of config group `group`: its files under `configs/<group>/`."""
    return sorted(path.stem for path in (CONFIG_DIR / group).glob("*.yaml"))


def options_have_names(group: str) -> bool:
    """Whether an option of `group` has a `name` key (dataset, model, method, ...; a privacy section
    has none, and an experiment's or a tuning file's keys are the whole config's)."""
    return any("name" in OmegaConf.load(CONFIG_DIR / group / f"{option}.yaml") for option in group_options(group))


def list_for_one_choice(overrides: list[str]) -> str | None:
    """`method=[mezo]` (a list where a config group takes one name) as one line that says so and
    how to run several; None when no override gives such a group a list. (Hydra composed such a
    list and then failed on `${dataset}_${method}` with a message about interpolation.)"""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    groups = one_choice_groups()
    for text in overrides:
        try:
            override = OverridesParser.create().parse_override(text)
        except Exception:   # a grammar Hydra refuses: its own line, from the check that composes
            continue
        group = override.key_or_group.lstrip("+~")
        value = override.value() if group in groups and override.package is None else None
        if isinstance(value, list):
            return (f"{text.split('=', 1)[0].lstrip('+~')}={override.get_value_element_as_str()} is a list; "
                    f"{group} takes one name (for several runs: -m {group}={','.join(_examples(group, value))} "
                    "or pazo-sweep)")
    return None


def not_an_override(arguments: list[str]) -> str | None:
    """The first argument Hydra's override grammar cannot read, as one line in pazo's words; None
    when it reads them all. (Hydra's own: `Error parsing override 'b'; missing EQUAL at '<EOF>'`, or
    `LexerNoViableAltException: b c` for one with a space.)"""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, previous = OverridesParser.create(), None
    for text in arguments:
        try:
            parser.parse_override(text)
        except Exception as err:   # (Hydra's grammar errors, of several types)
            return _unreadable(text, previous, err)
        previous = text
    return None


def _unreadable(text: str, previous: str | None, err: Exception) -> str:
    """Why `text` (after the override `previous`) is no override, and how to write it."""
    if "=" not in text and not text.startswith("~"):
        if previous is not None and "=" in previous:   # a value the shell split at an unquoted space
            key = previous.split("=", 1)[0].lstrip("+~")
            return (f"{text!r} is not an override (key=value): if it is the rest of {key}'s value, quote the value "
                    f"whole, as one argument: '{previous} {text}'")
        return f"{text!r} is not an override: an override is key=value (e.g. train.steps=5)"
    reason = " ".join(str(err).split()).split("See https://", 1)[0].strip().rstrip(".")
    reason = reason.removeprefix(f"Error parsing override '{text}'").strip(" ;:") or type(err).__name__
    key = text.split("=", 1)[0].lstrip("+~")
    return (f"{text!r} cannot be read as an override ({reason}): a value of {key} with spaces or special "
            f"characters is quoted whole, {key}='...'")


def renamed_option(group: str, value: str, composed: str | None) -> str | None:
    """`dataset.name=cifar10` typed where `dataset=cifar10` was meant, as one line that says what to
    write; None unless `value` is another option of `group` (a config of its own; a registered name
    without one is a plugin's or a test's, set on purpose) than the one the section was composed
    from (`composed`). Such a section keeps the keys and values of the option it was composed from,
    so it was refused by a key the user never typed, or, where every key fit, ran as neither option."""
    if value == composed or "/" in value or not (CONFIG_DIR / group / f"{value}.yaml").is_file():
        return None
    return (f"{group}.name={value} renames the {group} section but keeps the keys and values of the {group} it "
            f"was composed from ({group}={composed}); choose the {group} with {group}={value}")


def renamed_section(overrides: list[str], config_name: str = "config") -> str | None:
    """The `renamed_option` line of the first `<group>.name=<value>` override of a config group
    that takes one option, the group's option read from Hydra's own choices for the whole command
    line (an experiment chooses options too); None when there is none, or the config does not compose
    (the checks after this one say why). A group whose options have no name (privacy) is said
    first, without composing: `nameless_option`."""
    defaults = one_choice_defaults()   # (config.yaml read once, for the groups and a nameless group's default)
    named = [(group, value) for group, value in (_group_name(text) for text in overrides) if group in defaults]
    nameless = next((nameless_option(group, value, defaults[group]) for group, value in named
                     if not options_have_names(group)), None)
    if nameless or not named:
        return nameless
    choices = _composed_choices(overrides, config_name)
    if choices is None:
        return None
    problems = (renamed_option(group, value, choices.get(group)) for group, value in named)
    return next((problem for problem in problems if problem), None)


def nameless_option(group: str, value: str, default: str | None) -> str:
    """`privacy.name=none` for a group whose options have no name (privacy, experiment, tuning), as
    one line that says how the group's option is chosen (Hydra's own line was `unknown key
    privacy.name`, where `model.name=lstm` says to choose the model with model=lstm). `default`:
    the group's default in config.yaml's defaults (`one_choice_defaults`)."""
    options = group_options(group)
    if default is not None and "${" in default:   # chosen by other groups' options (tuning: ${dataset}_${method})
        chosen_by = _choices_making(default, value)
        how = f"the {group} is chosen by {default}" + (f": choose it with {chosen_by}" if chosen_by else
                                                         f", the options of those groups (configs/{group}/)")
    elif value in options:
        how = f"choose one with {group}={value}"
    else:
        match = close_match(value, options)
        how = (f"choose one with {group}=<option>" + (f"; did you mean {group}={match}?" if match else "")
               + f" (choices: {', '.join(options)})")
    also = f"; {TURNED_OFF[group]}" if group in TURNED_OFF else ""
    return f"{group}.name={value}: {group} options have no name key; {how}{also}"


def _choices_making(expression: str, option: str) -> str | None:
    """The options of the groups that `expression` names (`${dataset}_${method}`) which make it
    `option`, as overrides (`dataset=cifar10 method=mezo`); None when none do."""
    groups = re.findall(r"\$\{(\w+)\}", expression)
    for chosen in itertools.product(*(group_options(group) for group in groups)):
        text = expression
        for group, choice in zip(groups, chosen):
            text = text.replace(f"${{{group}}}", choice, 1)
        if text == option:
            return " ".join(f"{group}={choice}" for group, choice in zip(groups, chosen))
    return None


def _group_name(override: str) -> tuple[str | None, str]:
    """(group, value) of a `<group>.name=<value>` override; (None, "") for any other."""
    key, _, value = override.partition("=")
    group, _, leaf = key.lstrip("+~").partition(".")
    return (group, value.strip("'\"")) if leaf == "name" and value else (None, "")


def _composed_choices(overrides: list[str], config_name: str) -> dict | None:
    """The option Hydra composes for each config group under `overrides` (its runtime choices)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with method_schemas_stood_in(), initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException, ValueError):
        return None
    return {group: str(choice) for group, choice in cfg.hydra.runtime.choices.items()}

def _examples(group: str, given: list) -> list[str]:
    """Two options of `group` for the hint: the list's own, else the group's first options."""
    names = [str(v) for v in given if isinstance(v, str)]
    options = [option for option in group_options(group) if option not in names]
    return (names + options)[:max(2, len(names))]


@dataclass(frozen=True)
class MethodKeys:
    """A method's keys and its paper symbols for them (`ALIASES`), as its typed config declares them."""
    keys: tuple[str, ...]
    aliases: dict


@functools.cache
def method_keys() -> dict[str, MethodKeys]:
    """The keys of each of pazo's own methods, by name, read from the source of `pazo/methods/`
    without importing it (its modules import torch): each `@register_method(<name>, config=<class>)`
    and that dataclass's annotated fields, through its bases there. A plugin's method is not here."""
    classes, registered = {}, {}
    for path in sorted((Path(__file__).resolve().parents[1] / "methods").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = node
                registered.update(_registrations(node))
    return {name: MethodKeys(tuple(_fields(classes, config)), _aliases(classes, config))
            for name, config in registered.items()}


def _registrations(node: ast.ClassDef) -> dict[str, str]:
    """name -> config class name of the `@register_method` decorators on class `node`."""
    out = {}
    for call in node.decorator_list:
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "register_method":
            config = next((k.value for k in call.keywords if k.arg == "config"), None)
            if call.args and isinstance(call.args[0], ast.Constant) and isinstance(config, ast.Name):
                out[call.args[0].value] = config.id
    return out


def _fields(classes: dict, name: str) -> list[str]:
    """The dataclass fields of class `name` (annotated names, its bases' first)."""
    node = classes.get(name)
    if node is None:
        return []
    inherited = [key for base in node.bases if isinstance(base, ast.Name) for key in _fields(classes, base.id)]
    own = [item.target.id for item in node.body if isinstance(item, ast.AnnAssign)
           and isinstance(item.target, ast.Name) and "ClassVar" not in ast.unparse(item.annotation)]
    return list(dict.fromkeys(inherited + own))


def _aliases(classes: dict, name: str) -> dict:
    """The `ALIASES` of class `name` or of its nearest base that has one ({} if none)."""
    node = classes.get(name)
    if node is None:
        return {}
    for item in node.body:
        if isinstance(item, ast.Assign) and any(getattr(t, "id", None) == "ALIASES" for t in item.targets):
            return ast.literal_eval(item.value)
    for base in node.bases:
        found = _aliases(classes, base.id) if isinstance(base, ast.Name) else {}
        if found:
            return found
    return {}


@contextmanager
def method_schemas_stood_in():
    """Each `configs/method/<name>.yaml` starts from `<name>_schema`, which the method's module
    stores in Hydra's ConfigStore when it registers (and imports torch to do so): while composing
    here, a node with the method's keys (`method_keys`; values unset) stands in for each schema not
    stored yet (an empty one where the method is not pazo's), and goes again after."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    stored = store.repo.setdefault("method", {})
    added = [f"{path.stem}_schema" for path in (CONFIG_DIR / "method").glob("*.yaml")
             if f"{path.stem}_schema.yaml" not in stored]
    keys = method_keys()
    for name in added:
        known = keys.get(name.removesuffix("_schema"))
        store.store(group="method", name=name, node=dict.fromkeys(known.keys) if known else {})
    stand_ins = {name: stored[f"{name}.yaml"] for name in added}
    try:
        yield
    finally:
        for name, node in stand_ins.items():
            if stored.get(f"{name}.yaml") is node:
                del stored[f"{name}.yaml"]


def schedule_problem(schedule, steps: int, how: str = "") -> str | None:
    """Why schedule section `schedule` does not fit a run of `steps` steps (set by `how`), or None.
    `schedule`: the typed section (`pazo.config_schema.ScheduleSchema`), or, where it is checked
    before it is typed (the command line, the composed config), its mapping."""
    values = schedule if isinstance(schedule, Mapping) else vars(schedule)
    name = values.get("name", "constant")
    warmup, every = values.get("warmup_steps", 0), values.get("decay_every", 0)
    if name in ("warmup", "cosine") and warmup > steps:
        return (f"schedule.warmup_steps={warmup} is longer than the run's {steps} steps ({how}): the run would "
                f"end before its warm-up does; give schedule.warmup_steps={steps} or fewer, or more steps")
    if name == "step" and every >= steps:
        return (f"schedule.decay_every={every} is not shorter than the run's {steps} steps ({how}): "
                f"schedule=step would never decay; give schedule.decay_every={max(1, steps - 1)} or fewer, "
                "or schedule=constant")
    return None


def check_run_sections(cfg) -> dict:
    """The first part of every check of a composed run config, which needs no registry: the top
    level and the run's own sections in the config's order (train, warm_start, engine, privacy,
    logger, schedule, optimizer: `check_section_values`), then whether the schedule fits the steps
    given (from epochs, the steps wait for the data's size). The full check
    (`pazo.run.validate.validate_config`) starts with it and the refusal before torch loads is it,
    so that a config with several mistakes is refused for the same one by both. The config as
    plain containers, resolved; a ConfigError for the first mistake."""
    data = check_section_values(cfg)
    steps = data["train"].get("steps")
    problem = schedule_problem(data.get("schedule") or {}, steps, f"train.steps={steps}") if steps else None
    if problem:
        raise ConfigError(problem)
    return data
