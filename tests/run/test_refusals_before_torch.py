"""A command line refused for its config says its one line before torch loads (issue #60: 3 s here and
5-9 s under load for `pazo-train method=pazom`), and says the line the full check says; a list where a
config group takes one name is said to be one (it was an error about interpolation)."""
from __future__ import annotations

import json
from dataclasses import fields

from fresh_python import codes_and_heavy, fresh_python
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pazo import CONFIG_DIR
from pazo.methods import METHODS, method_info
from pazo.run.cli import check_overrides, refusal_before_torch
from pazo.run.door import LIST_GROUPS, method_keys, one_choice_groups

GROUPS = ("dataset", "model", "method", "privacy", "schedule", "optimizer")
SECTIONS = {"train": ("steps", "batch_size", "epochs", "log_every"), "privacy": ("epsilon", "delta"),
            "warm_start": ("epochs", "lr"), "schedule": ("final",), "engine": ("chunk_size",)}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def test_refused_configs_leave_torch_unimported(tmp_path):
    """Each kind of refusal that needs no registry (an unknown option, an unknown key, a value the
    schema refuses, a list for one name), through `pazo-train`'s own start in a fresh process: exit 2
    with its line, and torch not imported."""
    refused = [["method=pazom"], ["+train.foo=1"], ["train.steps=0"], ["privacy.epsilon=abc"], ["method=[mezo]"],
               ["schedule=cosine", "schedule.warmup_steps=-1"], ["schedule=step", "train.steps=5"]]
    code = ("import json, sys\n"
            "import pazo.train\n"
            "codes = []\n"
            f"for argv in {refused!r}:\n"
            "    sys.argv = ['pazo-train', *argv]\n"
            "    try:\n"
            "        pazo.train.cli()\n"
            "    except SystemExit as stop:\n"
            "        codes.append(stop.code)\n"
            "print(json.dumps([codes, 'torch' in sys.modules]))\n")
    out = fresh_python(code, tmp_path)
    codes, torch_loaded = json.loads(out.stdout.splitlines()[-1])
    assert codes == [2] * len(refused), out.stderr
    assert out.stderr.count("pazo: error: ") == len(refused), out.stderr
    assert not torch_loaded


def misspelled(name: str) -> str:
    return name[:-1] + ("x" if name[-1] != "x" else "y")


@st.composite
def unknown_method_keys(draw) -> list[str]:
    """A command line that sets a key the method it composes does not have (a misspelling of one
    of its keys, or another name) on the first of its overrides of the method's keys, among
    overrides that are fine."""
    method = draw(st.sampled_from(options("method")))
    keys = {f.name for f in fields(method_info(method).config)}
    key = draw((st.sampled_from(sorted(keys)).map(misspelled) | st.from_regex(r"[a-z][a-z_]{0,7}", fullmatch=True))
               .filter(lambda k: k not in keys))
    rest = draw(st.lists(st.sampled_from(["privacy=none", "train.steps=5", "dataset=digits", "method.lr=0.1"]),
                         max_size=2, unique=True))
    unknown = f"method.{key}={draw(st.sampled_from(['1', 'abc']))}"
    line = draw(st.permutations([f"method={method}", unknown, *rest]))
    # the first of the method's overrides, as the refusal before torch takes it (after another, that
    # one's value may be the mistake the full check names first)
    first, at = min(at for at, text in enumerate(line) if text.startswith("method.")), line.index(unknown)
    line[first], line[at] = line[at], line[first]
    return line


def test_the_method_keys_read_from_the_source_are_the_registered_configs():
    """Every method pazo registers: the keys and paper symbols `method_keys` reads from the source,
    without importing it, are its typed config's fields and ALIASES (a config declared otherwise, or a
    method registered without `config=<a class of pazo/methods/>`, fails here)."""
    read = method_keys()
    builtin = [name for name, _ in METHODS.items() if METHODS.builtin(name)]
    assert sorted(read) == sorted(builtin)
    for name in builtin:
        config = method_info(name).config
        assert read[name].keys == tuple(f.name for f in fields(config)), name
        assert read[name].aliases == getattr(config, "ALIASES", {}), name


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command_lines=st.lists(unknown_method_keys(), min_size=2, max_size=3))
@example(command_lines=[["method.qq=3"], ["method=dp_aggzo", "method.k=4"]])
def test_an_unknown_method_key_is_refused_before_torch(command_lines, tmp_path):
    """The rule, over every method of configs/method/ and random keys it does not have, through
    `pazo-train`'s own start in a fresh process: each command line is one `pazo: error:` line, the
    full check's (the registries loaded, as in this process), exit 2, and no heavy module is
    imported by the end (the keys come from the methods' source: `method_keys`)."""
    codes, heavy, out = codes_and_heavy("import pazo.train\n"
                                        "codes = []\n"
                                        f"for argv in {command_lines!r}:\n"
                                        "    sys.argv = ['pazo-train', *argv]\n"
                                        "    try:\n"
                                        "        pazo.train.cli()\n"
                                        "    except SystemExit as stop:\n"
                                        "        codes.append(stop.code)\n", tmp_path)
    assert codes == [2] * len(command_lines), out.stderr
    assert out.stderr.splitlines() == [f"pazo: error: {check_overrides(argv)}" for argv in command_lines]
    assert heavy == []


@st.composite
def unknown_method_key_among_method_mistakes(draw) -> list[str]:
    """An unknown key of the method composed among other overrides of its keys, some of them values
    its schema refuses (types it checks only when the full check composes), in any order."""
    others = draw(st.lists(st.sampled_from(["method.lr=abc", "method.lr=[1]", "method.lr=0.1"]), min_size=1,
                           max_size=2))
    return draw(st.permutations(draw(unknown_method_keys()) + others))


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command_lines=st.lists(unknown_method_key_among_method_mistakes(), min_size=2, max_size=3))
@example(command_lines=[["method.lr=abc", "method.qq=3"], ["method=dp_aggzo", "method.q=abc", "method.k=4"]])
def test_an_unknown_method_key_is_refused_before_torch_for_the_full_checks_mistake(command_lines, tmp_path):
    """The rule where the method's overrides hold several mistakes: the refusal before torch loads
    (in a fresh process, where the methods' schemas are stood in for) names the mistake the full
    check names first (in this process, the registries loaded), or leaves the line to it."""
    out = fresh_python("import json\nfrom pazo.run.cli import refusal_before_torch\n"
                       f"print(json.dumps([refusal_before_torch(argv) for argv in {command_lines!r}]))\n", tmp_path)
    early = json.loads(out.stdout.splitlines()[-1])
    full = [check_overrides(argv) for argv in command_lines]
    assert None not in full
    assert all(line is None or line == expected for line, expected in zip(early, full)), (early, full)


@st.composite
def refused_command_lines(draw) -> list[str]:
    """An override set with one mistake of a kind found without the registries."""
    kind = draw(st.sampled_from(["option", "key", "value", "schedule"]))
    if kind == "schedule":   # (a warm-up longer than the run, or a step decay that never comes)
        steps = draw(st.integers(1, 50))
        name, key = draw(st.sampled_from([("cosine", "warmup_steps"), ("warmup", "warmup_steps"),
                                          ("step", "decay_every")]))
        return [f"schedule={name}", f"schedule.{key}={steps + draw(st.integers(1, 100))}", f"train.steps={steps}"]
    if kind == "option":
        group = draw(st.sampled_from(GROUPS))
        return [f"{group}={misspelled(draw(st.sampled_from(options(group))))}"]
    section = draw(st.sampled_from(sorted(SECTIONS)))
    if kind == "key":
        key = misspelled(draw(st.sampled_from(SECTIONS[section])))
        return [f"{draw(st.sampled_from(['', '+']))}{section}.{key}=1"]
    value = draw(st.sampled_from(["-3", "abc", "'1'", "[1]", "true"]))
    return [f"{section}.{draw(st.sampled_from(SECTIONS[section]))}={value}"]


@settings(max_examples=6, deadline=None)
@given(refused_command_lines(), st.sampled_from([[], ["method=mezo", "privacy=none"], ["dataset=mnist"]]))
@example(["method=pazom"], [])
@example(["+train.foo=1"], [])
def test_a_refusal_before_torch_is_the_full_checks_line(mistake, rest):
    """The rule: whatever the refusal found before torch loads says, the full check (the registries
    loaded, as in this process) says the same line; a command line the full check accepts is not
    refused before it."""
    full = check_overrides(rest + mistake)   # (torch is loaded in this process: the full check alone)
    early = refusal_before_torch(rest + mistake)
    assert early is None or early == full
    assert full is not None


@settings(max_examples=5, deadline=None)
@given(st.lists(st.sampled_from(GROUPS).flatmap(lambda g: st.sampled_from([f"{g}={o}" for o in options(g)])),
                max_size=3, unique_by=lambda o: o.split("=")[0]))
def test_an_accepted_command_line_is_not_refused_before_torch(overrides):
    if check_overrides(overrides) is None:
        assert refusal_before_torch(overrides) is None


def test_every_config_group_but_the_loggers_takes_one_name():
    assert sorted(one_choice_groups()) == sorted(["dataset", "model", "method", "privacy", "schedule", "optimizer",
                                                  "experiment", "tuning"])
    assert LIST_GROUPS == ("logger",)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(GROUPS + ("experiment",)), st.sampled_from(["", "+"]),
       st.lists(st.sampled_from(["mezo", "digits", "none", "cosine", "adam", "cifar10"]), max_size=3))
@example("method", "", ["mezo"])
def test_a_list_where_a_group_takes_one_name_is_said_to_be_one(group, prefix, names):
    """The rule, over every config group that takes one option and list shapes (empty, one, several,
    with +): one line that says the group takes one name and how to run several."""
    given = f"{group}=[{','.join(names)}]"
    problem = check_overrides([prefix + given])
    assert problem is not None and problem.startswith(f"{given} is a list; {group} takes one name"), problem
    assert f"-m {group}=" in problem and "pazo-sweep" in problem


def test_the_reported_list_line():
    assert check_overrides(["method=[mezo]"]) == (
        "method=[mezo] is a list; method takes one name (for several runs: -m method=mezo,dope_sgd or pazo-sweep)")


def test_a_list_of_loggers_is_still_composed():
    assert check_overrides(["logger=[wandb]"]) is None
    assert "logger.report_to=[csv,tensorboard]" in check_overrides(["logger=[wandb,csv]"])
