"""Which rules a stateful walk ran, for the tests that assert what their default walk covers.

Hypothesis derandomises a walk from the state machine's source: an edit to the class draws another
walk, which may no longer run one of its rules. A walk records the rules it runs without an edit to
the class (each rule is wrapped in place for the test, so that the walk drawn is the one drawn
without the record), and its test asserts that every rule ran, or names the explicit case that runs
it instead."""
from __future__ import annotations

import functools

import pytest
from hypothesis.stateful import RuleBasedStateMachine


def rule_names(machine: type[RuleBasedStateMachine]) -> set[str]:
    """The names of `machine`'s rules, its `@initialize` rules too."""
    state = machine.setup_state()
    return {rule.function.__name__ for rule in [*state.rules, *state.initializers]}


def rules_ran(monkeypatch: pytest.MonkeyPatch, machine: type[RuleBasedStateMachine]) -> set[str]:
    """The set that the name of each of `machine`'s rules is added to when it runs, drawn by a walk
    or called by another rule (`first_audit` calls `audit`), until the test ends (`monkeypatch`
    puts the rules back)."""
    ran: set[str] = set()
    state = machine.setup_state()
    for rule in [*state.rules, *state.initializers]:
        name = rule.function.__name__
        monkeypatch.setattr(rule, "function", _noted(rule.function, name, ran))   # (what a walk calls)
        monkeypatch.setattr(machine, name, _noted(getattr(machine, name), name, ran))   # (what a rule calls)
    return ran


def _noted(function, name: str, ran: set[str]):
    @functools.wraps(function)
    def noted(*args, **kwargs):
        ran.add(name)
        return function(*args, **kwargs)
    return noted


def check_invariants(state: RuleBasedStateMachine) -> None:
    """Every invariant of `state`'s machine whose preconditions hold, as a walk checks them after a
    step: for the explicit cases that call a machine's rules one by one."""
    for invariant in type(state).setup_state().invariants:
        if all(precondition(state) for precondition in invariant.preconditions):
            invariant.function(state)
