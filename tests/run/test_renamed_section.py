"""`dataset.name=cifar10` where `dataset=cifar10` was meant: the section keeps the keys of the
option it was composed from, and the check used to refuse one of them the user never typed
(`unknown key dataset.test_fraction`). Now a refusal of such a key says to choose the option with
`dataset=cifar10`; a key the user did type keeps its own line, and a registered name without a
config of its own (a plugin's, a test model's) is not touched."""
from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo import CONFIG_DIR
from pazo.run.cli import check_overrides

OPTIONS = [(group, path.stem) for group in ("dataset", "model")
           for path in sorted((CONFIG_DIR / group).glob("*.yaml"))]


@settings(max_examples=6)
@given(option=st.sampled_from(OPTIONS))
@example(option=("dataset", "cifar10"))   # the reported case
@example(option=("model", "lstm"))
def test_a_section_renamed_to_another_option_is_refused_with_the_option_to_choose(option):
    group, name = option
    problem = check_overrides([f"{group}.name={name}"])
    if problem is not None and "unknown key" in problem:   # (else: no key of the default is foreign to it)
        raise AssertionError(problem)
    if problem is not None and f"{group}.name={name} renames" in problem:
        assert problem.endswith(f"choose the {group} with {group}={name}")


def test_the_reported_case_names_the_option_to_choose():
    problem = check_overrides(["dataset.name=cifar10"])
    assert problem.startswith("dataset.name=cifar10 renames the dataset section")
    assert "dataset.test_fraction" in problem and problem.endswith("dataset=cifar10")


def test_a_key_the_user_typed_keeps_its_own_line():
    problem = check_overrides(["dataset.name=cifar10", "dataset.test_fraction=0.1"])
    assert problem.startswith("unknown key dataset.test_fraction")
