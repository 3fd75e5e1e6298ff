"""One chooser of accountants and one calibration entry: whatever a run's privacy section names, the
accountant is picked in `accountant_for` (the plan, the tracker and the cache check ask it), and a
run's plan, a sweep's private selection (`calibrate`) and `pazo-privacy sigma` (`sigma_for`) give the
same sigma for the same request, so that each accounts the noise a run adds."""
from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import cheap_pld_grid
from pazo.config_schema import PrivacySchema
from pazo.privacy.accountants import (ACCOUNTANTS, DP_ACCOUNTING, MECHANISMS, DpAccountingAccountant,
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
