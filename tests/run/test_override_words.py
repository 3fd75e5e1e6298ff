"""A command line Hydra cannot take is one `pazo: error:` line in pazo's words, naming the key and
what it expects (issue #60), not Hydra's: a method key given a value of the wrong type (`method.lr=abc`:
"Value 'abc' of type 'str' could not be converted to Float") reads as the run's other sections' type
errors do, and an argument that is no override (the shell split `hydra.run.dir=/tmp/a b` at its
space: "missing EQUAL at '<EOF>'", or 'b c': "LexerNoViableAltException") says how to write it."""
from __future__ import annotations

from dataclasses import fields

import pytest

from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo import CONFIG_DIR
from pazo.config_schema import NAMED_GROUPS, SECTIONS, TopSchema, number_kind
from pazo.methods import method_info, method_names
from pazo.run.cli import check_overrides

#: (method, key) of every number a method's own schema takes
NUMBER_KEYS = sorted((name, f.name) for name in method_names() for f in fields(method_info(name).config)
                     if f.type in ("float", float, "int", int))
WORDS = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz"), min_size=1, max_size=8)
NOT_A_NUMBER = WORDS.filter(lambda w: w not in ("inf", "nan", "true", "false", "null", "on", "off", "yes", "no"))


@settings(max_examples=5)
@given(setting=st.sampled_from(NUMBER_KEYS), value=NOT_A_NUMBER)
@example(setting=("pazo_m", "lr"), value="abc")   # the reported case
def test_a_method_key_given_a_word_says_what_it_expects(setting, value):
    method, key = setting
    kind = "an integer" if dict((f.name, f.type) for f in fields(method_info(method).config))[key] in ("int", int) \
        else "a number"
    assert check_overrides([f"method={method}", f"method.{key}={value}"]) == \
        f"method.{key} must be {kind}, got the string {value!r}"


def _number_fields(schema: type, where: str, present=None) -> list[tuple[str, str, bool]]:
    """(key, kind, takes null) of each number `schema` takes (those in `present` only, if given)."""
    return [(f"{where}.{f.name}" if where else f.name, number_kind(f.type), "None" in str(f.type))
            for f in fields(schema) if number_kind(f.type) and (present is None or f.name in present)]


def _default_config() -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config"))


DEFAULT = _default_config()
#: (overrides that choose the section, key, kind, takes null) of every number a run's config takes: the top
#: level's, its own sections', the default data set's and model's, and every method's own
NUMBERS = sorted([((), *number) for number in _number_fields(TopSchema, "")]
                 + [((), *number) for name, schema in SECTIONS.items()
                    for number in _number_fields(schema, name, DEFAULT.get(name) or {})]
                 + [((), *number) for group, registry in NAMED_GROUPS.items()
                    for number in _number_fields(registry.get(DEFAULT[group]["name"]).schema, group, DEFAULT[group])]
                 + [((f"method={name}",), *number) for name in method_names()
                    for number in _number_fields(method_info(name).config, "method")])


@st.composite
def numbers_given_no_number(draw):
    """(overrides that choose the section, a number's key, its kind, a value typed on the command
    line that is no number, that value as the refusal should name it)."""
    chosen, key, kind, takes_null = draw(st.sampled_from(NUMBERS))
    given = draw(st.sampled_from(["boolean", "list", "mapping", "word"] + ["null"] * (not takes_null)))
    if given == "boolean":
        typed = draw(st.sampled_from(["true", "false", "True", "FALSE"]))
        words = f"the boolean {typed.lower()}"
    elif given == "list":
        typed = "[" + ",".join(map(str, draw(st.lists(st.integers(0, 99), max_size=3)))) + "]"
        words = f"the list {typed}"
    elif given == "mapping":
        entries = draw(st.dictionaries(st.sampled_from("abc"), st.integers(0, 9), max_size=2))
        typed = "{" + ",".join(f"{k}:{v}" for k, v in entries.items()) + "}"
        words = f"the mapping {typed}"
    else:
        typed = "null" if given == "null" else draw(NOT_A_NUMBER)
        words = "null" if given == "null" else f"the string {typed!r}"
    return chosen, key, kind, typed, words


@settings(max_examples=10, deadline=None)
@given(case=numbers_given_no_number())
@example(case=((), "method.lr", "a number", "true", "the boolean true"))   # the report: it said `got 'True'`
@example(case=((), "privacy.epsilon", "a number", "[1,2]", "the list [1,2]"))
@example(case=((), "train.batch_size", "an integer", "null", "null"))
def test_a_number_given_no_number_names_what_was_typed(case):
    chosen, key, kind, typed, words = case
    assert check_overrides([*chosen, f"{key}={typed}"]) == f"{key} must be {kind}, got {words}"


@settings(max_examples=20)
@given(key=st.sampled_from(["hydra.run.dir", "dataset.root", "train.steps", "+logger.tags"]),
       first=WORDS, rest=WORDS, after=st.lists(st.sampled_from(["train.steps=3", "seed=1"]), max_size=2),
       multirun=st.booleans())
@example(key="hydra.run.dir", first="/tmp/a", rest="b", after=[], multirun=False)   # the reported case
def test_a_value_the_shell_split_at_a_space_is_said_with_the_quoting_that_keeps_it_whole(key, first, rest, after,
                                                                                         multirun):
    argv = ["-m"] * multirun + [f"{key}={first}", rest, *after]
    assert check_overrides(argv) == (f"{rest!r} is not an override (key=value): if it is the rest of "
                                     f"{key.lstrip('+')}'s value, quote the value whole, as one argument: "
                                     f"'{key}={first} {rest}'")


@settings(max_examples=10)
@given(words=st.lists(WORDS, min_size=1, max_size=3))
@example(words=["b", "c"])   # 'b c': Hydra's LexerNoViableAltException
def test_an_argument_that_is_no_override_is_said_so(words):
    text = " ".join(words)
    assert check_overrides([text, "train.steps=3"]) == \
        f"{text!r} is not an override: an override is key=value (e.g. train.steps=5)"


def test_a_value_hydra_cannot_read_names_its_key_and_the_quoting():
    problem = check_overrides(["hydra.run.dir=/tmp/(a b)"])
    assert problem.startswith("'hydra.run.dir=/tmp/(a b)' cannot be read as an override (")
    assert problem.endswith("a value of hydra.run.dir with spaces or special characters is quoted whole, "
                            "hydra.run.dir='...'")


@pytest.mark.parametrize("overrides, line", [
    (["method.lr=abc"], "method.lr must be a number, got the string 'abc' ("),
    (["hydra.run.dir=/tmp/a", "b"], "'b' is not an override (key=value): if it is the rest of hydra.run.dir's value, "
                                    "quote the value whole, as one argument: 'hydra.run.dir=/tmp/a b'"),
])
def test_a_sweeps_extra_overrides_are_said_in_the_same_words(overrides, line, tmp_path, capsys):
    from pazo.sweep import command as sweep

    assert sweep.main([str(CONFIG_DIR / "sweeps" / "demo.yaml"), *overrides, "--dry-run", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pazo: error: {line}") and err.count("\n") == 1, err


@settings(max_examples=10, deadline=None)
@given(case=st.sampled_from([n for n in NUMBERS if n[2] == "an integer"]),
       value=st.floats(-1e6, 1e6, allow_nan=False).filter(lambda v: v != int(v)))
@example(case=((), "train.batch_size", "an integer", False), value=2.5)
def test_an_integers_key_given_a_fraction_names_the_number_as_typed(case, value):
    """A number that is not an integer (`method.q=1.5`) is said as the number it is, not as a quoted
    string (`got '1.5'` read as if the user had typed quotes)."""
    chosen, key, kind, _ = case
    assert check_overrides([*chosen, f"{key}={value!r}"]) == f"{key} must be {kind}, got {value!r}"


HYDRA_FLAGS = ("--cfg", "--config-dir", "--config-name", "--config-path", "--help", "--hydra-help", "--info",
               "--multirun", "--package", "--resolve", "--run", "--shell-completion", "--version", "-c", "-cd",
               "-cn", "-cp", "-h", "-i", "-m", "-p", "-r", "-sc")


@settings(max_examples=25)
@given(name=st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz-"), min_size=1, max_size=10),
       dashes=st.sampled_from(["-", "--"]), value=st.none() | WORDS)
@example(name="plna", dashes="--", value=None)   # a typo of `pazo-train --plan`: Hydra printed its usage
def test_an_option_neither_hydra_nor_the_command_knows_is_one_line_with_its_close_match(name, dashes, value):
    flag = dashes + name
    typed = flag if value is None else f"{flag}={value}"
    problem = check_overrides(["train.steps=3", typed], own_flags=("--plan",))
    if flag in (*HYDRA_FLAGS, "--plan"):
        assert problem is None or not problem.startswith("unknown option")
    else:
        assert problem.startswith(f"unknown option {flag}") and "\n" not in problem
    if name == "plna":
        assert "did you mean --plan?" in problem


@pytest.mark.parametrize("flag", ["-m", "--cfg=job", "-cn", "--info"])
def test_hydras_own_options_are_left_to_hydra(flag):
    problem = check_overrides(["train.steps=3", flag])
    assert problem is None or "unknown option" not in problem
