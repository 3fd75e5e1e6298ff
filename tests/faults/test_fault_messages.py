"""Messages that say what is wrong (round two): an unknown key names the close match (difflib, or a
paper's symbol such as DP-AggZO's K for `method.q`) and lists the valid keys, on every entry point
that takes overrides (pazo-train, pazo-audit, pazo-bench's --override, pazo-sweep); a number given as
a string is called a string; `privacy.secure_mode=true` says on the terminal that the seed does not
replay the noise."""
from __future__ import annotations

import difflib
import re

import pytest
from fault_inputs_helpers import assert_one_error, run_entry
from fault_runtime_helpers import TINY, run_cli
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo import CONFIG_DIR, bench
from pazo.sweep import command as sweep
from pazo.audit import command as audit_command
from pazo.run.cli import check_overrides
from pazo.run.door import LIST_GROUPS
from pazo.config_schema import SECTIONS
from pazo.run.summary import SECURE_SEED_NOTE

#: (section, its keys, the override prefix that selects it): sections every entry point composes
SECTION_KEYS = {"train": sorted(f.name for f in SECTIONS["train"].__dataclass_fields__.values()),
                "privacy": sorted(f.name for f in SECTIONS["privacy"].__dataclass_fields__.values())}


def misspelt(keys: list[str]):
    """A key of `keys` with one letter dropped, doubled or changed, that is no key of `keys`."""
    def edit(args):
        key, i, how, letter = args
        i %= len(key)
        return {"drop": key[:i] + key[i + 1:], "double": key[:i] + key[i] + key[i:],
                "change": key[:i] + letter + key[i + 1:]}[how]
    return st.tuples(st.sampled_from(keys), st.integers(0, 30), st.sampled_from(["drop", "double", "change"]),
                     st.sampled_from("abcdefghijklmnopqrstuvwxyz")).map(edit).filter(
        lambda k: k not in keys and k.isidentifier())


def assert_names_keys(line: str, section: str, bad: str, keys: list[str]) -> None:
    assert f"unknown key {section}.{bad}" in line, line
    listed = re.search(r"has: ([^)]*)\)", line)
    assert listed and set(listed.group(1).split(", ")) >= set(keys), line
    close = difflib.get_close_matches(bad, keys, n=1, cutoff=0.6)
    if close:
        assert f"did you mean {section}.{close[0]}?" in line, line


@settings(max_examples=12, deadline=None)
@given(data=st.data(), section=st.sampled_from(sorted(SECTION_KEYS)),
       config_name=st.sampled_from(["config", "audit"]))
def test_a_misspelt_key_names_its_close_match_and_the_valid_keys(data, section, config_name):
    keys = SECTION_KEYS[section]
    bad = data.draw(misspelt(keys))
    line = check_overrides([f"{section}.{bad}=1"], config_name=config_name)
    assert line is not None
    assert_names_keys(line, section, bad, keys)


#: the config groups a command line picks an option of, with their options (the yaml files and the
#: registered methods that have none)
GROUP_OPTIONS = {group: sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))
                 for group in ("method", "dataset", "model", "experiment", "privacy", "logger")}


@settings(max_examples=15, deadline=None)
@given(data=st.data(), group=st.sampled_from(sorted(GROUP_OPTIONS)), config_name=st.sampled_from(["config", "audit"]))
@example(data=None, group="method", config_name="config")   # the reported case: method=pazom, no "did you mean"
def test_a_misspelt_option_of_a_config_group_names_its_close_match(data, group, config_name):
    """`method=pazom` (was: "Could not find 'method/pazom'; choices: ...", no close match): one line
    naming the option as typed, an option at least as close to it as any, and the options there are."""
    options = GROUP_OPTIONS[group]
    bad = "pazom" if data is None else data.draw(misspelt(options))
    line = check_overrides([f"{group}={bad}"], config_name=config_name)
    assert line is not None and "\n" not in line and line.startswith(f"unknown {group}={bad}"), line
    listed = re.search(r"\(choices: ([^)]*)\)$", line)
    assert listed and set(listed.group(1).split(", ")) >= set(options), line
    close = difflib.get_close_matches(bad, options, n=1, cutoff=0.6)
    suggested = re.search(rf"did you mean {group}=(\w+)\?", line)
    assert bool(suggested) == bool(close), line
    if close:
        ratio = lambda option: difflib.SequenceMatcher(None, bad, option).ratio()  # noqa: E731
        assert ratio(suggested.group(1)) >= ratio(close[0]) - 1e-12, line
    if data is None:
        assert "did you mean method=pazo_m?" in line


@settings(max_examples=15, deadline=None)
@given(data=st.data(), group=st.sampled_from(sorted(GROUP_OPTIONS)), config_name=st.sampled_from(["config", "audit"]))
@example(data=None, group="logger", config_name="config")   # the reported case: logger=[csv,tensorboard]
def test_an_unknown_option_in_a_list_for_a_config_group_is_named_in_one_line(data, group, config_name):
    """`logger=[csv,tensorboard]` (was: "In 'config': Could not load 'logger/tensorboard'.; Config
    search path:", cut off): one line naming an option that is none, the close match and
    the group's options; for the logger group, where the loggers' list is."""
    options = GROUP_OPTIONS[group]
    if data is None:
        given_list = ["csv", "tensorboard"]   # (neither is an option: either may be named)
    else:
        given_list = data.draw(st.permutations([options[0], data.draw(misspelt(options))]))
    line = check_overrides([f"{group}=[{','.join(given_list)}]"], config_name=config_name)
    if group not in LIST_GROUPS:   # (a list where the group takes one name is said to be one first)
        assert line.startswith(f"{group}=[{','.join(given_list)}] is a list; {group} takes one name"), line
        return
    named = re.match(rf"unknown {group}=(\w+)", line or "")
    assert named and named.group(1) in set(given_list) - set(options) and "\n" not in line, line
    bad = named.group(1)
    listed = re.search(r"\(choices: ([^)]*)\)", line)
    assert listed and set(listed.group(1).split(", ")) >= set(options), line
    close = difflib.get_close_matches(bad, options, n=1, cutoff=0.6)
    assert bool(re.search(rf"did you mean {group}=\w+\?", line)) == bool(close), line
    if group == "logger":
        assert "logger.report_to=[" in line, line


@pytest.mark.parametrize("entry,argv", [
    ("train", ["method=dp_aggzo", "method.k=8"]),
    ("train", ["method=dp_aggzo", "+method.K=8"]),
    ("audit", ["method=dp_aggzo", "method.k=8"]),
    ("bench", ["methods", "--methods", "dp_aggzo", "--settings", "digits", "--override", "method.k=8"]),
])
def test_dp_aggzos_k_points_to_method_q_on_every_entry_point(entry, argv, tmp_path, capsys, monkeypatch):
    import subprocess
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a job was started"))
    if entry == "train":
        code, _, err = run_cli([*argv, f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    elif entry == "audit":
        code, _, err = run_entry(audit_command.cli, argv, capsys)
    else:
        code, _, err = run_entry(bench.main, [*argv, "--out", str(tmp_path / "r.json")], capsys)
    line = assert_one_error(code, err, "method.", "did you mean method.q?", "has: clip, direction, lr, name, q")
    assert code == 2 and not (tmp_path / "run").exists(), line


def test_a_sweeps_misspelt_override_names_its_close_match(tmp_path, capsys):
    code = sweep.main(["demo", "--dry-run", "--out", str(tmp_path), "train.stpes=3"])
    assert_one_error(code, capsys.readouterr().err, "train.stpes", "did you mean train.steps?")


@settings(max_examples=15, deadline=None)
@given(value=st.one_of(st.floats(0.01, 50, allow_nan=False).map(repr), st.integers(1, 50).map(str),
                       st.sampled_from(["1e-3", "one", "1,0"])))
def test_a_quoted_number_is_called_a_string(value):
    line = check_overrides([f"privacy.epsilon='{value}'"])
    assert line is not None and f"got the string {value!r}" in line, line
    try:
        float(value)
    except ValueError:
        return
    assert f"write privacy.epsilon={value} without quotes" in line


@pytest.mark.parametrize("secure", [True, False])
def test_secure_mode_says_on_the_terminal_that_the_seed_does_not_replay_the_noise(secure, tmp_path, capsys):
    code, out, err = run_cli([*TINY, "train.steps=1", "seed=3", f"privacy.secure_mode={str(secure).lower()}",
                              f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert code == 0, err
    assert (SECURE_SEED_NOTE in out + err) == secure
