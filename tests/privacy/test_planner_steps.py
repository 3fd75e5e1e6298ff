"""`pazo-privacy steps` ends in bounded time (issue #60): the search asks no accountant about more
steps than it can account (MAX_STEPS; PRV: the most whose grid fits), and a budget that allows even
those is said at once from the RDP bound. Whatever the input, the answer is the last step count
within the budget, or a line that says more fit than the accountant can account, and why."""
from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo.privacy import accountants, steps_budget
from pazo.privacy.accountants import BudgetError, default_eps_error, prv_grid
from pazo.privacy.cli import main
from pazo.privacy.accountants import MAX_STEPS
from pazo.privacy.planner import epsilon_of, upper_epsilon_of
from pazo.privacy.steps_budget import accountable_steps, steps_for

MORE_THAN = re.compile(r"the budget allows more than ([\d,]+) steps .*the RDP bound of ([\d,]+) steps is epsilon")
AT_LEAST = re.compile(r"at least ([\d,]+) steps fit within epsilon")


def _count(text: str) -> int:
    return int(text.replace(",", ""))


@settings(max_examples=3)
@given(epsilon=st.floats(0.01, 50.0), sigma=st.floats(0.5, 1e4), q=st.floats(1e-4, 1.0),
       delta=st.sampled_from([1e-5, 1e-3]))
@example(epsilon=50.0, sigma=100.0, q=0.001, delta=1e-5)   # the reported budget, by RDP
def test_the_steps_answered_are_the_last_within_the_budget_or_more_than_can_be_accounted(epsilon, sigma, q, delta):
    """(By RDP, whose accounts are cheap at any step count: the search is the same for every accountant.)"""
    try:
        steps = steps_for(epsilon, sigma, q, delta, "rdp")
    except BudgetError as more:
        limit = MORE_THAN.search(str(more))
        assert limit, str(more)
        assert epsilon_of(sigma, q, _count(limit[1]), delta, "rdp").upper <= epsilon
        return
    assert steps < MAX_STEPS
    if steps:
        assert epsilon_of(sigma, q, steps, delta, "rdp").upper <= epsilon
    assert epsilon_of(sigma, q, steps + 1, delta, "rdp").upper > epsilon


@pytest.mark.parametrize("accountant", ["prv", "pld"])
@settings(max_examples=5)
@given(epsilon=st.floats(1.0, 50.0), sigma=st.floats(50.0, 1e4), q=st.floats(1e-4, 1e-2))
@example(epsilon=50.0, sigma=100.0, q=0.001)   # issue #60: 4.5 minutes of PRV accounts up to the grid limit
def test_a_budget_the_rdp_bound_shows_beyond_reach_is_said_without_accounting_more_than_one_step(accountant, epsilon,
                                                                                                 sigma, q):
    """Where RDP bounds the epsilon of MAX_STEPS steps below the target (with room for the
    accountant's own error), no account of more than one step is built."""
    error = default_eps_error(epsilon)
    if upper_epsilon_of(sigma, q, MAX_STEPS, 1e-5, "rdp") > epsilon - 2 * error:
        return
    asked = []

    def one_step_only(sigma_, q_, steps, delta_, accountant_, *args):
        if accountant_ != "rdp":   # (the RDP bound is a closed form, not an account)
            asked.append(steps)
            assert steps == 1, f"an account of {steps} steps was built"
        return upper_epsilon_of(sigma_, q_, steps, delta_, accountant_, *args)

    with pytest.MonkeyPatch.context() as patch, \
            pytest.raises(BudgetError, match=f"the budget allows more than {MAX_STEPS:,} steps at sigma"):
        patch.setattr(steps_budget, "upper_epsilon_of", one_step_only)
        steps_for(epsilon, sigma, q, 1e-5, accountant)
    assert asked == [1]


@settings(max_examples=20, deadline=None)
@given(accountant=st.sampled_from(["pld", "rdp"]), rate=st.floats(1e-9, 1.0), epsilon=st.floats(0.01, 50.0))
@example(accountant="pld", rate=1e-4, epsilon=1.0)   # the review's case: PLD's lower bound, a second account
def test_the_search_asks_each_account_for_its_guarantee_alone(accountant, rate, epsilon):
    """Only the guarantee decides whether t steps are within the budget: no step count's lower
    bound (PLD's optimistic account, as costly as the guarantee's) is ever computed."""
    def lower(self, steps):
        raise AssertionError(f"a lower bound of {steps} steps was computed")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(accountants.DpAccountingAccountant, "upper", lambda self, steps: rate * steps)
        patch.setattr(accountants.DpAccountingAccountant, "lower", lower)
        try:
            steps = steps_for(epsilon, 1.0, 0.01, 1e-5, accountant)
        except BudgetError as more:
            assert str(more).startswith(f"the budget allows more than {MAX_STEPS:,} steps"), str(more)
            assert rate * MAX_STEPS <= epsilon
            return
    assert rate * steps <= epsilon < rate * (steps + 1)


@settings(max_examples=15)
@given(sigma=st.floats(0.5, 1e4), q=st.floats(1e-4, 0.99), delta=st.sampled_from([1e-10, 1e-5, 1e-3]),
       eps_error=st.sampled_from([1e-3, 1e-2, 0.1]))
def test_the_prv_reach_is_the_last_step_count_whose_grid_fits(sigma, q, delta, eps_error):
    reach = accountable_steps(sigma, q, delta, "prv", eps_error)
    assert 1 <= reach <= MAX_STEPS

    def fits(steps: int) -> bool:
        return prv_grid(sigma, q, steps, delta, eps_error)[1] <= accountants.PRV_GRID_MAX

    assert reach == 1 or fits(reach)
    assert reach == MAX_STEPS or not fits(reach + 1)


@settings(max_examples=40)
@given(rate=st.floats(1e-9, 1.0), looser=st.floats(1.0, 5.0), reach=st.integers(1, MAX_STEPS),
       epsilon=st.floats(0.01, 50.0), flaw=st.integers(2, MAX_STEPS) | st.none())
def test_the_search_asks_nothing_beyond_the_reach_and_ends_on_the_last_step_within(rate, looser, reach, epsilon, flaw):
    """The search alone, over accountants drawn as linear epsilons (`rate` a step; RDP `looser`
    times that), a reach, and a step count whose account fails (`flaw`, as prv-accountant's check
    of its own discretisation does): every account asked is within reach, and the answer is the last
    count within the budget, or a line whose count is within it."""
    def account(sigma, q, steps, delta, accountant, eps_error=None):
        if accountant == "rdp":
            return looser * rate * steps
        assert steps <= reach, f"{steps} steps asked beyond the reach {reach}"
        if steps == flaw:
            raise BudgetError("its check of its own discretisation failed")
        return rate * steps

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(steps_budget, "upper_epsilon_of", account)
            patch.setattr(steps_budget, "accountable_steps", lambda *args: reach)
            steps = steps_for(epsilon, 1.0, 0.01, 1e-5, "prv")
    except BudgetError as refused:
        counted = MORE_THAN.search(str(refused)) or AT_LEAST.search(str(refused))
        assert counted, str(refused)
        assert rate * _count(counted[1]) <= epsilon
        return
    assert steps < reach and rate * steps <= epsilon < rate * (steps + 1)


def test_the_reported_command_answers_more_than_the_plan_considers(capsys):
    argv = ["steps", "--epsilon", "50", "--sigma", "100", "--sample-rate", "0.001", "--delta", "1e-5"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert not out and err.startswith(f"pazo: error: the budget allows more than {MAX_STEPS:,} steps at sigma 100 ")
    assert err.count("\n") == 1
