"""The accountant against independent values and its own consistency."""
import math

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from pazo.privacy import accountant as acc
from pazo.privacy.accountant import (BudgetError, GaussianAccountant, calibrate_sigma, rdp_epsilon)


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
    (0.8, 0.01, 10000, 1e-5, 10.0642),
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
    monkeypatch.setattr(acc, "_calibrate_uncached", boom)
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
