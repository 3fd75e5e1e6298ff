"""One chooser of accountants and one calibration entry: whatever a run's privacy section names, the
accountant is picked in `accountant_for` (the plan, the tracker and the cache check ask it), and a
run's plan, a sweep's private selection (`calibrate`) and `pazo-privacy sigma` (`sigma_for`) give the
same sigma for the same request, so that each accounts the noise a run adds."""
from __future__ import annotations

import contextlib
import math

from hypothesis import example, given, reject, settings
from hypothesis import strategies as st

from conftest import cheap_pld_grid
from pazo.config_schema import PrivacySchema
from pazo.privacy.accountants import (ACCOUNTANTS, BudgetError, DP_ACCOUNTING, MECHANISMS, DpAccountingAccountant,
                                      GaussianAccountant, LaplaceAccountant, accountant_for, epsilon_for)
from pazo.privacy.calibration import calibrate
from pazo.privacy.mechanisms import Release
from pazo.privacy.plan import make_accountant, make_plan
from pazo.privacy.planner import sigma_for
from pazo.privacy.sampling import SAMPLERS


@settings(max_examples=8, deadline=None)
@given(noise=st.sampled_from(MECHANISMS), accountant=st.sampled_from((*ACCOUNTANTS, None)),
       sigma=st.floats(1.5, 3.0), q=st.floats(0.01, 0.2), steps=st.integers(1, 10))
@example(noise="laplace", accountant="rdp", sigma=1.0, q=0.05, steps=10)   # Laplace noise: exact, whatever is named
def test_the_accountant_a_run_names_is_the_one_it_gets(noise, accountant, sigma, q, steps):
    chosen = accountant_for(noise, sigma, q, steps, 1e-5, 0.01, 1, accountant)
    if noise == "laplace":
        assert type(chosen) is LaplaceAccountant
    elif accountant in DP_ACCOUNTING:
        assert type(chosen) is DpAccountingAccountant and chosen.accountant == accountant
    else:
        assert type(chosen) is GaussianAccountant


@settings(max_examples=8, deadline=None)
@given(noise=st.sampled_from(MECHANISMS), accountant=st.sampled_from(ACCOUNTANTS), sigma=st.floats(1.5, 3.0),
       q=st.floats(0.01, 0.2), steps=st.integers(1, 10), mechanisms=st.sampled_from([1, 2]))
@example(noise="gaussian", accountant="pld", sigma=2.0, q=0.05, steps=10, mechanisms=2)
def test_the_epsilon_calibration_searches_on_is_the_guarantee_a_run_prints(noise, accountant, sigma, q, steps,
                                                                           mechanisms):
    """Calibration asks a sigma's epsilon in plain numbers (`epsilon_for`): to the bit the upper bound
    of the accountant a run with that privacy section accounts with, after all its steps."""
    with cheap_pld_grid():
        asked = epsilon_for(noise, sigma, q, steps, 1e-5, 0.01, mechanisms, accountant)
        run = accountant_for(noise, sigma, q, steps, 1e-5, 0.01, mechanisms, accountant).epsilon(steps).upper
    assert asked == run


@settings(max_examples=2, deadline=None)
@given(accountant=st.sampled_from(["prv", "rdp"]), epsilon=st.floats(2.0, 4.0), batch=st.integers(20, 100),
       steps=st.integers(5, 20), mechanisms=st.sampled_from([1, 2]))
@example(accountant="rdp", epsilon=2.0, batch=50, steps=10, mechanisms=2)
def test_a_run_a_selection_and_the_planner_calibrate_one_sigma(accountant, epsilon, batch, steps, mechanisms):
    n = 1000
    with cheap_pld_grid():   # (the plan's cross-check accounts PLD too; no PLD bound is compared here)
        plan = make_plan(PrivacySchema(epsilon=epsilon, accountant=accountant, cache_dir=None), n, batch, steps,
                         Release(queries=1, mechanisms=mechanisms), SAMPLERS["poisson"])
    q = batch / n
    assert plan.sigma == calibrate(accountant, epsilon, plan.delta, q, steps, plan.eps_error, mechanisms)
    if accountant in DP_ACCOUNTING:   # the planner's effective multiplier, times sqrt(mechanisms)
        assert plan.sigma == sigma_for(epsilon, q, steps, plan.delta, accountant) * math.sqrt(mechanisms)
    elif mechanisms == 1:   # (PRV: the planner asks for one mechanism a step)
        assert plan.sigma == sigma_for(epsilon, q, steps, plan.delta, accountant)
    assert make_accountant(plan).epsilon(steps).upper <= epsilon


@settings(max_examples=6, deadline=None)
@given(sigma=st.floats(0.8, 3.0), q=st.floats(0.005, 0.2), steps=st.integers(1, 60),
       others=st.lists(st.tuples(st.floats(0.8, 3.0), st.integers(1, 60)), max_size=2))
@example(sigma=1.0, q=0.125, steps=1, others=[(0.80078125, 23)])   # another build prv-accountant refuses
def test_an_account_handed_out_again_is_a_fresh_ones_bits(sigma, q, steps, others):
    """A PRV account built last is handed out again for the same inputs (`prv_accountant`): its
    numbers are those of an account built fresh, bit for bit, at every step and whatever other
    accounts were built, or refused by prv-accountant's check of its grid, in between."""
    try:
        first = GaussianAccountant(sigma, q, steps, 1e-5, eps_error=0.01)
    except BudgetError:   # (inputs prv-accountant cannot account: no account to hand out again)
        reject()
    numbers = [first.epsilon(t) for t in range(1, steps + 1)]
    for other_sigma, other_steps in others:
        with contextlib.suppress(BudgetError):
            GaussianAccountant(other_sigma, q, other_steps, 1e-5, eps_error=0.01).epsilon(other_steps)
    again = GaussianAccountant(sigma, q, steps, 1e-5, eps_error=0.01)
    assert [again.epsilon(t) for t in range(1, steps + 1)] == numbers
    assert again._prv is GaussianAccountant(sigma, q, steps, 1e-5, eps_error=0.01)._prv


def test_a_run_builds_its_prv_account_once(tmp_path, monkeypatch):
    """A run with its sigma in the cache confirms it by the run's own account, and its rows are then
    accounted by that same account: one PRV grid built, not one for each (0.1-0.5 s each)."""
    import prv_accountant

    from pazo.privacy.plan import EpsilonTracker

    request = (PrivacySchema(epsilon=2.0, cache_dir=str(tmp_path)), 1000, 50, 12, Release(queries=1),
               SAMPLERS["poisson"])
    with cheap_pld_grid():
        make_plan(*request)   # (calibrates: the cache and the cross-check's memo written)
        built = []
        monkeypatch.setattr(prv_accountant, "PRVAccountant",
                            lambda *a, _made=prv_accountant.PRVAccountant, **k: built.append(1) or _made(*a, **k))
        plan = make_plan(*request)
        tracker = EpsilonTracker(plan, row_steps=range(2, 13, 2))
        assert tracker.at(12) == make_accountant(plan).epsilon(12).upper <= 2.0
    assert len(built) <= 1
