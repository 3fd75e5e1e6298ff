"""Privacy planning before a run (`pazo-privacy`, pazo.privacy.planner): the three accountants bound
the same epsilon as the theory says (PRV's and PLD's intervals overlap; RDP lies above both lower
bounds), a calibrated sigma meets its target and 1% less noise does not, the steps a budget allows
are the last ones within it, the plan of the default run is the run's own sigma, and a mistake on
the command line is one line."""
from __future__ import annotations

import re
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from conftest import cheap_pld_grid
from pazo.privacy.accountants import BudgetError, default_eps_error
from pazo.privacy.cli import main
from pazo.privacy import planner
from pazo.privacy.accountants import ACCOUNTANTS, MAX_STEPS, PLD_MIN_SIGMA, check_inputs
from pazo.privacy.planner import epsilon_of, sigma_for, upper_epsilon_of
from pazo.privacy.steps_budget import steps_for

DELTAS = st.sampled_from([1e-5, 1e-3])


@settings(max_examples=4)
@given(sigma=st.floats(0.6, 5.0), q=st.floats(1e-3, 0.2), steps=st.integers(1, 400), delta=DELTAS)
@example(sigma=1.0086096128495265, q=0.13551868260946617, steps=285, delta=1e-05)   # PRV refuses: found by CI
def test_the_accountants_bound_one_epsilon_as_the_theory_says(sigma, q, steps, delta):
    pld, rdp = (epsilon_of(sigma, q, steps, delta, a) for a in ("pld", "rdp"))
    try:
        prv = epsilon_of(sigma, q, steps, delta, "prv")
    except BudgetError as refusal:   # prv-accountant's discretisation fails in places: refused, never a crash
        assert "use the pld or rdp accountant" in str(refusal)
        prv = pld
    assert prv.lower <= prv.upper and pld.lower <= pld.upper
    slack = 2e-3 * max(1.0, prv.upper)   # the grids' own error
    assert max(prv.lower, pld.lower) <= min(prv.upper, pld.upper) + slack
    assert rdp.upper >= max(prv.lower, pld.lower) - slack


@settings(max_examples=3)
@given(accountant=st.sampled_from(ACCOUNTANTS), sigma=st.floats(0.6, 5.0), q=st.floats(1e-3, 0.2),
       steps=st.integers(1, 400), delta=DELTAS)
@example(accountant="pld", sigma=1.0, q=0.05, steps=4, delta=1e-3)   # a digits run's cross-check
def test_the_guarantee_alone_is_the_upper_bound_of_the_full_account(accountant, sigma, q, steps, delta):
    """`upper_epsilon_of` (a run's cross-check, the planner's printout) skips PLD's lower bound and
    nothing else. (PLD on a cheaper grid: both read the one grid.)"""
    with cheap_pld_grid():
        try:
            full = epsilon_of(sigma, q, steps, delta, accountant, 0.01)
        except BudgetError as refusal:   # (prv-accountant's discretisation fails in places)
            with pytest.raises(BudgetError, match=re.escape(str(refusal))):
                upper_epsilon_of(sigma, q, steps, delta, accountant, 0.01)
            return
        assert upper_epsilon_of(sigma, q, steps, delta, accountant, 0.01) == full.upper


@settings(max_examples=6)
@given(accountant=st.sampled_from(ACCOUNTANTS), sigma=st.floats(0.01, 5.0), q=st.floats(-0.5, 1.5),
       steps=st.integers(-5, 2 * MAX_STEPS), delta=st.floats(-0.5, 1.5))
@example(accountant="pld", sigma=PLD_MIN_SIGMA / 2, q=0.05, steps=100, delta=1e-5)   # a grid that would not fit
@example(accountant="rdp", sigma=1.0, q=0.05, steps=MAX_STEPS + 1, delta=1e-5)
def test_the_guarantee_alone_refuses_what_the_full_account_refuses_before_building_one(accountant, sigma, q, steps,
                                                                                       delta):
    """Inputs `epsilon_of` refuses (`check_inputs`: a PLD grid too fine to fit in memory, too many
    steps, a rate or delta out of range) are refused by `upper_epsilon_of` in the same line, before
    any account is built."""
    try:
        check_inputs(q, steps, delta, accountant, sigma)
    except BudgetError as refusal:
        refused = refusal
    else:
        assume(False)   # (inputs a plan accepts: the test above)
    with patch.object(planner, "DpAccountingAccountant", side_effect=AssertionError("an account was built")), \
            patch.object(planner, "GaussianAccountant", side_effect=AssertionError("an account was built")):
        with pytest.raises(BudgetError, match=re.escape(str(refused))):
            upper_epsilon_of(sigma, q, steps, delta, accountant, 0.01)


@pytest.mark.parametrize("accountant", ACCOUNTANTS)
@settings(max_examples=2)
@given(epsilon=st.floats(0.5, 8.0), q=st.floats(5e-3, 0.1), steps=st.integers(10, 300), delta=DELTAS)
def test_a_calibrated_sigma_meets_its_target_and_one_percent_less_does_not(accountant, epsilon, q, steps, delta):
    """(PLD on a cheaper grid: the rule holds on any grid, calibration and check share it.)"""
    with cheap_pld_grid():
        sigma, error = sigma_for(epsilon, q, steps, delta, accountant), default_eps_error(epsilon)   # (a run's)
        assert epsilon_of(sigma, q, steps, delta, accountant, error).upper <= epsilon
        assert epsilon_of(sigma * 0.99, q, steps, delta, accountant, error).upper > epsilon


@settings(max_examples=4)
@given(epsilon=st.floats(0.5, 8.0), sigma=st.floats(0.8, 4.0), q=st.floats(5e-3, 0.2), delta=DELTAS)
def test_the_steps_a_budget_allows_are_the_last_within_it(epsilon, sigma, q, delta):
    steps = steps_for(epsilon, sigma, q, delta, "rdp")
    if steps:
        assert epsilon_of(sigma, q, steps, delta, "rdp").upper <= epsilon
    assert epsilon_of(sigma, q, steps + 1, delta, "rdp").upper > epsilon


def test_the_steps_by_prv_are_those_a_run_of_that_sigma_may_take():
    steps = steps_for(1.0, 3.5057, 64 / 1165, 1 / 1165, "prv")
    assert steps >= 546   # the default run's T at its calibrated sigma
    error = default_eps_error(1.0)
    assert epsilon_of(3.5057, 64 / 1165, steps, 1 / 1165, "prv", error).upper <= 1.0
    assert epsilon_of(3.5057, 64 / 1165, steps + 1, 1 / 1165, "prv", error).upper > 1.0


def test_the_plan_of_the_default_run_is_its_sigma_and_steps(capsys):
    """`make run`: epsilon 1, delta 1/1165, 64 of 1165 a batch, 30 epochs -> sigma 3.5057, T 546."""
    args = ["--delta", repr(1 / 1165), "--batch-size", "64", "--n", "1165"]
    assert main(["sigma", "--epsilon", "1", "--epochs", "30", *args]) == 0
    out = capsys.readouterr().out
    assert "sigma = 3.5057 for epsilon 1 " in out and "T 546;" in out


GOOD = {"--epsilon": "1", "--sigma": "1.2", "--delta": "1e-5", "--sample-rate": "0.01", "--steps": "100",
        "--accountant": "rdp"}
BAD_VALUES = ["0", "-1", "nan", "inf", "x", "1e400", "2", "1e-300", "100000000000"]


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(answer=st.sampled_from(["sigma", "epsilon", "steps"]), key=st.sampled_from(sorted(GOOD)),
       value=st.sampled_from(BAD_VALUES) | st.none(), extra=st.sampled_from([[], ["--n", "10"], ["--epochs", "3"],
                                                                              ["--accountant", "xyz"]]))
def test_a_bad_command_line_is_one_line_and_exit_2(answer, key, value, extra, capsys):
    given_args = {**{k: v for k, v in GOOD.items() if k != f"--{answer}"}, key: value}   # (the answer is not given)
    argv = [answer, *[a for k, v in given_args.items() if v is not None for a in (k, v)], *extra]
    try:
        code = main(argv)
    except SystemExit as stop:   # argparse's own refusals (a bad float, an unknown choice)
        code = stop.code
    out, err = capsys.readouterr()
    if code == 0:   # the values were good ones after all (e.g. a sigma of 2)
        assert out.count("\n") == 1 and not err
        return
    assert code == 2 and err.count("\n") == 1 and err.startswith("pazo: error: "), err
    assert "Traceback" not in err and not out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=st.sampled_from(["sigma", "epsilon"]), value=st.sampled_from(["1", "0.5", "3"]))
def test_the_value_a_question_computes_is_refused_as_an_input(answer, value, capsys):
    """`pazo-privacy epsilon --epsilon 1 ...` would silently ignore the given epsilon: refused in one line."""
    argv = [answer, *[a for k, v in GOOD.items() for a in (k, v)]]
    argv[argv.index(f"--{answer}") + 1] = value
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert not out and err == f"pazo: error: pazo-privacy {answer} computes {answer}: give no --{answer}\n"


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(epsilon=st.floats(0.01, 0.5), sigma=st.floats(0.3, 0.6), q=st.floats(0.3, 1.0))
@example(epsilon=0.1, sigma=0.5, q=0.5)
def test_steps_zero_says_what_one_step_spends(epsilon, sigma, q, capsys):
    """No step fits: the answer says so with one step's epsilon, which is over the target."""
    argv = ["steps", "--epsilon", repr(epsilon), "--sigma", repr(sigma), "--delta", "1e-5", "--sample-rate", repr(q),
            "--accountant", "rdp"]
    assert main(argv) == 0
    line = capsys.readouterr().out.strip()
    if line.startswith("steps = 0 "):
        assert float(line.rsplit("one step already spends epsilon ", 1)[1]) > epsilon
    else:
        assert "one step" not in line


@pytest.mark.parametrize("reach", [1, 2, 5, 1000])
def test_steps_beyond_the_accountants_reach_are_a_lower_bound_not_advice_it_cannot_follow(reach, monkeypatch):
    """When the account of more steps is out of reach, the answer is the steps known to fit, not a
    knob of a run's config (privacy.eps_error) that pazo-privacy does not have."""
    import pazo.privacy.steps_budget as search

    def epsilon_within_reach(sigma, q, steps, delta, accountant, eps_error=None):
        if accountant == "rdp":
            return float("inf")   # (no bound says more fit)
        if steps > reach:
            raise BudgetError("out of reach: use privacy.eps_error >= 0.1")
        return 0.0

    monkeypatch.setattr(search, "upper_epsilon_of", epsilon_within_reach)
    with pytest.raises(BudgetError) as refused:
        steps_for(10.0, 100.0, 0.01, 1e-5, "prv")
    fits = 1 << (reach.bit_length() - 1)   # (the doubling search's last step within reach)
    assert str(refused.value).startswith(f"at least {fits:,} steps fit within epsilon 10 at sigma 100; ")
    assert "eps_error" not in str(refused.value)
