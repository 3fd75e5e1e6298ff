"""The accountant against independent values and its own consistency."""
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from pazo.privacy import accountants as acc
from pazo.privacy import calibration, rdp
from pazo.privacy.accountants import BudgetError, GaussianAccountant
from pazo.privacy.calibration import calibrate_sigma, rdp_epsilon
from sigma_cache_checks import check_bad_entry_is_recalibrated


def pld_epsilon(sigma, q, steps, delta, mechanisms=1):
    """dp-accounting's PLD accountant: an independent implementation used as the oracle.
    `mechanisms` Gaussian releases of the *same* Poisson batch: one Gaussian with sigma/sqrt(m)
    (PLD supports only a single Gaussian inside a Poisson-sampled event)."""
    inner = dp_event.GaussianDpEvent(sigma / math.sqrt(mechanisms))
    event = dp_event.PoissonSampledDpEvent(q, inner) if q < 1 else inner
    account = pld_privacy_accountant.PLDAccountant()
    account.compose(event, steps)
    return account.get_epsilon(delta)


def test_rdp_matches_opacus_golden_value():
    # Opacus' regression value for its RDP accountant
    assert rdp_epsilon(1.5, 0.04, 2250, 1e-5) == pytest.approx(7.329, abs=0.01)


@pytest.mark.parametrize("sigma,q,steps,delta,expected_upper", [
    (1.1, 256 / 60000, 14062, 1e-5, 2.3917),   # REFERENCE.md test vectors (prv-accountant 0.2.0)
    pytest.param(0.8, 0.01, 10000, 1e-5, 10.0642, marks=pytest.mark.slow),   # (the costlier: the first checks the rule)
])
def test_prv_matches_reference_vectors(sigma, q, steps, delta, expected_upper):
    bounds = GaussianAccountant(sigma, q, steps, delta, eps_error=0.01).epsilon(steps)
    assert bounds.upper == pytest.approx(expected_upper, abs=2e-3)
    assert bounds.lower <= pld_epsilon(sigma, q, steps, delta) <= bounds.upper


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.01, 1000), (3.0, 0.05, 600), (0.7, 0.002, 3000)])
def test_prv_no_larger_than_rdp_and_agrees_with_pld(sigma, q, steps):
    delta = 1e-5
    bounds = GaussianAccountant(sigma, q, steps, delta, eps_error=0.01).epsilon(steps)
    assert bounds.upper <= rdp_epsilon(sigma, q, steps, delta)
    assert abs(bounds.estimate - pld_epsilon(sigma, q, steps, delta)) < 0.01


def test_epsilon_monotone_in_steps_and_sigma():
    a = GaussianAccountant(2.0, 0.02, 2000, 1e-5, eps_error=0.01)
    eps = [a.epsilon(t).upper for t in (0, 10, 200, 1000, 2000)]
    assert eps[0] == 0 and all(x < y for x, y in zip(eps, eps[1:]))
    by_sigma = [GaussianAccountant(s, 0.02, 500, 1e-5, eps_error=0.01).epsilon(500).upper
                for s in (0.8, 1.0, 2.0, 4.0)]
    assert all(x > y for x, y in zip(by_sigma, by_sigma[1:]))


@pytest.mark.parametrize("epsilon,q,steps", [(1.0, 64 / 1300, 600), (0.5, 0.01, 2000), (3.0, 0.05, 300)])
def test_calibrate_then_account_round_trip(epsilon, q, steps):
    delta = 1e-5
    sigma = calibrate_sigma(epsilon, delta, q, steps)
    spent = GaussianAccountant(sigma, q, steps, delta, eps_error=acc.default_eps_error(epsilon)).epsilon(steps)
    assert spent.upper <= epsilon
    # tight: 1% less noise would break the target
    looser = GaussianAccountant(sigma * 0.99, q, steps, delta,
                                eps_error=acc.default_eps_error(epsilon)).epsilon(steps)
    assert looser.upper > epsilon
    assert pld_epsilon(sigma, q, steps, delta) <= epsilon


def test_two_mechanisms_per_step_compose_like_pld():
    sigma, q, steps, delta = 2.0, 0.02, 500, 1e-5
    two = GaussianAccountant(sigma, q, steps, delta, eps_error=0.01, mechanisms=2).epsilon(steps)
    assert two.lower - 1e-3 <= pld_epsilon(sigma, q, steps, delta, mechanisms=2) <= two.upper + 1e-3
    # the same two Gaussians on one batch, composed by the oracle's own rule, without subsampling
    full = dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(sigma)] * 2)
    oracle = pld_privacy_accountant.PLDAccountant()
    oracle.compose(full, 3)
    assert GaussianAccountant(sigma, 1.0, 3, delta, mechanisms=2).epsilon(3).upper == pytest.approx(
        oracle.get_epsilon(delta), abs=2e-3)
    assert two.upper > GaussianAccountant(sigma, q, steps, delta, eps_error=0.01).epsilon(steps).upper
    sigma2 = calibrate_sigma(1.0, delta, q, steps, mechanisms=2)
    assert sigma2 == pytest.approx(math.sqrt(2) * calibrate_sigma(1.0, delta, q, steps), rel=1e-6)


def test_full_batch_uses_exact_gaussian_composition():
    # REFERENCE.md: p = 1, T = 100, epsilon 1 needs sigma about 37.31
    sigma = calibrate_sigma(1.0, 1e-5, 1.0, 100)
    assert sigma == pytest.approx(37.31, rel=2e-3)
    assert pld_epsilon(sigma, 1.0, 100, 1e-5) == pytest.approx(1.0, abs=2e-3)


def test_calibration_is_cached_on_disk(tmp_path, monkeypatch):
    first = calibrate_sigma(1.0, 1e-5, 0.02, 300, cache_dir=tmp_path)
    assert len(list((tmp_path / "sigma").glob("*.json"))) == 1

    def boom(*a, **k):
        raise AssertionError("recomputed despite the cache")
    monkeypatch.setattr(calibration, "_calibrate_uncached", boom)
    assert calibrate_sigma(1.0, 1e-5, 0.02, 300, cache_dir=tmp_path) == first
    with pytest.raises(AssertionError):  # different inputs are not served from the cache
        calibrate_sigma(1.0, 1e-5, 0.02, 301, cache_dir=tmp_path)


@pytest.mark.parametrize("kwargs,match", [
    ({"epsilon": 0.0}, "epsilon must be > 0"),
    ({"delta": 1.0}, "delta"),
    ({"epsilon": 1e-6, "q": 1.0}, "out of reach"),
    ({"epsilon": 1e-7}, "out of reach"),
])
def test_impossible_budgets_raise(kwargs, match):
    args = {"epsilon": 1.0, "delta": 1e-5, "q": 0.5, "steps": 1000} | kwargs
    with pytest.raises(BudgetError, match=match):
        calibrate_sigma(args["epsilon"], args["delta"], args["q"], args["steps"])


# --- Laplace: the exact composition of the amplified pure-DP steps --------------------------------

def kov_delta(eps0, steps, i):
    """Kairouz, Oh & Viswanath (2015), Theorem 3.3: delta of `steps` eps0-DP steps at the corner
    epsilon = (steps - 2i) eps0 of the optimal privacy region (an independent closed form)."""
    return sum(math.comb(steps, j) * (math.exp((steps - j) * eps0) - math.exp((steps - 2 * i + j) * eps0))
               for j in range(i)) / (1 + math.exp(eps0)) ** steps


@pytest.mark.parametrize("eps0,steps", [(0.3, 7), (0.05, 40), (1.2, 15)])
def test_pure_dp_composition_matches_the_optimal_composition_theorem(eps0, steps):
    comp = acc.PureDPComposition(eps0, steps)
    for i in range(steps // 2 + 1):
        want = kov_delta(eps0, steps, i)
        assert comp.delta((steps - 2 * i) * eps0) == pytest.approx(want, rel=1e-9, abs=1e-15)


def test_pure_dp_composition_matches_brute_force_hockey_stick():
    """delta(eps) = sum over all 2^T outcome sequences of (P - e^eps Q)+, randomized response."""
    import itertools
    eps0, steps = 0.4, 10
    p_true = math.exp(eps0) / (1 + math.exp(eps0))
    comp = acc.PureDPComposition(eps0, steps)
    for eps in (0.0, 0.5, 1.3, 2.2, 3.9):
        brute = 0.0
        for seq in itertools.product((0, 1), repeat=steps):
            ones = sum(seq)
            p = p_true ** ones * (1 - p_true) ** (steps - ones)
            q = (1 - p_true) ** ones * p_true ** (steps - ones)
            brute += max(0.0, p - math.exp(eps) * q)
        assert comp.delta(eps) == pytest.approx(brute, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("sigma,q,steps,delta", [(3.0, 64 / 1294, 607, 1 / 1294), (16.3, 0.016, 4000, 1e-5),
                                                 (2.0, 0.05, 200, 1e-5), (8.0, 0.01, 3000, 1e-6)])
def test_exact_laplace_account_within_prv_and_pld_brackets(sigma, q, steps, delta):
    """prv-accountant's grid bracket and dp-accounting's optimistic/pessimistic PLDs of the same
    randomized response both contain the exact value."""
    from prv_accountant import PRVAccountant, PureDPMechanism
    exact = acc.LaplaceAccountant(sigma, q, steps, delta).epsilon(steps).upper
    eps0 = acc.amplified_pure_epsilon(sigma, q)
    prv = PRVAccountant(prvs=[PureDPMechanism(eps=eps0)], eps_error=0.01, delta_error=delta / 1000,
                        max_self_compositions=[steps])
    prv = prv.compute_epsilon(delta=delta, num_self_compositions=[steps])
    assert prv[0] <= exact <= prv[2]
    # dp-accounting's PLD of the same randomized response (its PLDAccountant 0.6 composes a
    # RandomizedResponseDpEvent once whatever the count, so the distribution is composed directly)
    from dp_accounting.pld import privacy_loss_distribution
    def pld(pessimistic):
        return privacy_loss_distribution.from_randomized_response(
            noise_parameter=2 / (1 + math.exp(eps0)), num_buckets=2, pessimistic_estimate=pessimistic,
            value_discretization_interval=1e-5).self_compose(steps).get_epsilon_for_delta(delta)
    assert pld(False) <= exact <= pld(True)
    assert exact <= acc.laplace_pure_epsilon(sigma, q, steps)


@pytest.mark.parametrize("epsilon,delta,q,steps", [(1.0, 1 / 1294, 64 / 1294, 607), (0.5, 1e-5, 0.02, 1000),
                                                   (4.0, 1e-5, 16 / 1000, 75000), (0.1, 1e-5, 0.01, 5000),
                                                   (10.0, 1e-6, 0.5, 50)])
def test_laplace_calibration_lands_within_one_percent_under_the_target(epsilon, delta, q, steps):
    sigma = calibrate_sigma(epsilon, delta, q, steps, mechanism="laplace")
    spent = acc.LaplaceAccountant(sigma, q, steps, delta).epsilon(steps).upper
    assert 0.99 * epsilon <= spent <= epsilon
    assert acc.LaplaceAccountant(sigma * 0.999, q, steps, delta).epsilon(steps).upper > epsilon


@pytest.mark.parametrize("epsilon,q,steps", [(1.0, 64 / 1294, 607), (4.0, 0.02, 2000), (0.01, 1.0, 3),
                                             (50.0, 0.3, 10)])
def test_pure_laplace_closed_form_is_exact(epsilon, q, steps):
    sigma = calibrate_sigma(epsilon, 0.0, q, steps, mechanism="laplace")
    assert epsilon * (1 - 1e-8) <= acc.laplace_pure_epsilon(sigma, q, steps) <= epsilon
    acct = acc.LaplaceAccountant(sigma, q, steps, 0.0).epsilon(steps)
    assert acct.upper == acc.laplace_pure_epsilon(sigma, q, steps)


# --- bounded accounts: grid size known in advance, exact one-step bound ---------------------------

def test_amplified_pure_epsilon_does_not_overflow_for_tiny_sigma():
    assert acc.amplified_pure_epsilon(1e-6, 0.05) == pytest.approx(1e6 + math.log(0.05), rel=1e-12)
    x = 29.9  # both branches agree where they meet
    assert acc.amplified_pure_epsilon(1 / x, 0.3) == pytest.approx(x + math.log(0.3 + 0.7 * math.exp(-x)),
                                                                   rel=1e-12)


def test_prv_grid_predicts_the_grid_prv_accountant_builds():
    from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant
    for sigma, q, steps, err in [(1.0, 0.05, 300, 0.01), (3.0, 0.01, 2000, 0.05)]:
        points = acc.prv_grid(sigma, q, steps, 1e-5, err)[1]
        built = PRVAccountant(prvs=[PoissonSubsampledGaussianMechanism(sampling_probability=q,
                                                                       noise_multiplier=sigma)],
                              eps_error=err, delta_error=1e-8, max_self_compositions=[steps])
        assert abs(len(built.composer.self_composers[0].domain) - points) <= 4  # alignment


@settings(max_examples=12, deadline=None, derandomize=True)
@given(sigma=st.floats(0.4, 40.0), q=st.floats(1e-4, 0.95), steps=st.integers(1, 10 ** 5),
       eps_error=st.sampled_from([0.005, 0.01, 0.1]), delta=st.sampled_from([1e-4, 1e-5, 1e-8]))
def test_the_safe_domain_and_the_rdp_bound_are_prv_accountants_to_the_bit(sigma, q, steps, eps_error, delta):
    """Our domain (RDP values computed once per process) is the library's formula, bit for bit: the
    grid every account builds, and so every epsilon and calibrated sigma, is what prv-accountant's
    own `compute_safe_domain_size` and `RDP` would give."""
    import numpy as np
    from prv_accountant import PoissonSubsampledGaussianMechanism
    from prv_accountant.accountant import compute_safe_domain_size
    from prv_accountant.other_accountants import RDP
    mechanism = PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=sigma)
    with np.errstate(all="ignore"):
        domain = float(compute_safe_domain_size([mechanism], [steps], eps_error=eps_error, delta_error=delta / 1000))
        bound = float(RDP(prvs=[mechanism]).compute_epsilon(delta=delta, num_self_compositions=[steps])[2])
    assert acc.prv_grid(sigma, q, steps, delta, eps_error)[0] == domain
    assert rdp_epsilon(sigma, q, steps, delta) == bound
    assert acc.step_rdp(q, sigma) is acc.step_rdp(q, sigma) and not acc.step_rdp(q, sigma).flags.writeable


@settings(max_examples=60, deadline=None)
@given(sigma=st.floats(0.1, 100.0), q=st.floats(1e-6, 0.999),
       alpha=st.one_of(st.floats(1.01, 80.0), st.integers(2, 200).map(float), st.sampled_from(rdp.PRV_RDP_ORDERS)))
def test_each_orders_rdp_is_prv_accountants_to_the_bit(sigma, q, alpha):
    """`pazo.privacy.rdp` sums prv-accountant's series with its special functions a block at a time:
    the same value, bit for bit, at any order (fractional or integer), rate and noise."""
    import numpy as np
    from prv_accountant import PoissonSubsampledGaussianMechanism
    mechanism = PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=sigma)
    with np.errstate(all="ignore"):
        want, got = mechanism.rdp(np.float64(alpha)), rdp.order_rdp(q, sigma, np.float64(alpha))
    assert got == want or (math.isnan(got) and math.isnan(want)), (got, want)


def test_accountant_widens_prvs_own_domain_to_a_fast_fft_length_and_agrees_with_it():
    from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant
    from sympy import primefactors
    plain = PRVAccountant(prvs=[PoissonSubsampledGaussianMechanism(sampling_probability=0.05,
                                                                   noise_multiplier=1.3)],
                          eps_error=0.01, delta_error=1e-8, max_self_compositions=[400])
    accountant = GaussianAccountant(1.3, 0.05, 400, 1e-5, eps_error=0.01)
    plain_points, ours_points = len(plain.composer.self_composers[0].domain), len(accountant._fourier.domain)
    assert plain_points <= ours_points <= 1.01 * plain_points + 100
    assert set(primefactors(ours_points)) <= {2, 3, 5} and ours_points % 2 == 0
    ours = accountant.epsilon(400)
    reference = [max(float(v), 0.0) for v in plain.compute_epsilon(delta=1e-5, num_self_compositions=[400])]
    # a slightly wider domain of the same mesh: the same numbers up to float rounding
    assert [ours.lower, ours.estimate, ours.upper] == pytest.approx(reference, rel=1e-9)


def test_epsilon_at_any_sequence_of_steps_equals_prv_accountants_composition():
    """The accountant raises F^t by repeated squaring: every value must equal prv-accountant's own
    composition on the same grid, and be the same bits whatever was asked before (a resumed run
    logs what an uninterrupted one does)."""
    accountant = GaussianAccountant(1.1, 0.02, 600, 1e-5, eps_error=0.01)   # (a smaller grid: the rule is T's)
    for t in (10, 20, 200, 590, 600, 7, 300):
        ours = accountant.epsilon(t)
        lib = accountant._prv.compute_epsilon(delta=1e-5, num_self_compositions=[t])
        assert [ours.lower, ours.estimate, ours.upper] == pytest.approx(
            [max(float(v), 0.0) for v in lib], rel=1e-9, abs=1e-12)
    assert GaussianAccountant(1.1, 0.02, 600, 1e-5, eps_error=0.01).epsilon(300) == accountant.epsilon(300)
    with pytest.raises(BudgetError, match="601 steps"):
        accountant.epsilon(601)


def test_oversized_grid_is_refused_before_it_is_built_with_a_workable_eps_error():
    with pytest.raises(BudgetError, match=r"PRV grid .* use privacy.eps_error >= ([0-9.e-]+)") as info:
        GaussianAccountant(3.0, 64 / 1294, 607, 1 / 1294, eps_error=1e-4)
    suggested = float(str(info.value).split("eps_error >= ")[1].split()[0])
    assert acc.prv_grid(3.0, 64 / 1294, 607, 1 / 1294, suggested)[1] <= acc.PRV_GRID_MAX


def test_one_step_delta_is_exact():
    # q = 1: the Gaussian mechanism's own delta
    for sigma, eps in [(1.0, 0.5), (0.3, 3.0), (5.0, 0.1)]:
        assert acc.gaussian_one_step_delta(sigma, 1.0, eps) == pytest.approx(
            acc._gaussian_delta(eps, 1 / sigma), rel=1e-9)
    # q < 1: one PRV step brackets it, dp-accounting's PLD agrees
    sigma, q, eps = 0.8, 0.05, 1.0
    delta = acc.gaussian_one_step_delta(sigma, q, eps)
    bounds = GaussianAccountant(sigma, q, 1, delta, eps_error=0.01).epsilon(1)
    assert bounds.lower <= eps <= bounds.upper
    assert pld_epsilon(sigma, q, 1, delta) == pytest.approx(eps, abs=2e-3)
    assert acc.gaussian_one_step_delta(1e-6, 0.05, 1.0) == pytest.approx(0.05)  # no overflow


def test_prv_solve_goes_past_a_bracket_the_prv_bound_does_not_meet():
    """PRV's upper bound (estimate + eps_error) can sit above a nearly tight RDP one at `hi`."""
    def upper(s, err):
        return 1.0 / s + err
    sigma = calibration._prv_solve(upper, epsilon=1.0, eps_error=0.01, hi=1.0, lo_ratio=0.75)
    assert upper(sigma, 0.01) <= 1.0 and sigma > 1.0


def test_small_targets_calibrate_with_wide_rdp_orders():
    """Opacus' RDP orders (<= 63) cannot certify epsilon 0.05 at delta 1e-5; the PRV can."""
    sigma = calibrate_sigma(0.05, 1e-5, 0.05, 50)
    spent = GaussianAccountant(sigma, 0.05, 50, 1e-5, eps_error=acc.default_eps_error(0.05)).epsilon(50)
    assert 0.99 * 0.05 <= spent.upper <= 0.05
    assert pld_epsilon(sigma, 0.05, 50, 1e-5) <= 0.05


@pytest.mark.parametrize("delta,mechanism,ok", [(1e-5, "gaussian", True), (0.0, "laplace", True),
                                                (0.0, "gaussian", False), (1.0, "laplace", False),
                                                (-1e-5, "laplace", False), (float("nan"), "gaussian", False),
                                                (True, "gaussian", False), ("1e-5", "gaussian", False)])
def test_check_delta_is_the_one_rule(delta, mechanism, ok):
    if ok:
        assert acc.check_delta(delta, mechanism) == delta
    else:
        with pytest.raises(BudgetError, match="0 only for pure DP with Laplace noise"):
            acc.check_delta(delta, mechanism)
    class ConfigLike(ValueError):
        pass
    if not ok:  # validate.py raises its own error class, under its own name
        with pytest.raises(ConfigLike, match=r"^privacy\.delta must be in"):
            acc.check_delta(delta, mechanism, name="privacy.delta", error=ConfigLike)


@pytest.mark.parametrize("epsilon", [1e-4, 51.0, 1000.0, 1e9, float("inf")])
def test_targets_outside_the_supported_range_are_refused(epsilon):
    with pytest.raises(BudgetError, match=r"out of reach: pazo accounts target epsilons in \[0.001, 50\]"):
        calibrate_sigma(epsilon, 1e-5, 0.02, 300)


# --- the sigma cache is validated before use ------------------------------------------------------

CACHE_ARGS = (1.0, 1e-5, 0.02, 300)


@pytest.fixture(scope="module")
def fresh_sigma():
    return calibrate_sigma(*CACHE_ARGS)


POISONS = {
    "overspending sigma": lambda e: json.dumps({**e, "sigma": e["sigma"] * 0.5}),
    "null": lambda e: json.dumps({**e, "sigma": None}),
    "negative": lambda e: json.dumps({**e, "sigma": -e["sigma"]}),
    "zero": lambda e: json.dumps({**e, "sigma": 0}),
    "string": lambda e: json.dumps({**e, "sigma": str(e["sigma"])}),
    "list": lambda e: json.dumps({**e, "sigma": [e["sigma"]]}),
    "bool": lambda e: json.dumps({**e, "sigma": True}),
    "nan": lambda e: json.dumps({**e, "sigma": float("nan")}),
    "inf": lambda e: json.dumps({**e, "sigma": float("inf")}),
    "huge": lambda e: json.dumps({**e, "sigma": 1e300}),
    "missing sigma": lambda e: json.dumps({k: v for k, v in e.items() if k != "sigma"}),
    "truncated JSON": lambda e: json.dumps(e)[:40],
    "top-level list": lambda e: json.dumps([e]),
    "garbage bytes": lambda e: "\x00\xff not json",
    # sigma 1.2x meets this target too: only the key check can refuse it
    "other inputs (key collision)": lambda e: json.dumps({**e, "steps": 600, "sigma": e["sigma"] * 1.2}),
    "input of another type": lambda e: json.dumps({**e, "steps": float(e["steps"])}),
    "old algorithm": lambda e: json.dumps({**e, "algorithm": 2}),
}


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_poisoned_cache_entry_is_recomputed_overwritten_and_warned_once(poison, fresh_sigma, tmp_path,
                                                                         monkeypatch, caplog):
    check_bad_entry_is_recalibrated(POISONS[poison], fresh_sigma, CACHE_ARGS, tmp_path, monkeypatch, caplog)


def test_cache_entry_that_meets_the_target_is_served_without_recomputing(fresh_sigma, tmp_path, monkeypatch):
    calibrate_sigma(*CACHE_ARGS, cache_dir=tmp_path)
    monkeypatch.setattr(calibration, "_calibrate_uncached", lambda *a, **k: pytest.fail("recomputed"))
    assert calibrate_sigma(*CACHE_ARGS, cache_dir=tmp_path) == fresh_sigma


def test_unwritable_cache_is_skipped(tmp_path, monkeypatch):
    (tmp_path / "sigma").write_text("a file where the cache folder should be")
    assert calibrate_sigma(1.0, 1e-5, 1.0, 100, cache_dir=tmp_path) == calibrate_sigma(1.0, 1e-5, 1.0, 100)


@pytest.mark.parametrize("kwargs,match", [
    ({"steps": float("inf")}, "number of steps"), ({"steps": float("nan")}, "number of steps"),
    ({"steps": 0}, "number of steps"), ({"steps": 2.5}, "number of steps"),
    ({"sample_rate": 0.0}, "sample rate"), ({"sample_rate": 1.5}, "sample rate"),
    ({"mechanisms": 0}, "mechanisms"), ({"eps_error": 2.0}, "eps_error"),
])
def test_malformed_run_inputs_are_refused_not_crashed(kwargs, match):
    args = {"epsilon": 1.0, "delta": 1e-5, "sample_rate": 0.02, "steps": 300} | kwargs
    with pytest.raises(BudgetError, match=match):
        calibrate_sigma(**args)
