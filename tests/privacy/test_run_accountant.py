"""A run's accountant (`privacy.accountant`): the run calibrates and accounts with the one chosen
(its guarantee is that accountant's epsilon, at every row), the cross-check gives each accountant's
epsilon for the run's (q, sigma, T, delta) and they bound one epsilon as the theory says, a
setting that does not apply is refused in one line, and the default leaves every fingerprint (so
every recorded run's noise) as it was."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import cheap_pld_grid
from pazo.run.cli import check_overrides
from pazo.config_schema import PrivacySchema
from pazo.run.fingerprint import computation_fingerprint
from pazo.privacy.accountants import ACCOUNTANTS, BudgetError, check_accountant, effective_noise_multiplier
from pazo.privacy.mechanisms import Release
from pazo.privacy.plan import cross_check, epsilon_spent, make_accountant, make_plan
from pazo.privacy.planner import epsilon_of
from pazo.privacy.sampling import SAMPLERS


def plan_for(accountant, n, batch, steps, epsilon=1.0, sigma=None, mechanisms=1):
    release = Release(queries=1, mechanisms=mechanisms)
    pcfg = PrivacySchema(epsilon=epsilon, sigma=sigma, accountant=accountant, cache_dir=None)
    return make_plan(pcfg, n, batch, steps, release, SAMPLERS["poisson"])


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@settings(max_examples=2, deadline=None)
@given(epsilon=st.floats(0.5, 4.0), batch=st.integers(20, 100), steps=st.integers(5, 40),
       mechanisms=st.sampled_from([1, 2]))
def test_a_run_calibrates_and_accounts_with_its_accountant(accountant, epsilon, batch, steps, mechanisms):
    """(PLD on a cheaper grid: every account here is PLD's own, so the rule holds on any grid.)"""
    with cheap_pld_grid():
        plan = plan_for(accountant, 1000, batch, steps, epsilon, mechanisms=mechanisms)
        assert plan.accountant_name == accountant and plan.sigma_source == "calibrated"
        assert accountant in plan.accountant.lower() and plan.eps_error is None
        sigma = effective_noise_multiplier(plan.sigma, mechanisms)
        by_planner = epsilon_of(sigma, plan.sample_rate, steps, plan.delta, accountant).upper
        assert epsilon_spent(plan, steps) == pytest.approx(by_planner, rel=1e-12) and by_planner <= epsilon
        # the per-row epsilon: the same accountant at every t, growing with t, the final one the guarantee
        rows = [make_accountant(plan).epsilon(t).upper for t in (1, steps // 2, steps)]
        assert rows == sorted(rows) and rows[-1] == pytest.approx(by_planner, rel=1e-12)
        # the cross-check names the accountant used, and its entry is the run's guarantee
        assert plan.cross_check["used"] == accountant
        assert plan.cross_check["epsilon"][accountant] == pytest.approx(by_planner, rel=1e-12)


def test_the_default_accountant_is_prv_and_its_numbers_are_the_runs():
    plan = plan_for("prv", 1165, 64, 546)
    assert plan.accountant_name == "prv" and round(plan.sigma, 4) == 3.5057   # make run's sigma, as before
    assert plan.cross_check["epsilon"]["prv"] == pytest.approx(epsilon_spent(plan, 546), rel=1e-12)


@settings(max_examples=3, deadline=None)
@given(sigma=st.floats(1.0, 4.0), q=st.floats(5e-3, 0.1), steps=st.integers(1, 100),
       delta=st.sampled_from([1e-5, 1e-3]))
@example(sigma=3.5057, q=64 / 1165, steps=546, delta=1 / 1165)   # make run's account
def test_the_cross_check_bounds_one_epsilon_as_the_theory_says(sigma, q, steps, delta):
    plan = plan_for("prv", round(1 / q), 1, steps, epsilon=50.0, sigma=sigma)
    plan.sample_rate, plan.delta = q, delta
    check = cross_check(plan, steps)
    lower = {a: epsilon_of(sigma, q, steps, delta, a, plan.eps_error).lower for a in ("prv", "pld")}
    slack = 2e-3 * max(1.0, check["epsilon"]["prv"])   # the grids' own error
    assert set(check["epsilon"]) == set(ACCOUNTANTS) and check["steps"] == steps
    # every accountant's upper bound lies above every lower bound (PRV's and PLD's intervals overlap)
    for upper in check["epsilon"].values():
        assert upper >= max(lower.values()) - slack
    # RDP is the loosest of the three
    assert check["epsilon"]["rdp"] >= min(check["epsilon"]["prv"], check["epsilon"]["pld"]) - slack


def test_a_runs_cross_check_builds_no_lower_bound(monkeypatch):
    """Every private run cross-checks its epsilon: PLD's lower bound, which the cross-check does not
    print, would double its cost (a second grid as large as the first)."""
    from pazo.privacy.accountants import DpAccountingAccountant

    def no_lower(self, steps_done):
        raise AssertionError("the cross-check built PLD's lower bound")
    monkeypatch.setattr(DpAccountingAccountant, "lower", no_lower)
    with cheap_pld_grid():
        plan = plan_for("prv", 1000, 50, 4, epsilon=50.0, sigma=1.0)
        pld = DpAccountingAccountant("pld", 1.0, 0.05, 4, 1e-3).upper(4)
        assert plan.cross_check["epsilon"]["pld"] == pytest.approx(pld, rel=1e-12)


@given(accountant=st.sampled_from(["rdp", "pld"]), noise=st.sampled_from(["gaussian", "laplace"]),
       eps_error=st.none() | st.floats(1e-4, 0.1))
def test_an_accountant_that_does_not_apply_is_refused(accountant, noise, eps_error):
    if noise == "gaussian" and eps_error is None:
        check_accountant(accountant, noise, eps_error)
        return
    with pytest.raises(BudgetError) as refused:
        check_accountant(accountant, noise, eps_error)
    assert "\n" not in str(refused.value) and "privacy." in str(refused.value)


@pytest.mark.parametrize("overrides, says", [
    (["privacy.accountant=rpd"], "unknown privacy.accountant 'rpd'; did you mean 'rdp'? (choices: pld, prv, rdp)"),
    (["privacy.accountant=rdp", "privacy.eps_error=0.001"], "privacy.eps_error is the PRV accountant's accuracy"),
    (["method=dp_zo", "method.noise=laplace", "privacy.accountant=pld"], "accounts Gaussian noise"),
])
def test_a_bad_accountant_on_the_command_line_is_one_line(overrides, says):
    problem = check_overrides(overrides)
    assert problem is not None and says in problem and "\n" not in problem


CONFIG = st.fixed_dictionaries({"seed": st.integers(0, 9), "privacy": st.fixed_dictionaries(
    {"epsilon": st.floats(0.1, 8), "delta": st.none() | st.floats(1e-6, 1e-3)}),
    "method": st.fixed_dictionaries({"name": st.sampled_from(["pazo_m", "dpsgd"]), "lr": st.floats(0.01, 1)})})


@given(cfg=CONFIG)
def test_the_default_accountant_leaves_the_fingerprint_as_it_was(cfg):
    """Runs recorded before the key existed keep their fingerprint, so their noise and batches; any
    other accountant is another computation (its own noise)."""
    with_default = {**cfg, "privacy": {**cfg["privacy"], "accountant": "prv"}}
    assert computation_fingerprint(with_default) == computation_fingerprint(cfg)
    others = {computation_fingerprint({**cfg, "privacy": {**cfg["privacy"], "accountant": a}}) for a in ("rdp", "pld")}
    assert len(others) == 2 and computation_fingerprint(cfg) not in others
