"""`dataset.name=cifar10` where `dataset=cifar10` was meant: the section keeps the keys and values
of the option it was composed from. It used to be refused only where a key of that option was
foreign to the named one (then by that key, one the user never typed), and ran as neither option
where every key fit (`model=hf_causal_lm model.name=hf_masked_lm`, `optimizer.name=adam`). Now
every `<group>.name=<option>` of a group that takes one option is refused with the option to choose,
unless it names the option composed (an experiment chooses too); a registered name without a config
of its own (a plugin's, a test model's) is not touched. pazo-eval's data set overrides alike."""
from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from conftest import tiny_cfg
from pazo import CONFIG_DIR
from pazo.errors import ConfigError
from pazo.run.cli import check_overrides
from pazo.run.door import _composed_choices, group_options, one_choice_defaults, options_have_names
from pazo.run.loaded import dataset_overridden

GROUPS = ("dataset", "model", "method", "schedule", "optimizer")
OPTIONS = {group: sorted(path.stem for path in (CONFIG_DIR / group).glob("*.yaml")) for group in GROUPS}


def _line(group: str, composed: str, named: str) -> str:
    return (f"{group}.name={named} renames the {group} section but keeps the keys and values of the {group} it was "
            f"composed from ({group}={composed}); choose the {group} with {group}={named}")


@st.composite
def renamings(draw):
    group = draw(st.sampled_from(GROUPS))
    return group, draw(st.sampled_from(OPTIONS[group])), draw(st.sampled_from(OPTIONS[group]))


@settings(max_examples=3)
@given(renaming=renamings())
@example(renaming=("dataset", "digits", "cifar10"))                 # the first report: by a key never typed
@example(renaming=("model", "hf_causal_lm", "hf_masked_lm"))        # issue #60: every key fit, and it ran
@example(renaming=("optimizer", "sgd", "adam"))
@example(renaming=("dataset", "cifar10", "cifar10"))                # the option composed: no renaming
def test_a_section_named_after_another_option_of_its_group_is_refused_with_the_option_to_choose(renaming):
    group, composed, named = renaming
    problem = check_overrides([f"{group}={composed}", f"{group}.name={named}"])
    if named != composed:
        assert problem == _line(group, composed, named)
    else:
        assert problem is None or "renames" not in problem


def test_the_option_an_experiment_composes_is_the_one_a_name_is_compared_with():
    assert check_overrides(["experiment=cifar10", "dataset.name=cifar10"]) is None
    assert check_overrides(["experiment=cifar10", "dataset.name=digits"]) == _line("dataset", "cifar10", "digits")


def test_names_without_a_config_of_their_own_and_other_name_keys_are_not_renamings():
    assert "renames" not in (check_overrides(["model.name=bn_test"]) or "")   # (a test model's registered name)
    assert check_overrides(["logger.name=csv"]) is None                     # (W&B's run name)


@pytest.mark.parametrize("overrides, composed, named", [
    (["dataset.name=cifar10"], "digits", "cifar10"),              # issue #60: "unknown key dataset.test_fraction"
    (["dataset=cifar10", "dataset.name=digits"], "cifar10", "digits"),
])
def test_pazo_eval_refuses_a_renamed_data_set_with_the_option_to_choose(overrides, composed, named):
    run_config = OmegaConf.create(OmegaConf.to_container(tiny_cfg(), resolve=False))
    with pytest.raises(ConfigError) as refused:
        dataset_overridden(run_config, overrides)
    assert str(refused.value) == _line("dataset", composed, named)


# `privacy.name=none` was refused with `unknown key privacy.name`, where `model.name=lstm` says to
# choose the model with model=lstm: a group whose options have no name key (privacy, experiment,
# tuning) now says how its option is chosen, as the named groups do.

ONE_CHOICE = one_choice_defaults()
SUGGESTED = re.compile(r"choose (?:the \w+|one|it) with ([^;]+?)(?:;|$)")


@st.composite
def group_names(draw):
    """A one-choice group and a value for its `name`: another option of a named group (the one
    composed is no renaming), or any option or word for a group whose options have no name."""
    group = draw(st.sampled_from(sorted(ONE_CHOICE)))
    options = group_options(group)
    if options_have_names(group):
        return group, draw(st.sampled_from([o for o in options if o != ONE_CHOICE[group]]))
    return group, draw(st.sampled_from(options) | st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True))


@settings(max_examples=12, deadline=None)
@given(named=group_names())
@example(named=("privacy", "none"))             # the report: `unknown key privacy.name`
@example(named=("privacy", "dp"))
@example(named=("experiment", "cifar10"))
@example(named=("tuning", "cifar10_mezo"))
@example(named=("model", "lstm"))
def test_a_name_given_to_any_one_choice_group_says_how_its_option_is_chosen(named):
    group, value = named
    problem = check_overrides([f"{group}.name={value}"])
    assert problem is not None and "unknown key" not in problem
    if value not in group_options(group):
        assert problem.startswith(f"{group}.name={value}: ") and ("(choices: " in problem or "chosen by" in problem)
        return
    suggested = SUGGESTED.search(problem)
    assert suggested, problem
    assert _composed_choices(suggested.group(1).split(), "config")[group] == value   # what it says chooses it


def test_a_privacy_name_says_how_privacy_is_chosen_and_turned_off():
    line = ("privacy.name=none: privacy options have no name key; choose one with privacy=none; a run without "
            "privacy, as a non-private method needs, is privacy=none or privacy.epsilon=null")
    assert check_overrides(["privacy.name=none"]) == line
    assert check_overrides(["method=mezo", "privacy.name=none"]) == line
    assert "did you mean privacy=none?" in check_overrides(["privacy.name=non"])


@settings(max_examples=6, deadline=None)
@given(named=group_names())
@example(named=("privacy", "none"))   # a nameless group: its default read for the line
def test_a_name_hint_reads_config_yaml_once(named):
    """`renamed_section` reads config.yaml's defaults once for a `<group>.name=` hint: the groups
    that take one option and, for a nameless group, its default (it read the file twice)."""
    from pazo.run.door import renamed_section

    group, value = named
    reads, load = [], OmegaConf.load
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(OmegaConf, "load", lambda source, *a, **k: (reads.append(source), load(source, *a, **k))[1])
        renamed_section([f"{group}.name={value}"])
    assert [r for r in reads if str(r) == str(CONFIG_DIR / "config.yaml")] == [CONFIG_DIR / "config.yaml"]
