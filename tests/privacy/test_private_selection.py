"""Private hyperparameter selection's accounting (pazo.privacy.selection) against the issue's worked
numbers and an independent computation: the per-run RDP of the Poisson-subsampled Gaussian by its
exact binomial expansion at integer orders (Mironov, Talwar and Zhang 2019), Theorem 2 of Papernot
and Steinke (2022) for the truncated negative binomial K (geometric and logarithmic included), and
the RDP-to-(epsilon, delta) conversion of Canonne, Kamath and Steinke (2020), all written out here.
The distribution of K: its law sums to one with the stated mean, and a draw follows it."""
import math
import random

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.special import gammaln, logsumexp

from pazo.privacy.selection import (LARGEST_K, LARGEST_UNIFORM, MAX_MEAN, KDistribution, RunAccount, rdp_curve,
                                    run_epsilon, selection_epsilon)

#: the integer orders of dp-accounting's default grid: the independent bound minimises over these, a
#: subset of the library's orders, so it is never below the library's and close to it
ORDERS = [int(a) for a in rdp.RdpAccountant()._orders if float(a).is_integer() and a >= 2]
SHAPES = {"geometric": 1.0, "logarithmic": 0.0}


def subsampled_gaussian_rdp(q: float, sigma: float, steps: int, order: int) -> float:
    """T steps' RDP at an integer order: log E[(1 - q + q e^{...})^order] by the binomial expansion."""
    k = np.arange(order + 1)
    log_binomial = gammaln(order + 1) - gammaln(k + 1) - gammaln(order - k + 1)
    terms = log_binomial + (order - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * sigma ** 2)
    return steps * float(logsumexp(terms)) / (order - 1)


def tnb_gamma(eta: float, mean: float) -> float:
    """The truncated negative binomial's gamma for its mean (bisection on the closed-form mean)."""
    def mean_of(g):
        if eta == 1:
            return 1 / g
        if eta == 0:
            return (1 - g) / (g * math.log(1 / g))
        return eta * (1 - g) / (g * (1 - g ** eta))
    lo, hi = 1e-15, 1 - 1e-15
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mean_of(mid) > mean else (lo, mid)
    return lo


def theorem2_epsilon(q, sigma, steps, mean, eta, delta, selections=1) -> float:
    """Papernot & Steinke's Theorem 2 from the per-run RDP curve, composed `selections` times and
    converted to (epsilon, delta)."""
    curve = {a: subsampled_gaussian_rdp(q, sigma, steps, a) for a in ORDERS}
    gamma = tnb_gamma(eta, mean)
    constant = (1 + eta) * min((1 - 1 / b) * curve[b] + math.log(1 / gamma) / b for b in ORDERS)
    return min(selections * (curve[a] + constant + math.log(mean) / (a - 1)) + math.log((a - 1) / a)
               - (math.log(delta) + math.log(a)) / (a - 1) for a in ORDERS)


def test_the_issues_worked_numbers_at_delta_1e_5():
    """q 0.01, sigma 3, T 1000: 0.419 for one run, 0.939 for the best of a geometric number with mean 10
    (both at delta 1e-5; at 1e-6 they are 0.481 and 0.995)."""
    run = RunAccount(0.01, 1000, 3.0)
    assert run_epsilon(run, 1e-5) == pytest.approx(0.419, abs=5e-4)
    assert selection_epsilon([run], KDistribution("geometric", 10), 1e-5) == pytest.approx(0.939, abs=5e-4)
    assert selection_epsilon([run], KDistribution("geometric", 10), 1e-6) == pytest.approx(0.995, abs=5e-4)
    assert theorem2_epsilon(0.01, 3.0, 1000, 10, 1.0, 1e-5) == pytest.approx(0.939, abs=5e-4)


@settings(max_examples=8, deadline=None)
@given(q=st.floats(1e-3, 0.1), sigma=st.floats(0.7, 5.0), steps=st.integers(1, 3000),
       mean=st.floats(1.5, 50), name=st.sampled_from(["geometric", "logarithmic", "truncated_negative_binomial"]),
       eta=st.floats(0.1, 5.0), delta=st.floats(1e-8, 1e-3), selections=st.integers(1, 3))
def test_the_selection_total_agrees_with_theorem_2(q, sigma, steps, mean, name, eta, delta, selections):
    """The run's RDP curve equals the binomial expansion at integer orders; Theorem 2 applied here to
    that curve at every order of the library (with RDP's monotonicity in the order) gives the
    library's total; the bound over integer orders alone is never below it."""
    eta = SHAPES.get(name, eta)
    k = KDistribution(name, mean, eta if name == "truncated_negative_binomial" else None)
    run = RunAccount(q, steps, sigma)
    ours = selection_epsilon([run], k, delta, selections)
    orders = np.asarray(rdp.RdpAccountant()._orders, dtype=float)
    curve = rdp_curve(run)
    for a in ORDERS:
        assert curve[list(orders).index(a)] == pytest.approx(subsampled_gaussian_rdp(q, sigma, steps, a), rel=1e-6)
    gamma = tnb_gamma(eta, mean)
    constant = (1 + eta) * np.min((1 - 1 / orders) * curve + math.log(1 / gamma) / orders)
    selected = curve + constant + math.log(mean) / np.where(orders > 1, orders - 1, np.nan)
    selected = np.minimum.accumulate(np.nan_to_num(selected, nan=np.inf)[::-1])[::-1] * selections
    converted = selected + np.log((orders - 1) / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    assert ours == pytest.approx(float(np.min(converted)), rel=1e-6)
    assert ours <= theorem2_epsilon(q, sigma, steps, mean, eta, delta, selections) * (1 + 1e-6) + 1e-9
    assert ours > run_epsilon(run, delta)   # a selection costs more than one run


@settings(max_examples=6, deadline=None)
@given(q=st.floats(1e-3, 0.1), sigma=st.floats(0.7, 5.0), steps=st.integers(1, 2000),
       factor=st.floats(1.0, 3.0), mean=st.floats(1.5, 30))
def test_a_grid_that_varies_q_and_t_pays_for_its_worst_run(q, sigma, steps, factor, mean):
    """Several accounts: the total covers each alone, and equals the dominating one's where one run
    dominates every order (more steps, same q and sigma)."""
    k = KDistribution("geometric", mean)
    small, large = RunAccount(q, steps, sigma), RunAccount(q, max(steps, round(steps * factor)), sigma)
    both = selection_epsilon([small, large], k, 1e-5)
    assert both == pytest.approx(selection_epsilon([large], k, 1e-5), rel=1e-9)
    other = RunAccount(min(1.0, q * factor), steps, sigma * 1.5)
    mixed = selection_epsilon([small, other], k, 1e-5)
    assert mixed >= max(selection_epsilon([small], k, 1e-5), selection_epsilon([other], k, 1e-5)) * (1 - 1e-9)


def test_laplace_runs_are_not_accounted():
    with pytest.raises(ValueError, match="Gaussian"):
        RunAccount(0.01, 10, 1.0, noise="laplace").event()


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(["geometric", "logarithmic", "truncated_negative_binomial", "poisson"]),
       mean=st.floats(1.2, 40), eta=st.floats(0.05, 8.0))
def test_the_law_of_k_has_its_mean_and_sums_to_one(name, mean, eta):
    k = KDistribution(name, mean, eta if name == "truncated_negative_binomial" else None)
    values = np.arange(0, 20_000)
    pmf = k.pmf(values)
    assert pmf.sum() == pytest.approx(1, abs=1e-6)
    assert (values * pmf).sum() == pytest.approx(mean, rel=1e-4)
    assert pmf[0] == 0 or name == "poisson"
    assert k.quantile(0.5) <= k.quantile(0.95)


@pytest.mark.parametrize("k", [KDistribution("geometric", 4), KDistribution("logarithmic", 4),
                               KDistribution("truncated_negative_binomial", 4, 0.5), KDistribution("poisson", 4)])
def test_draws_follow_the_law(k):
    """4000 draws: the empirical mean within 5 standard errors, P(K = 1) within 5 standard errors."""
    rng = random.Random(0)
    draws = np.array([k.draw(rng) for _ in range(4000)])
    std = math.sqrt(float((np.arange(0, 5000) ** 2 * k.pmf(np.arange(0, 5000))).sum()) - k.mean ** 2)
    assert abs(draws.mean() - k.mean) < 5 * std / math.sqrt(len(draws))
    p1 = float(k.pmf(1))
    assert abs((draws == 1).mean() - p1) < 5 * math.sqrt(p1 * (1 - p1) / len(draws))
    assert draws.min() >= (0 if k.name == "poisson" else 1)


@pytest.mark.parametrize("args", [("geometric", 1.0, None), ("geometric", 5, 2.0), ("poisson", float("nan"), None),
                                  ("truncated_negative_binomial", 5, 0), ("truncated_negative_binomial", 5, None),
                                  ("binomial", 5, None), ("logarithmic", True, None)])
def test_a_bad_distribution_of_k_is_refused(args):
    with pytest.raises(ValueError):
        KDistribution(*args)


class _LargestUniform(random.Random):
    """The largest number `random.random()` returns: the draw's inversion reads no larger one."""

    def random(self) -> float:
        return LARGEST_UNIFORM


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["geometric", "logarithmic", "truncated_negative_binomial", "poisson"]),
       mean=st.floats(1.0001, MAX_MEAN), eta=st.floats(1e-6, 1e6))
@example(name="truncated_negative_binomial", mean=2.0, eta=0.01)      # P(K'=0) near 1: the inversion overflowed
@example(name="logarithmic", mean=float(MAX_MEAN), eta=1.0)           # the heaviest tail at the largest mean
def test_no_draw_of_k_exceeds_the_bound_and_none_overflows(name, mean, eta):
    """At every E[K] up to the maximum, the largest K a draw can give (at the largest uniform number)
    is finite and within LARGEST_K: the draw's list of runs is bounded in memory."""
    k = KDistribution(name, mean, eta if name == "truncated_negative_binomial" else None)
    assert k.lowest <= k.draw(_LargestUniform()) == k.largest_draw() <= LARGEST_K


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["geometric", "logarithmic", "truncated_negative_binomial", "poisson"]),
       mean=st.floats(1.2, 40), eta=st.floats(0.01, 8.0), p=st.floats(0, 0.999))
def test_the_quantile_is_the_smallest_k_whose_distribution_function_reaches_p(name, mean, eta, p):
    k = KDistribution(name, mean, eta if name == "truncated_negative_binomial" else None)
    cdf = np.cumsum(k.pmf(np.arange(0, 100_000)))
    q = k.quantile(p)
    assert cdf[q] >= p - 1e-9 and (q == k.lowest or cdf[q - 1] < p + 1e-9)


@pytest.mark.parametrize("mean", [MAX_MEAN * (1 + 1e-9), 1e9, 1e300])
def test_a_mean_above_the_maximum_is_refused(mean):
    with pytest.raises(ValueError, match=f"at most {MAX_MEAN}"):
        KDistribution("geometric", mean)
