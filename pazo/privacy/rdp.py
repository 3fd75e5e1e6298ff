"""The RDP of one Poisson-subsampled Gaussian step, as prv-accountant computes it, bit for bit.

prv-accountant sizes every PRV grid from RDP values (its safe domain, Gopi et al. 2021, remark 5.6)
and our calibration brackets sigma with the RDP bound, so a new account costs a few hundred of the
series of Mironov et al. 2019 (TF Privacy's `_compute_log_a`). prv-accountant sums each series term
by term with scipy's special functions called on one number at a time, up to half a second for its
151 orders. Here the same terms are summed in the same order with the same floating-point
operations, but scipy's functions (`binom`, `log_ndtr`, `gammaln`: the same kernel for an array as
for a number) are evaluated for a block of terms at once, so the values are the library's to the bit
(tests/privacy/test_accountant.py checks them against it) in about a third of the time. The values of a
(sample rate, sigma) are kept for the process: a run builds its account twice (the plan and the
tracker), a relaunch once per attempt, and the domain formula needs them twice.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

#: prv-accountant's default RDP orders (`other_accountants.RDP`): its safe PRV domain and our RDP bracket
PRV_RDP_ORDERS = tuple(1.0 + x / 10.0 for x in range(1, 100)) + tuple(float(a) for a in range(12, 64))
#: terms of a fractional-order series evaluated together (most series end within 64 terms)
BLOCK = 64


@lru_cache(maxsize=1024)
def step_rdp(sample_rate: float, sigma: float, orders: tuple[float, ...] = PRV_RDP_ORDERS) -> np.ndarray:
    """The RDP of one step at each order (prv-accountant's `PoissonSubsampledGaussianMechanism.rdp`);
    read-only, shared by every caller in the process."""
    with np.errstate(all="ignore"):
        values = np.array([order_rdp(sample_rate, sigma, alpha) for alpha in np.array(orders)])
    values.setflags(write=False)
    return values


def rdp_bound(rdp: np.ndarray, steps: int, delta: float, orders: tuple[float, ...] = PRV_RDP_ORDERS) -> float:
    """The RDP accountant's epsilon after `steps` compositions: the best order's conversion
    (prv-accountant's `RDP.compute_epsilon`, the same arithmetic)."""
    alphas = np.array(orders)
    with np.errstate(all="ignore"):
        eps = rdp * steps - np.log(delta * alphas) / (alphas - 1) + np.log1p(- 1 / alphas)
    return float(eps[np.nanargmin(eps)])


def order_rdp(sample_rate: float, sigma: float, alpha):
    """RDP of order alpha: log A_alpha / (alpha - 1), with the library's special cases."""
    q, s = np.double(sample_rate), np.double(sigma)
    if q == 0:
        return 0
    if q == 1.:
        return alpha / (2 * np.longdouble(sigma)**2)
    if np.isinf(alpha):
        return np.inf
    log_a = _log_a_int(q, s, int(alpha)) if float(alpha).is_integer() else _log_a_frac(q, s, alpha)
    return log_a / (alpha - 1)


def _log_a_int(q: np.double, sigma: np.double, alpha: int) -> float:
    """log A_alpha for an integer order: the binomial sum, term i = 0..alpha in turn."""
    from scipy import special

    i = np.arange(alpha + 1)
    log_comb = (special.gammaln(alpha + 1) - special.gammaln(i + 1) - special.gammaln(alpha - i + 1)).tolist()
    variance_term = float(2 * (sigma**2))
    log_q, log_1mq = math.log(q), math.log(1 - q)
    log_a = -math.inf
    for k in range(alpha + 1):
        log_coef = log_comb[k] + k * log_q + (alpha - k) * log_1mq
        log_a = _log_add(log_a, log_coef + (k * k - k) / variance_term)
    return float(log_a)


def _log_a_frac(q: np.double, sigma: np.double, alpha: np.double) -> float:
    """log A_alpha for a fractional order: the two half-line integrals' series, term i = 0, 1, ...
    in turn until both terms fall below e^-30. (Python floats: the same IEEE operations as numpy's
    scalars, several times faster.)"""
    from scipy import special

    log_a0, log_a1 = -math.inf, -math.inf
    z0 = float(sigma**2 * math.log(1 / q - 1) + .5)
    variance_term, scale = float(2 * (sigma**2)), float(math.sqrt(2) * sigma)
    log_q, log_1mq, log_half, log_two = math.log(q), math.log(1 - q), math.log(.5), math.log(2)
    alpha = float(alpha)
    start = 0
    while True:
        i = np.arange(start, start + BLOCK)
        coefs = special.binom(alpha, i).tolist()
        log_ndtr0 = special.log_ndtr(-((i - z0) / scale) * 2**.5).tolist()
        log_ndtr1 = special.log_ndtr(-((z0 - (alpha - i)) / scale) * 2**.5).tolist()
        for k in range(BLOCK):
            n, coef = start + k, coefs[k]
            log_coef = math.log(abs(coef))
            j = alpha - n
            log_t0 = log_coef + n * log_q + j * log_1mq
            log_t1 = log_coef + j * log_q + n * log_1mq
            log_s0 = log_t0 + (n * n - n) / variance_term + (log_half + (log_two + log_ndtr0[k]))
            log_s1 = log_t1 + (j * j - j) / variance_term + (log_half + (log_two + log_ndtr1[k]))
            if coef > 0:
                log_a0, log_a1 = _log_add(log_a0, log_s0), _log_add(log_a1, log_s1)
            else:
                log_a0, log_a1 = _log_sub(log_a0, log_s0), _log_sub(log_a1, log_s1)
            if max(log_s0, log_s1) < -30:
                return _log_add(log_a0, log_a1)
        start += BLOCK


def _log_add(log_x: float, log_y: float) -> float:
    """log(e^x + e^y)."""
    a, b = min(log_x, log_y), max(log_x, log_y)
    if a == -math.inf:
        return b
    return math.log1p(math.exp(a - b)) + b


def _log_sub(log_x: float, log_y: float) -> float:
    """log(e^x - e^y), x >= y."""
    if log_x < log_y:
        raise ValueError("The result of subtraction must be non-negative.")
    if log_y == -math.inf:
        return log_x
    if log_x == log_y:
        return -math.inf
    try:
        return math.log(math.expm1(log_x - log_y)) + log_y
    except OverflowError:
        return log_x
