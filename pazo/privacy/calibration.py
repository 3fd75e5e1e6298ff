"""Calibration of the noise multiplier to a target (epsilon, delta): the smallest sigma whose
accountant's upper bound meets it. `calibrate` is the one entry (the accountant's choice -> sigma),
`calibrated` the same for an account already made; PRV's and Laplace noise's calibration keeps its
answers in the sigma cache;
dp-accounting's RDP and PLD are solved by dp-accounting's own (`dp_accounting_sigma`), its answer
confirmed once by the run's own account. Every search takes one checked `accountants.Account`,
made once where the question is asked (`Account.aiming`), and asks it a sigma's guarantee
(`Account.epsilon`), the same account a run's plan prints; the sigma cache is keyed by it too.

Gaussian: first brackets sigma with the cheap RDP bound, then solves on a coarse PRV grid and
confirms on the fine one, so that T = 100k steps takes seconds rather than a minute
(``scripts/benchmark_calibration.py``). Laplace: the pure-DP closed form (delta = 0) or a secant on
the exact composition. Results are kept on disk (`sigma_cache.py`).
"""
from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from pazo.privacy import accountants
from pazo.privacy.accountants import (PLD_MIN_SIGMA, SIGMA_MAX, Account, BudgetError, gaussian_epsilon, grid_fits,
                                      grid_refusal, quiet_rdp)
from pazo.privacy.rdp import PRV_RDP_ORDERS, rdp_bound, step_rdp
from pazo.privacy.sigma_cache import entry_path, read_cache, write_cache

# Opacus' orders stop at 63, which cannot certify epsilon below ~0.1: integer orders up to 16384
# extend the RDP bracket (used only when the default orders cannot reach the target, so other
# calibrations are unchanged)
WIDE_RDP_ORDERS = list(range(2, 64)) + [round(64 * 2 ** (k / 2)) for k in range(0, 17)]


def rdp_epsilon(sigma: float, sample_rate: float, steps: int, delta: float, orders=None) -> float:
    """RDP bound (Mironov 2017; prv-accountant's default orders unless `orders`) - an upper bound,
    used to bracket sigma."""
    orders = PRV_RDP_ORDERS if orders is None else tuple(float(a) for a in orders)
    return rdp_bound(step_rdp(sample_rate, sigma, orders), steps, delta, orders)


def rdp_epsilon_integer_orders(sigma: float, sample_rate: float, steps: int, delta: float,
                                orders=WIDE_RDP_ORDERS) -> float:
    """The same RDP bound for integer orders only (Mironov et al. 2019's finite sum, as in
    prv-accountant/TF Privacy), vectorised: high orders cost one numpy call, not a Python loop."""
    from scipy.special import gammaln, logsumexp

    q, best = sample_rate, math.inf
    for alpha in orders:
        i = np.arange(alpha + 1)
        log_terms = (gammaln(alpha + 1) - gammaln(i + 1) - gammaln(alpha - i + 1) + i * math.log(q)
                     + (alpha - i) * math.log1p(-q) + (i * i - i) / (2 * sigma ** 2))
        rdp = steps * float(logsumexp(log_terms)) / (alpha - 1)
        best = min(best, rdp - math.log(delta * alpha) / (alpha - 1) + math.log1p(-1 / alpha))
    return best


def pure_laplace_sigma(epsilon: float, sample_rate: float, steps: int) -> float:
    per_step = math.expm1(epsilon / steps) / sample_rate
    if not 0 < per_step < math.inf:
        raise BudgetError(f"epsilon={epsilon} is out of reach for {steps} steps")
    return (1.0 / math.log1p(per_step)) * (1 + 1e-9)  # round up: the bound must hold exactly


def laplace_sigma_for_pure_epsilon(epsilon: float, sample_rate: float, steps: int) -> float:
    """Invert `laplace_pure_epsilon` exactly."""
    sigma = pure_laplace_sigma(epsilon, sample_rate, steps)
    if sigma > SIGMA_MAX:
        raise BudgetError(f"epsilon={epsilon} is out of reach: the Laplace scale would exceed "
                          f"{SIGMA_MAX:g} (sample rate {sample_rate:.4g}, {steps} steps)")
    return sigma


def _rdp_sigma(account: Account, orders=None) -> float:
    """Smallest sigma (to 0.1%) whose RDP bound meets the account's target: an upper end for the PRV sigma.

    With Opacus' orders first (what every ordinary calibration has used); only if they cannot
    reach the target below SIGMA_MAX (epsilon below ~0.1) again with orders up to 16384."""
    epsilon, sample_rate, steps, delta = account.target, account.sample_rate, account.steps, account.delta

    def rdp(s: float) -> float:
        if orders is None:
            return rdp_epsilon(s, sample_rate, steps, delta)
        return rdp_epsilon_integer_orders(s, sample_rate, steps, delta, orders)

    lo, hi = 0.1, 1.0
    if rdp(hi) <= epsilon:
        while rdp(lo) <= epsilon:  # a large target on a short run: the answer is below 0.1
            lo, hi = lo / 2, lo
            if lo < 1e-4:
                raise BudgetError(f"epsilon={epsilon} is out of reach: the RDP bound meets it with "
                                  f"sigma below {hi:g}, too little noise to account")
    while rdp(hi) > epsilon:
        lo, hi = hi, hi * 2
        if hi > SIGMA_MAX:
            if orders is None:
                return _rdp_sigma(account, orders=WIDE_RDP_ORDERS)
            raise BudgetError(
                f"epsilon={epsilon} is out of reach: it needs a noise multiplier above {SIGMA_MAX:g} "
                f"(sample rate {sample_rate:.4g}, {steps} steps, delta {delta:.3g}). Use a larger "
                "epsilon, fewer steps or a smaller batch.")
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if rdp(mid) > epsilon else (lo, mid)
    return hi


def _solve_log_secant(f, lo: float, hi: float, tol: float, max_iter: int = 30) -> float:
    """Root of a decreasing f on [lo, hi] (f(lo) > 0 >= f(hi)), regula falsi in log sigma.

    Illinois variant so that a convex f does not stall one end; returns a point with f <= 0.
    """
    a, b = math.log(lo), math.log(hi)
    fa, fb = f(lo), f(hi)
    side = 0
    for _ in range(max_iter):
        if b - a < tol:
            break
        c = b - fb * (b - a) / (fb - fa)
        c = min(max(c, a + 0.05 * (b - a)), b - 0.05 * (b - a))
        fc = f(math.exp(c))
        if fc > 0:
            a, fa = c, fc
            if side == -1:
                fb /= 2
            side = -1
        else:
            b, fb = c, fc
            if side == 1:
                fa /= 2
            side = 1
    return math.exp(b)


def _prv_solve(prv_upper, epsilon: float, eps_error: float, hi: float, lo_ratio: float) -> float:
    """Smallest sigma in (0, hi] with prv_upper(sigma, eps_error) <= epsilon, given that `hi`
    satisfies it (by a looser bound) and the answer is probably above lo_ratio * hi."""
    # Coarse stage: a cheap grid locates the root of the fine upper bound (estimate + eps_error),
    # aiming 0.1% below the target so that the single fine confirmation nearly always passes.
    coarse = max(eps_error, min(10 * eps_error, epsilon / 5))
    aim = epsilon - eps_error - 0.001 * epsilon
    memo: dict[float, float] = {}

    def coarse_gap(s: float) -> float:
        if s not in memo:
            memo[s] = prv_upper(s, coarse) - coarse - aim
        return memo[s]

    lo = lo_ratio * hi
    while coarse_gap(lo) <= 0 and lo > 1e-3:
        lo /= 2
    sigma = hi if coarse_gap(hi) > 0 else _solve_log_secant(coarse_gap, lo, hi, tol=1e-3, max_iter=8)
    # Fine stage: confirm the guarantee; nudge sigma up in the rare case it does not hold yet
    # (past `hi` too: the PRV upper bound, estimate + eps_error, can exceed a nearly tight RDP one).
    upper = prv_upper(sigma, eps_error)
    while upper > epsilon:
        if sigma >= SIGMA_MAX:
            raise BudgetError(f"epsilon={epsilon} is out of reach: it needs a noise multiplier above "
                              f"{SIGMA_MAX:g}")
        nudged = sigma * (1 + (upper - epsilon) / epsilon + 0.0005)
        sigma = min(hi, nudged) if sigma < hi else nudged
        upper = prv_upper(sigma, eps_error)
    slack = (epsilon - upper) / epsilon
    if slack > 0.003:  # the coarse grid was off: one fine step closer
        candidate = sigma * (1 - 0.9 * slack)  # epsilon is locally about proportional to 1/sigma
        if prv_upper(candidate, eps_error) <= epsilon:
            sigma = candidate
    return sigma


def _calibrate_gaussian(account: Account) -> float:
    epsilon, delta, steps, mechanisms = account.target, account.delta, account.steps, account.mechanisms
    sample_rate, eps_error = account.sample_rate, account.eps_error
    if sample_rate >= 1:
        def gap(s):
            return gaussian_epsilon(math.sqrt(steps) * math.sqrt(mechanisms) / s, delta) - epsilon
        lo, hi = 1e-3, 1.0
        while gap(hi) > 0:
            lo, hi = hi, hi * 2
            if hi > SIGMA_MAX * math.sqrt(mechanisms):
                raise BudgetError(f"epsilon={epsilon} is out of reach for {steps} full-batch steps.")
        return _solve_log_secant(gap, lo, hi, tol=1e-5)

    # the PRV sigma lies within 0.8-1x of the RDP one (REFERENCE.md)
    hi = _rdp_sigma(account)
    # the fine grid grows as sigma falls: refuse now, not after the coarse stage, if even hi's is too big
    points = account.grid(hi)[1]
    if not grid_fits(points):
        points = max(points, account.grid(0.75 * hi)[1])
        raise grid_refusal(f"epsilon={epsilon:g} with sample rate {sample_rate:.4g}, {steps} steps and "
                            f"eps_error {eps_error:g}", points, eps_error, steps, "a larger epsilon")

    # Work with the effective multiplier; the per-release sigma is sqrt(m) times larger.
    return _prv_solve(account.effective().epsilon, epsilon, eps_error, hi, lo_ratio=0.75) * math.sqrt(mechanisms)


def _calibrate_laplace(account: Account) -> float:
    epsilon, delta, sample_rate, steps = account.target, account.delta, account.sample_rate, account.steps
    if delta == 0:
        return laplace_sigma_for_pure_epsilon(epsilon, sample_rate, steps)
    pure = pure_laplace_sigma(epsilon, sample_rate, steps)  # may exceed SIGMA_MAX on long runs

    def gap(sigma: float) -> float:
        return account.epsilon(sigma) - epsilon

    # pure epsilon-DP implies (epsilon, delta)-DP, so the pure-DP sigma is an upper end; the exact
    # account is continuous and decreasing in sigma, so the secant lands within 1e-6 of the root
    lo, hi = pure / 2, pure
    while gap(lo) <= 0:
        lo, hi = lo / 2, lo
    sigma = _solve_log_secant(gap, lo, hi, tol=1e-6, max_iter=100)
    if sigma > SIGMA_MAX:
        raise BudgetError(f"epsilon={epsilon} is out of reach: the Laplace scale would exceed "
                          f"{SIGMA_MAX:g} (sample rate {sample_rate:.4g}, {steps} steps)")
    return sigma


def _calibrate_uncached(account: Account) -> float:
    """The account's sigma, solved (no cache): Laplace noise's or the Gaussian PRV one."""
    if account.mechanism == "laplace":
        return _calibrate_laplace(account)
    return _calibrate_gaussian(account)


def dp_accounting_sigma(account: Account) -> float:
    """The smallest effective noise multiplier (to about 0.2%) whose epsilon by dp-accounting's
    accountant (the account's rdp or pld) is at most its target: dp-accounting's own calibration, on
    the grid its accounts use (`PLD_INTERVAL`), confirmed once by the run's own account (the inputs
    checked where the account was made, `Account.aiming`)."""
    from dp_accounting import mechanism_calibration as calibration

    epsilon, delta, effective = account.target, account.delta, account.effective()
    try:
        sigma = _dp_accounting_search(account)
        # dp-accounting solves with its own accountant objects, to a tolerance: raised by 0.1% at a
        # time until its epsilon as the run accounts it (`Account.epsilon`, the run's guarantee) meets the target
        while effective.epsilon(sigma) > epsilon:
            sigma *= 1.001
        return sigma
    except (ValueError, RuntimeError, calibration.NoBracketIntervalFoundError) as err:   # none found
        raise BudgetError(f"no noise multiplier meets epsilon {epsilon:g} at delta {delta:g} ({err})") from None


def _dp_accounting_search(account: Account) -> float:
    """dp-accounting's `calibrate_dp_mechanism` with its RDP accountant, then (pld) with its PLD one in
    a bracket below RDP's answer; a ValueError where no sigma is found."""
    from dp_accounting import mechanism_calibration as calibration
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    event, epsilon, delta = account.dp_event, account.target, account.delta
    with quiet_rdp():
        rdp = calibration.calibrate_dp_mechanism(RdpAccountant, event, epsilon, delta,
                                                 bracket_interval=calibration.LowerEndpointAndGuess(1e-2, 1.0),
                                                 tol=1e-4)
    if account.accountant == "rdp":
        return float(rdp)
    # RDP's sigma meets the target by PLD too (RDP bounds it from above); PLD's is rarely under
    # 0.7 of it, and a bracket that misses is widened down to half (each PLD account costs seconds)
    # (the grid read at the call, as the accounts read it)
    pld = lambda: PLDAccountant(value_discretization_interval=accountants.PLD_INTERVAL)  # noqa: E731
    for low in (0.7, 0.5):
        bracket = calibration.ExplicitBracketInterval(max(rdp * low, PLD_MIN_SIGMA), rdp * 1.001)
        with contextlib.suppress(ValueError):
            return float(calibration.calibrate_dp_mechanism(pld, event, epsilon, delta,
                                                            bracket_interval=bracket, tol=1e-3 * rdp))
    raise ValueError(f"no sigma in [{max(rdp / 2, PLD_MIN_SIGMA):.4g}, {rdp:.4g}]")


def calibrate(accountant: str, epsilon: float, delta: float, sample_rate: float, steps: int,
              eps_error: float | None = None, mechanisms: int = 1, cache_dir=None, noise: str = "gaussian") -> float:
    """The smallest noise multiplier whose epsilon by `accountant` meets the target, for a run, a sweep's
    private selection and `pazo-privacy sigma` alike (`calibrated`): PRV's (and Laplace noise's) through the
    sigma cache; dp-accounting's RDP or PLD by its own (effective multiplier, times sqrt(mechanisms))."""
    return calibrated(Account.aiming(epsilon, delta, sample_rate, steps, eps_error, mechanisms, noise, accountant),
                      cache_dir)


def calibrated(account: Account, cache_dir: str | os.PathLike | None = None) -> float:
    """The sigma that meets a checked account's target (`calibrate`, `calibrate_sigma`): dp-accounting's
    RDP or PLD by its own search, PRV's and Laplace noise's from the sigma cache in `cache_dir` where an
    entry there is confirmed by the account (`sigma_cache.read_cache`), solved and kept there otherwise."""
    if account.mechanism == "gaussian" and account.accountant != "prv":
        return dp_accounting_sigma(account) * math.sqrt(account.mechanisms)
    path = entry_path(cache_dir, account) if cache_dir else None
    if path is not None:
        cached = read_cache(path, account)
        if cached is not None:
            return cached
    sigma = _calibrate_uncached(account)
    if path is not None:
        write_cache(path, account, sigma)
    return sigma


def calibrate_sigma(epsilon: float, delta: float, sample_rate: float, steps: int,
                    eps_error: float | None = None, mechanisms: int = 1,
                    cache_dir: str | os.PathLike | None = None, mechanism: str = "gaussian") -> float:
    """Smallest noise multiplier (to ~0.2%) whose upper bound on epsilon is <= the target.

    Gaussian: PRV upper bound. Laplace (noise scale sigma * sensitivity): with delta = 0 the pure
    epsilon-DP closed form; with delta > 0 the exact composition of the amplified pure-DP steps.
    Results are cached on disk (one small JSON file per input, written atomically, so parallel
    sweep jobs can share the cache); an entry is used only if it parses, its inputs equal the
    request, and its sigma is a finite positive number that still meets the target by the run's
    own accountant (one evaluation, the cost of the run's final epsilon).
    """
    return calibrated(Account.aiming(epsilon, delta, sample_rate, steps, eps_error, mechanisms, mechanism),
                      cache_dir)
