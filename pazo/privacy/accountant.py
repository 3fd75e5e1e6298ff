"""Privacy accounting for Poisson-subsampled Gaussian steps: epsilon spent and sigma calibration.

One training step of every Gaussian method is ``mechanisms`` independent Gaussian releases, each
with noise multiplier ``sigma`` on a sum of sensitivity-1 (after scaling) values of one Poisson
batch.  Splitting the noise over several queries of the same batch (noise ``sqrt(queries)*C*sigma``
each) is already one Gaussian mechanism with multiplier ``sigma``, so queries never reach this
module; independent mechanisms (GEP's embedding and residual) compose to one Gaussian with
multiplier ``sigma / sqrt(mechanisms)``.

The guarantee is the upper bound of prv-accountant (Gopi et al. 2021).  Calibration first brackets
sigma with the cheap RDP bound, then solves on a coarse PRV grid and confirms on the fine one, so
that T = 100k steps takes seconds rather than a minute (``scripts/benchmark_calibration.py``).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant, PureDPMechanism
from prv_accountant.other_accountants import RDP
from scipy.stats import norm

SIGMA_MAX = 1e4  # beyond this the budget is impossible in practice (noise swamps any signal)


class BudgetError(ValueError):
    """The requested (epsilon, delta) cannot be met for this sampling rate and number of steps."""


def default_eps_error(epsilon: float) -> float:
    """Accuracy of the PRV upper bound: 1% of epsilon, at most 0.01 (REFERENCE.md)."""
    return min(0.01, epsilon / 100.0)


def effective_noise_multiplier(sigma: float, mechanisms: int = 1) -> float:
    """`mechanisms` independent Gaussian releases with multiplier sigma = one with sigma/sqrt(m)."""
    return sigma / math.sqrt(mechanisms)


def _gaussian_delta(epsilon: float, mu: float) -> float:
    """Exact delta(epsilon) of a Gaussian mechanism with mu = sensitivity / std (Balle & Wang 2018)."""
    second = math.exp(min(epsilon + norm.logcdf(-epsilon / mu - mu / 2), 700.0))
    return float(norm.cdf(-epsilon / mu + mu / 2) - second)


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """Invert `_gaussian_delta` by bisection (monotone in epsilon)."""
    if _gaussian_delta(0.0, mu) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while _gaussian_delta(hi, mu) > delta:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _gaussian_delta(mid, mu) > delta else (lo, mid)
    return hi


def rdp_epsilon(sigma: float, sample_rate: float, steps: int, delta: float) -> float:
    """RDP bound (Mironov 2017; Opacus' default orders) - an upper bound, used to bracket sigma."""
    prv = PoissonSubsampledGaussianMechanism(sampling_probability=sample_rate, noise_multiplier=sigma)
    return float(RDP(prvs=[prv]).compute_epsilon(delta=delta, num_self_compositions=[steps])[2])


@dataclass(frozen=True)
class EpsilonBounds:
    lower: float
    estimate: float
    upper: float  # the guarantee


class GaussianAccountant:
    """Epsilon spent after t of `steps` Poisson-subsampled Gaussian steps (PRV, or exact when q = 1)."""

    def __init__(self, sigma: float, sample_rate: float, steps: int, delta: float,
                 eps_error: float = 0.01, mechanisms: int = 1):
        if not 0 < sample_rate <= 1:
            raise BudgetError(f"sample rate must be in (0, 1], got {sample_rate}")
        self.sigma, self.sample_rate, self.steps, self.delta = sigma, sample_rate, steps, delta
        self.eps_error, self.mechanisms = eps_error, mechanisms
        self.multiplier = effective_noise_multiplier(sigma, mechanisms)
        self._prv = None
        if sample_rate < 1:
            mechanism = PoissonSubsampledGaussianMechanism(
                sampling_probability=sample_rate, noise_multiplier=self.multiplier)
            self._prv = PRVAccountant(prvs=[mechanism], eps_error=eps_error,
                                      delta_error=delta / 1000, max_self_compositions=[steps])

    def epsilon(self, steps_done: int) -> EpsilonBounds:
        if steps_done <= 0:
            return EpsilonBounds(0.0, 0.0, 0.0)
        if self._prv is None:  # full batch: T Gaussians = one Gaussian with mu = sqrt(T)/sigma
            eps = _gaussian_epsilon(math.sqrt(steps_done) / self.multiplier, self.delta)
            return EpsilonBounds(eps, eps, eps)
        lo, est, up = self._prv.compute_epsilon(delta=self.delta, num_self_compositions=[steps_done])
        return EpsilonBounds(max(float(lo), 0.0), max(float(est), 0.0), max(float(up), 0.0))


def amplified_pure_epsilon(sigma: float, sample_rate: float) -> float:
    """One Poisson-subsampled step of a (1/sigma)-DP mechanism: log(1 + q (e^(1/sigma) - 1))."""
    return math.log1p(sample_rate * math.expm1(1.0 / sigma))


def laplace_pure_epsilon(sigma: float, sample_rate: float, steps: int) -> float:
    """DP-ZO's closed form (Tang et al. 2024, Theorem 3.1): T log(1 + q (e^(1/sigma) - 1))."""
    return steps * amplified_pure_epsilon(sigma, sample_rate)


def laplace_sigma_for_pure_epsilon(epsilon: float, sample_rate: float, steps: int) -> float:
    """Invert `laplace_pure_epsilon` exactly."""
    per_step = math.expm1(epsilon / steps) / sample_rate
    if per_step <= 0:
        raise BudgetError(f"epsilon={epsilon} is out of reach for {steps} steps")
    sigma = (1.0 / math.log1p(per_step)) * (1 + 1e-9)  # round up: the bound must hold exactly
    if sigma > SIGMA_MAX:
        raise BudgetError(f"epsilon={epsilon} is out of reach: the Laplace scale would exceed "
                          f"{SIGMA_MAX:g} (sample rate {sample_rate:.4g}, {steps} steps)")
    return sigma


class LaplaceAccountant:
    """Laplace noise of scale sigma * sensitivity on each step of Poisson-subsampled sums.

    delta = 0: pure epsilon-DP by basic composition of the amplified steps (closed form).
    delta > 0: (epsilon, delta) by prv-accountant's composition of the pure-DP steps, which is
    never larger than the pure bound.
    """

    def __init__(self, sigma: float, sample_rate: float, steps: int, delta: float,
                 eps_error: float = 0.01):
        self.sigma, self.sample_rate, self.steps, self.delta = sigma, sample_rate, steps, delta
        self.eps_error = eps_error
        self.step_epsilon = amplified_pure_epsilon(sigma, sample_rate)
        self._prv = None
        if delta > 0:
            self._prv = PRVAccountant(prvs=[PureDPMechanism(eps=self.step_epsilon)], eps_error=eps_error,
                                      delta_error=delta / 1000, max_self_compositions=[steps])

    def pure_epsilon(self, steps_done: int) -> float:
        return steps_done * self.step_epsilon

    def epsilon(self, steps_done: int) -> EpsilonBounds:
        pure = self.pure_epsilon(steps_done)
        if self._prv is None or steps_done <= 0:
            return EpsilonBounds(pure, pure, pure)
        lo, est, up = self._prv.compute_epsilon(delta=self.delta, num_self_compositions=[steps_done])
        # the pure bound holds whatever delta: never report more than it
        return EpsilonBounds(max(min(float(lo), pure), 0.0), max(min(float(est), pure), 0.0),
                             max(min(float(up), pure), 0.0))


def _rdp_sigma(epsilon: float, sample_rate: float, steps: int, delta: float) -> float:
    """Smallest sigma (to 0.1%) whose RDP bound meets epsilon: an upper end for the PRV sigma."""
    lo, hi = 0.1, 1.0
    while rdp_epsilon(hi, sample_rate, steps, delta) > epsilon:
        lo, hi = hi, hi * 2
        if hi > SIGMA_MAX:
            raise BudgetError(
                f"epsilon={epsilon} is out of reach: it needs a noise multiplier above {SIGMA_MAX:g} "
                f"(sample rate {sample_rate:.4g}, {steps} steps, delta {delta:.3g}). Use a larger "
                "epsilon, fewer steps or a smaller batch.")
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if rdp_epsilon(mid, sample_rate, steps, delta) > epsilon else (lo, mid)
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
    # Fine stage: confirm the guarantee; nudge sigma up in the rare case it does not hold yet.
    upper = prv_upper(sigma, eps_error)
    while upper > epsilon and sigma < hi:
        sigma = min(hi, sigma * (1 + (upper - epsilon) / epsilon + 0.0005))
        upper = prv_upper(sigma, eps_error)
    slack = (epsilon - upper) / epsilon
    if upper <= epsilon and slack > 0.003:  # the coarse grid was off: one fine step closer
        candidate = sigma * (1 - 0.9 * slack)  # epsilon is locally about proportional to 1/sigma
        if prv_upper(candidate, eps_error) <= epsilon:
            sigma = candidate
    return sigma


def _calibrate_gaussian(epsilon: float, delta: float, sample_rate: float, steps: int,
                        eps_error: float, mechanisms: int) -> float:
    if sample_rate >= 1:
        def gap(s):
            return _gaussian_epsilon(math.sqrt(steps) * math.sqrt(mechanisms) / s, delta) - epsilon
        lo, hi = 1e-3, 1.0
        while gap(hi) > 0:
            lo, hi = hi, hi * 2
            if hi > SIGMA_MAX * math.sqrt(mechanisms):
                raise BudgetError(f"epsilon={epsilon} is out of reach for {steps} full-batch steps.")
        return _solve_log_secant(gap, lo, hi, tol=1e-5)

    # Work with the effective multiplier; the per-release sigma is sqrt(m) times larger.
    def prv_upper(sigma_eff: float, error: float) -> float:
        return GaussianAccountant(sigma_eff, sample_rate, steps, delta, eps_error=error).epsilon(steps).upper

    # the PRV sigma lies within 0.8-1x of the RDP one (REFERENCE.md)
    hi = _rdp_sigma(epsilon, sample_rate, steps, delta)
    return _prv_solve(prv_upper, epsilon, eps_error, hi, lo_ratio=0.75) * math.sqrt(mechanisms)


def _calibrate_laplace(epsilon: float, delta: float, sample_rate: float, steps: int,
                       eps_error: float) -> float:
    pure = laplace_sigma_for_pure_epsilon(epsilon, sample_rate, steps)
    if delta == 0:
        return pure

    def prv_upper(sigma: float, error: float) -> float:
        return LaplaceAccountant(sigma, sample_rate, steps, delta, eps_error=error).epsilon(steps).upper

    # pure epsilon-DP implies (epsilon, delta)-DP, so the pure-DP sigma is an upper end
    return _prv_solve(prv_upper, epsilon, eps_error, pure, lo_ratio=0.1)


def _calibrate_uncached(epsilon: float, delta: float, sample_rate: float, steps: int,
                        eps_error: float, mechanisms: int, mechanism: str = "gaussian") -> float:
    if mechanism == "laplace":
        return _calibrate_laplace(epsilon, delta, sample_rate, steps, eps_error)
    return _calibrate_gaussian(epsilon, delta, sample_rate, steps, eps_error, mechanisms)


def _cache_path(cache_dir: str | os.PathLike, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return Path(os.path.expanduser(str(cache_dir))) / "sigma" / f"{digest}.json"


def calibrate_sigma(epsilon: float, delta: float, sample_rate: float, steps: int,
                    eps_error: float | None = None, mechanisms: int = 1,
                    cache_dir: str | os.PathLike | None = None, mechanism: str = "gaussian") -> float:
    """Smallest noise multiplier (to ~0.2%) whose upper bound on epsilon is <= the target.

    Gaussian: PRV upper bound. Laplace (noise scale sigma * sensitivity): with delta = 0 the pure
    epsilon-DP closed form; with delta > 0 the PRV account of the amplified pure-DP steps.
    Results are cached on disk (one small JSON file per input, written atomically, so parallel
    sweep jobs can share the cache).
    """
    if not epsilon > 0:
        raise BudgetError(f"epsilon must be > 0, got {epsilon}")
    if mechanism not in ("gaussian", "laplace"):
        raise BudgetError(f"unknown noise mechanism {mechanism!r}; choices: gaussian, laplace")
    if not (0 < delta < 1 or (delta == 0 and mechanism == "laplace")):
        raise BudgetError(f"delta must be in (0, 1) (0 only for pure DP with Laplace noise), got {delta}")
    if steps < 1:
        raise BudgetError(f"number of steps must be >= 1, got {steps}")
    eps_error = eps_error or default_eps_error(epsilon)
    key = {"epsilon": epsilon, "delta": delta, "sample_rate": sample_rate, "steps": steps,
           "eps_error": eps_error, "mechanisms": mechanisms, "mechanism": mechanism,
           "prv_accountant": version("prv-accountant"), "algorithm": 2}
    path = _cache_path(cache_dir, key) if cache_dir else None
    if path is not None and path.exists():
        try:
            return float(json.loads(path.read_text())["sigma"])
        except (ValueError, KeyError):
            pass  # a damaged entry is recomputed and overwritten
    sigma = _calibrate_uncached(epsilon, delta, sample_rate, steps, eps_error, mechanisms, mechanism)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
            json.dump({**key, "sigma": sigma}, tmp)
        os.replace(tmp.name, path)
    return sigma
