"""Privacy accountants for Poisson-subsampled Gaussian and Laplace steps: the epsilon a run's noise
spends by each accountant a run may choose (PRV, dp-accounting's RDP or PLD, Laplace's exact one),
chosen in `accountant_for`, and the limits every input is checked against (`BudgetError`). The
inverse, sigma for a target, is in `calibration.py`, its disk cache in `sigma_cache.py`: its searches
ask one checked `Account` (made once, `Account.aiming`) what a sigma spends, and build no accountant
themselves.

One training step of every Gaussian method is ``mechanisms`` independent Gaussian releases, each
with noise multiplier ``sigma`` on a sum of sensitivity-1 (after scaling) values of one Poisson
batch.  Splitting the noise over several queries of the same batch (noise ``sqrt(queries)*C*sigma``
each) is already one Gaussian mechanism with multiplier ``sigma``, so queries never reach this
module; independent mechanisms (GEP's embedding and residual) compose to one Gaussian with
multiplier ``sigma / sqrt(mechanisms)``.

The Gaussian guarantee is the upper bound of prv-accountant (Gopi et al. 2021).  The Laplace
(epsilon, delta) guarantee is the exact optimal composition of the amplified pure-DP steps (no
grid).

Supported inputs (everything else is refused with a `BudgetError` before any large computation):

- target epsilon in [EPSILON_MIN, EPSILON_MAX] = [0.001, 50]. Above 50 the guarantee (likelihood
  ratios up to e^50 ~ 5e21) bounds nothing, and the PRV domain grows with epsilon. Below 0.001 the
  noise needed is thousands of times the clipping bound for any useful run, and the default PRV
  accuracy (epsilon / 100) needs a grid far beyond the memory limit.
- a PRV grid of at most PRV_GRID_MAX = 4e6 points (measured peak: 180-360 bytes a point, so at most
  ~1.5 GB). The size is known before the grid is built (prv-accountant's own formula, RDP only):
  2 L sqrt(T/2 log(12000/delta)) / eps_error, L from the RDP bound. It bounds T, small eps_error and
  small sigma together; a too-small given sigma is refused by an exact one-step bound instead.
- sigma at most SIGMA_MAX = 1e4 when calibrating (noise beyond it swamps any signal).
- delta at least DELTA_MIN = 1e-10 (or 0 for pure DP with Laplace noise): prv-accountant refuses a
  delta below its floating-point error, ~1e-19 times the grid's points.
"""
from __future__ import annotations

import contextlib
import logging
import math
import numbers
import threading
import warnings
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from pazo.privacy.rdp import rdp_bound, step_rdp

if TYPE_CHECKING:
    from prv_accountant.discrete_privacy_random_variable import DiscretePrivacyRandomVariable

# prv-accountant and scipy (1.3 s of imports, most of a command's start-up besides torch) are
# imported where an account is computed, so that `--help` and a refused input answer without them

SIGMA_MAX = 1e4  # beyond this the budget is impossible in practice (noise swamps any signal)
EPSILON_MIN, EPSILON_MAX = 1e-3, 50.0  # supported targets (module docstring)
DELTA_MIN = 1e-10  # a PRV grid of PRV_GRID_MAX points has a float error of ~4e-13 in delta
PRV_GRID_MAX = 4_000_000  # points of one PRV grid; peak memory measured at 180-360 bytes a point
PURE_DP_WINDOW_MAX = 2_000_000  # binomial terms of the exact Laplace account (T up to ~2e9)
MECHANISMS = ("gaussian", "laplace")
#: privacy.accountant's choices: pazo's PRV, dp-accounting's PLD and RDP
ACCOUNTANTS = ("prv", "pld", "rdp")
#: the accountants dp-accounting computes (`DpAccountingAccountant`)
DP_ACCOUNTING = ("pld", "rdp")
#: the most steps a plan considers (the PRV grid of more would not fit in memory; pazo's runs refuse them too)
MAX_STEPS = 10_000_000
#: dp-accounting's PLD grid step on the privacy loss: 1e-4 keeps its pessimistic bound within about 1e-3
PLD_INTERVAL = 1e-4
#: the smallest sigma PLD is asked about: one step's privacy loss spans about 1/sigma^2, so its grid
#: holds about 1/(sigma^2 * PLD_INTERVAL) points (4 million at 0.05; 1e-3 would ask for 38 GiB)
PLD_MIN_SIGMA = 0.05


class BudgetError(ValueError):
    """The requested (epsilon, delta) cannot be met for this sampling rate and number of steps."""


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def check_delta(delta, mechanism: str = "gaussian", name: str = "delta", error=BudgetError) -> float:
    """The one delta rule (config validation, plan, calibration): delta in (0, 1), or delta = 0 for
    pure epsilon-DP with Laplace noise. Raises `error` (e.g. validate's ConfigError) otherwise."""
    if not (_is_real(delta) and (0 < delta < 1 or (delta == 0 and mechanism == "laplace"))):
        raise error(f"{name} must be in (0, 1) (0 only for pure DP with Laplace noise), got {delta!r}")
    if 0 < delta < DELTA_MIN:
        raise error(f"{name}={delta:g} is out of reach: pazo accounts delta >= {DELTA_MIN:g} (below, the PRV "
                    "accountant's floating-point error exceeds delta itself)")
    return float(delta)


def check_target_epsilon(epsilon, name: str = "epsilon") -> float:
    """Targets outside [EPSILON_MIN, EPSILON_MAX] are refused before any account (module docstring)."""
    if not (_is_real(epsilon) and epsilon > 0):
        raise BudgetError(f"{name} must be > 0, got {epsilon!r}")
    if not EPSILON_MIN <= epsilon <= EPSILON_MAX:
        raise BudgetError(
            f"{name}={epsilon:g} is out of reach: pazo accounts target epsilons in [{EPSILON_MIN:g}, "
            f"{EPSILON_MAX:g}] (below, the noise swamps any signal and the account needs more memory "
            "than allowed; above, e^epsilon is so large that the guarantee bounds nothing)")
    return float(epsilon)


def check_run(sigma, sample_rate, steps, mechanisms: int = 1) -> None:
    """Inputs every accountant needs; sigma=None skips the sigma check (calibration)."""
    if sigma is not None and not (_is_real(sigma) and math.isfinite(sigma) and sigma > 0):
        raise BudgetError(f"sigma must be a finite positive number, got {sigma!r}")
    if not (_is_real(sample_rate) and 0 < sample_rate <= 1):
        raise BudgetError(f"sample rate must be in (0, 1], got {sample_rate!r}")
    if not (_is_real(steps) and math.isfinite(steps) and steps == int(steps) and steps >= 1):
        raise BudgetError(f"number of steps must be an integer >= 1, got {steps!r}")
    if not (_is_real(mechanisms) and math.isfinite(mechanisms) and mechanisms == int(mechanisms)
            and mechanisms >= 1):
        raise BudgetError(f"mechanisms must be an integer >= 1, got {mechanisms!r}")


def default_eps_error(epsilon: float) -> float:
    """Accuracy of the PRV upper bound: 1% of epsilon, at most 0.01 (REFERENCE.md)."""
    return min(0.01, epsilon / 100.0)


def effective_noise_multiplier(sigma: float, mechanisms: int = 1) -> float:
    """`mechanisms` independent Gaussian releases with multiplier sigma = one with sigma/sqrt(m)."""
    return sigma / math.sqrt(mechanisms)


def _gaussian_delta(epsilon: float, mu: float) -> float:
    """Exact delta(epsilon) of a Gaussian mechanism with mu = sensitivity / std (Balle & Wang 2018)."""
    from scipy.stats import norm

    second = math.exp(min(epsilon + norm.logcdf(-epsilon / mu - mu / 2), 700.0))
    return float(norm.cdf(-epsilon / mu + mu / 2) - second)


def gaussian_epsilon(mu: float, delta: float) -> float:
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


def safe_domain_half_width(sigma_eff: float, sample_rate: float, steps: int, eps_error: float,
                           delta_error: float) -> float:
    """prv-accountant's safe domain for T self-compositions of one step (`compute_safe_domain_size`,
    Gopi et al. 2021, remark 5.6: the RDP bounds of the whole run at delta_error / 4 and of one step
    at delta_error / 8T), to the bit, from the step's RDP values computed once (`step_rdp`)."""
    rdp = step_rdp(sample_rate, sigma_eff)
    whole_run = rdp_bound(rdp, steps, delta_error / 4)
    one_step = rdp_bound(rdp, 1, delta_error / 8 / steps)
    return max(max(whole_run, one_step), eps_error) + 3


def prv_grid(sigma_eff: float, sample_rate: float, steps: int, delta: float,
             eps_error: float) -> tuple[float, float]:
    """(L, points) of the grid prv-accountant would build for this account, without building it:
    its own domain formula (RDP values only), so the size is known before any memory is spent."""
    half_width = safe_domain_half_width(sigma_eff, sample_rate, steps, eps_error, delta / 1000)
    mesh = eps_error / math.sqrt(steps / 2 * math.log(12 / (delta / 1000)))
    return half_width, 2 * half_width / mesh


def grid_fits(points: float) -> bool:
    """Whether a PRV grid of `points` points fits in memory (PRV_GRID_MAX; an unbounded one does not)."""
    return points <= PRV_GRID_MAX


def eps_error_to_fit(eps_error: float, points: float) -> float:
    """The PRV accuracy whose grid fits, from the `points` of the grid at `eps_error`: a grid's
    points go as 1 / eps_error, and 5% more leaves room to spare."""
    return eps_error * points / PRV_GRID_MAX * 1.05


def _integer_power(base: np.ndarray, exponent: int) -> np.ndarray:
    """base ** exponent (elementwise, exponent >= 1) by repeated squaring."""
    result, square = None, base
    while True:
        if exponent & 1:
            result = square.copy() if result is None else np.multiply(result, square, out=result)
        exponent >>= 1
        if not exponent:
            return result
        square = square * square


def fast_fft_half_width(half_width: float, steps: int, delta: float, eps_error: float) -> float:
    """A half width >= `half_width` for which prv-accountant's aligned domain (2 ceil(L/mesh) + 2
    points) has a length whose FFT is fast (only factors 2, 3, 5): an FFT of a length with a large
    prime factor is 5-20x slower, and the account is one inverse FFT per evaluation."""
    from scipy.fft import next_fast_len

    mesh = eps_error / math.sqrt(steps / 2 * math.log(12 / (delta / 1000)))
    points = 2 * math.ceil(half_width / mesh) + 2
    fast = next_fast_len(points, real=True)
    while fast % 2:
        fast = next_fast_len(fast + 1, real=True)
    return max(half_width, (fast // 2 - 1.5) * mesh)


def grid_refusal(what: str, points: float, eps_error: float, steps: int,
                  other: str = "more noise") -> BudgetError:
    """The one message for an account whose PRV grid would not fit in memory."""
    size = (f"a PRV grid of {points:.3g} points" if math.isfinite(points)
            else "an unbounded PRV grid")
    limit = f"limit {PRV_GRID_MAX:.0e} points, about {PRV_GRID_MAX * 360 / 1e9:.1f} GB"
    need = eps_error_to_fit(eps_error, points)
    remedy = (f"use privacy.eps_error >= {float(f'{need:.2g}'):g} (now {eps_error:g}), fewer steps "
              f"than {steps} or {other}" if math.isfinite(need) and need < 0.1
              else f"use {other} or fewer steps than {steps}")
    return BudgetError(f"{what} is out of reach: its account would need {size} ({limit}); {remedy}")


def gaussian_one_step_delta(sigma_eff: float, sample_rate: float, epsilon: float) -> float:
    """Exact delta(epsilon) of ONE Poisson-subsampled Gaussian step, for the pair prv-accountant
    composes (P = (1-q) N(0, s^2) + q N(1, s^2) against Q = N(0, s^2)). T steps spend at least this,
    so it refuses a far-too-small given sigma without building a grid."""
    from scipy.stats import norm

    s, q = sigma_eff, sample_rate
    log_c = epsilon + math.log1p((q - 1) * math.exp(-epsilon))  # log(e^epsilon - 1 + q)
    x = s * s * (log_c - math.log(q)) + 0.5  # the privacy loss exceeds epsilon iff X > x
    a = math.log(q) + float(norm.logsf((x - 1) / s))  # log q P(N(1, s^2) > x)
    b = log_c + float(norm.logsf(x / s))  # log (e^epsilon - 1 + q) P(N(0, s^2) > x)
    return math.exp(a) * -math.expm1(b - a) if b < a else 0.0


@dataclass(frozen=True)
class EpsilonBounds:
    lower: float
    estimate: float
    upper: float  # the guarantee


#: the PRV accountant built last, by its inputs (`prv_accountant`): at most one entry
_LAST_PRV: dict[tuple, object] = {}
_LAST_PRV_LOCK = threading.Lock()


def prv_accountant(multiplier: float, sample_rate: float, steps: int, delta: float, eps_error: float,
                   half_width: float):
    """prv-accountant's accountant of `steps` Poisson-subsampled Gaussian steps, its grid of
    half width `half_width` (`prv_grid`: checked to fit by the caller). The one built last is kept
    and handed out again for the same inputs: a run confirms its calibrated sigma, and its rows are
    then accounted, by the same account (it was built twice a run, 0.1-0.5 s each), and an account
    is a function of its inputs alone, read and never changed by its users. The previous one is
    dropped before another is built, so that the memo never holds a second grid while one is made."""
    key = (multiplier, sample_rate, steps, delta, eps_error, half_width)
    with _LAST_PRV_LOCK:
        found = _LAST_PRV.get(key)
        if found is None:
            _LAST_PRV.clear()
    if found is not None:
        return found
    from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant
    mechanism = PoissonSubsampledGaussianMechanism(sampling_probability=sample_rate, noise_multiplier=multiplier)
    # eps_max: prv-accountant's own safe domain (prv_grid), widened by less than 1% so that
    # the grid's length is a fast FFT size; a wider domain only truncates less
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Assuming that true epsilon")
        built = PRVAccountant(prvs=[mechanism], eps_error=eps_error, delta_error=delta / 1000,
                              max_self_compositions=[steps],
                              eps_max=fast_fft_half_width(half_width, steps, delta, eps_error))
    with _LAST_PRV_LOCK:
        _LAST_PRV.clear()
        _LAST_PRV[key] = built
    return built


class GaussianAccountant:
    """Epsilon spent after t of `steps` Poisson-subsampled Gaussian steps (PRV, or exact when q = 1).

    Raises BudgetError, before building anything, if the PRV grid would exceed PRV_GRID_MAX points.
    """

    def __init__(self, sigma: float, sample_rate: float, steps: int, delta: float,
                 eps_error: float = 0.01, mechanisms: int = 1):
        check_run(sigma, sample_rate, steps, mechanisms)
        check_delta(delta)
        if not (_is_real(eps_error) and eps_error > 0):
            raise BudgetError(f"eps_error must be > 0, got {eps_error!r}")
        self.sigma, self.sample_rate, self.steps, self.delta = sigma, sample_rate, steps, delta
        self.eps_error, self.mechanisms = eps_error, mechanisms
        self.multiplier = effective_noise_multiplier(sigma, mechanisms)
        self._prv = None
        if sample_rate < 1:
            half_width, points = prv_grid(self.multiplier, sample_rate, steps, delta, eps_error)
            if not grid_fits(points):
                raise grid_refusal(f"sigma={sigma:g} with sample rate {sample_rate:.4g}, {steps} steps "
                                    f"and eps_error {eps_error:g}", points, eps_error, steps)
            try:
                self._prv = prv_accountant(self.multiplier, sample_rate, steps, delta, eps_error, half_width)
            except RuntimeError as err:   # prv-accountant's own check of its discretisation failed
                raise BudgetError(
                    f"the PRV accountant cannot account sigma={sigma:g} at sample rate {sample_rate:.4g} over "
                    f"{steps} steps (its check of its own discretisation failed: {str(err).rstrip('.')}): "
                    "use the pld or rdp accountant (privacy.accountant=pld, pazo-privacy --accountant pld)"
                ) from None
            self._fourier = self._prv.composer.self_composers[0]

    def epsilon(self, steps_done: int) -> EpsilonBounds:
        if steps_done <= 0:
            return EpsilonBounds(0.0, 0.0, 0.0)
        if self._prv is None:  # full batch: T Gaussians = one Gaussian with mu = sqrt(T)/sigma
            eps = gaussian_epsilon(math.sqrt(steps_done) / self.multiplier, self.delta)
            return EpsilonBounds(eps, eps, eps)
        if not 0 < steps_done <= self.steps:
            raise BudgetError(f"epsilon after {steps_done} steps asked of an account of {self.steps}")
        lo, est, up = self._composition(steps_done).compute_epsilon(
            self.delta, self._prv.delta_error, self._prv.eps_error)
        return EpsilonBounds(max(float(lo), 0.0), max(float(est), 0.0), max(float(up), 0.0))

    def _composition(self, t: int) -> DiscretePrivacyRandomVariable:
        """The t-fold composition, as prv-accountant's Fourier composer computes it, except that
        F^t is raised by repeated squaring (about 2 log2(t) complex products, a few times cheaper
        than numpy's general complex power): a function of t alone, so a resumed run logs the
        same bits as an uninterrupted one."""
        from prv_accountant.discrete_privacy_random_variable import DiscretePrivacyRandomVariable
        from scipy.fft import irfft

        fourier = self._fourier
        pmf = irfft(_integer_power(fourier.F, t), n=len(fourier.domain))
        pmf = np.roll(pmf, t - 1 + (len(pmf) // 2 if t % 2 == 0 else 0))
        domain = fourier.domain.shift_right(fourier.domain.shifts() * (t - 1))
        return DiscretePrivacyRandomVariable(pmf, domain, log_pmc_inf=fourier.prvs[0].log_pmc_inf * t)


def amplified_pure_epsilon(sigma: float, sample_rate: float) -> float:
    """One Poisson-subsampled step of a (1/sigma)-DP mechanism: log(1 + q (e^(1/sigma) - 1))."""
    x = 1.0 / sigma
    if x < 30:
        return math.log1p(sample_rate * math.expm1(x))
    return x + math.log(sample_rate + (1 - sample_rate) * math.exp(-x))  # the same, without overflow


def laplace_pure_epsilon(sigma: float, sample_rate: float, steps: int) -> float:
    """DP-ZO's closed form (Tang et al. 2024, Theorem 3.1): T log(1 + q (e^(1/sigma) - 1))."""
    return steps * amplified_pure_epsilon(sigma, sample_rate)


class PureDPComposition:
    """`steps` adaptively composed step_epsilon-DP steps, exactly: the optimal composition theorem
    (Kairouz, Oh & Viswanath 2015) says randomized response is the worst case, whose privacy loss
    is (T - 2K) eps0 with K ~ Binomial(T, 1/(1 + e^eps0)); delta(epsilon) = E[(1 - e^(epsilon - loss))+].

    This is the quantity prv-accountant approximates for PureDPMechanism on a grid (whose rounding
    of +-eps0 to grid cells made epsilon(sigma) a staircase with steps of eps_error). Terms of K more
    than 40 standard deviations from its mean are counted as if each contributed its full mass, so
    the result stays an upper bound.
    """

    def __init__(self, step_epsilon: float, steps: int):
        from scipy.special import expit
        from scipy.stats import binom

        self.step_epsilon, self.steps = step_epsilon, steps
        p = float(expit(-step_epsilon))  # probability of a step's loss being -eps0
        mean, sd = steps * p, math.sqrt(steps * p * (1 - p))
        k_lo, k_hi = max(0, math.floor(mean - 40 * sd - 40)), min(steps, math.ceil(mean + 40 * sd + 40))
        if k_hi - k_lo + 1 > PURE_DP_WINDOW_MAX:
            raise BudgetError(f"{steps} steps are out of reach for the exact Laplace account "
                              f"(more than {PURE_DP_WINDOW_MAX:.0e} binomial terms)")
        k = np.arange(k_lo, k_hi + 1)
        self.loss = (steps - 2 * k) * step_epsilon
        self.log_mass = binom.logpmf(k, steps, p)
        self.mass = np.exp(self.log_mass)
        self.outside = float(binom.cdf(k_lo - 1, steps, p) + binom.sf(k_hi, steps, p))

    def delta(self, epsilon: float) -> float:
        above = self.loss > epsilon
        return float(self.mass[above] @ -np.expm1(epsilon - self.loss[above])) + self.outside

    def epsilon(self, delta: float) -> float:
        """Smallest epsilon (to ~1e-12 relative, rounded up) with delta(epsilon) <= delta."""
        target = delta * (1 - 1e-9)  # margin for the float error of the sums
        if self.delta(0.0) <= target:
            return 0.0
        # Between consecutive losses the set {loss > epsilon} is a prefix of the window (losses fall
        # as K grows), where delta(epsilon) = A - e^epsilon B: solve each piece in closed form and
        # keep the one whose solution lies on it (as prv-accountant does on its grid).
        pos = self.loss > 0
        loss = self.loss[pos]
        a = np.cumsum(self.mass[pos]) + self.outside
        log_b = np.logaddexp.accumulate(self.log_mass[pos] - loss)  # e^-loss underflows for large losses
        with np.errstate(all="ignore"):
            solution = np.log(a - target) - log_b
        below = np.append(loss[1:], 0.0)  # each piece is [next loss, this loss)
        on_piece = np.flatnonzero((solution >= below) & (solution < loss))
        pure = self.steps * self.step_epsilon  # delta(pure) = 0: always a valid answer
        eps = float(solution[on_piece[0]]) if len(on_piece) else pure
        # confirm with the sum of positive terms (no cancellation); round up until it holds
        step = 1e-12 * max(eps, 1e-12)
        while eps < pure and self.delta(eps) > target:
            eps, step = eps + step, step * 4
        return min(eps, pure)


class LaplaceAccountant:
    """Laplace noise of scale sigma * sensitivity on each step of Poisson-subsampled sums.

    delta = 0: pure epsilon-DP by basic composition of the amplified steps (closed form).
    delta > 0: (epsilon, delta) by the exact optimal composition of the amplified pure-DP steps
    (`PureDPComposition`), never larger than the pure bound. `eps_error` is accepted for the common
    accountant interface; no grid is involved.
    """

    def __init__(self, sigma: float, sample_rate: float, steps: int, delta: float,
                 eps_error: float | None = None):
        check_run(sigma, sample_rate, steps)
        check_delta(delta, "laplace")
        self.sigma, self.sample_rate, self.steps, self.delta = sigma, sample_rate, steps, delta
        self.eps_error = eps_error
        self.step_epsilon = amplified_pure_epsilon(sigma, sample_rate)

    def pure_epsilon(self, steps_done: int) -> float:
        return steps_done * self.step_epsilon

    def epsilon(self, steps_done: int) -> EpsilonBounds:
        pure = self.pure_epsilon(steps_done)
        if self.delta == 0 or steps_done <= 0:
            return EpsilonBounds(pure, pure, pure)
        eps = min(PureDPComposition(self.step_epsilon, steps_done).epsilon(self.delta), pure)
        return EpsilonBounds(eps, eps, eps)


@contextlib.contextmanager
def quiet_rdp():
    """dp-accounting's RDP warns through absl for every order its series leaves out (small alpha at
    large q): the orders it keeps still bound epsilon, so the warnings tell a user nothing."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        yield
    finally:
        absl.setLevel(level)


def gaussian_dp_event(sigma: float, sample_rate: float, steps: int):
    from dp_accounting import dp_event

    one = dp_event.GaussianDpEvent(sigma)
    step = one if sample_rate >= 1 else dp_event.PoissonSampledDpEvent(sample_rate, one)
    return dp_event.SelfComposedDpEvent(step, steps)


class DpAccountingAccountant:
    """dp-accounting's RDP or PLD account of up to `steps` Poisson-subsampled Gaussian steps, with
    the interface of pazo's `GaussianAccountant` (`.epsilon(t).upper` is the guarantee after t
    steps), so that a run accounts with it as with PRV. `mechanisms` independent releases a step
    compose to one of multiplier sigma / sqrt(mechanisms). PLD's one-step distribution is built once
    and composed t times for each t asked (a run's rows); `lower(t)`: PLD's optimistic estimate, a
    lower bound on the true epsilon (RDP gives none: 0)."""

    def __init__(self, accountant: str, sigma: float, sample_rate: float, steps: int, delta: float,
                 mechanisms: int = 1):
        self.multiplier = effective_noise_multiplier(sigma, mechanisms)
        check_inputs(sample_rate, steps, delta, accountant, self.multiplier)
        if accountant not in DP_ACCOUNTING:
            raise BudgetError(f"{accountant!r} is not one of dp-accounting's accountants ({', '.join(DP_ACCOUNTING)})")
        self.accountant, self.sample_rate, self.steps, self.delta = accountant, sample_rate, steps, delta
        self._one_step: dict[bool, object] = {}   # pessimistic? -> PLD of one step

    def _pld(self, pessimistic: bool):
        if pessimistic not in self._one_step:
            from dp_accounting.pld import privacy_loss_distribution

            self._one_step[pessimistic] = privacy_loss_distribution.from_gaussian_mechanism(
                self.multiplier, pessimistic_estimate=pessimistic, value_discretization_interval=PLD_INTERVAL,
                sampling_prob=min(self.sample_rate, 1.0), use_connect_dots=pessimistic)
        return self._one_step[pessimistic]

    def upper(self, steps_done: int) -> float:
        """The guarantee after `steps_done` steps (an upper bound on the true epsilon)."""
        if steps_done <= 0:
            return 0.0
        if self.accountant == "rdp":
            from dp_accounting.rdp import RdpAccountant
            with quiet_rdp():
                event = gaussian_dp_event(self.multiplier, self.sample_rate, steps_done)
                try:
                    return float(RdpAccountant().compose(event).get_epsilon(self.delta))
                except (ZeroDivisionError, OverflowError) as err:   # its orders' arithmetic, at a tiny sigma
                    raise BudgetError(f"sigma={self.multiplier:g} is too small to account: dp-accounting's RDP "
                                      f"arithmetic fails ({err}); a noise multiplier this small gives no "
                                      "meaningful epsilon") from None
        return float(self._pld(True).self_compose(steps_done).get_epsilon_for_delta(self.delta))

    def lower(self, steps_done: int) -> float:
        """A lower bound on the true epsilon after `steps_done` steps: PLD's optimistic estimate (RDP: 0)."""
        if steps_done <= 0 or self.accountant == "rdp":
            return 0.0
        return float(self._pld(False).self_compose(steps_done).get_epsilon_for_delta(self.delta))

    def epsilon(self, steps_done: int) -> EpsilonBounds:
        """As `GaussianAccountant.epsilon`: the guarantee as `upper` (and estimate); lower 0 (`lower`
        computes PLD's, at the cost of a second account)."""
        upper = self.upper(steps_done)
        return EpsilonBounds(0.0, upper, upper)


def check_inputs(sample_rate, steps, delta, accountant: str, sigma=None) -> None:
    """The inputs every plan needs, each refused in one BudgetError line."""
    if accountant not in ACCOUNTANTS:
        raise BudgetError(f"unknown accountant {accountant!r}; choices: {', '.join(ACCOUNTANTS)}")
    check_run(sigma, sample_rate, steps)
    check_delta(delta)
    if accountant == "pld" and sigma is not None and sigma < PLD_MIN_SIGMA:
        raise BudgetError(f"sigma={sigma:g}: the PLD accountant's grid would not fit in memory below sigma "
                          f"{PLD_MIN_SIGMA:g}; use the prv or rdp accountant")
    if steps > MAX_STEPS:
        raise BudgetError(f"{steps} steps: a plan considers at most {MAX_STEPS:,} steps")


def check_accountant(accountant: str, noise: str = "gaussian", eps_error: float | None = None) -> None:
    """The accountant a run may use (`privacy.accountant`), one BudgetError line otherwise: one of
    ACCOUNTANTS; rdp and pld only for Gaussian noise (Laplace noise is accounted exactly, whatever
    the setting); `privacy.eps_error`, PRV's accuracy, only with prv (refused rather than ignored,
    so that no run reads as more accurate than it is)."""
    if accountant not in ACCOUNTANTS:
        raise BudgetError(f"unknown privacy.accountant {accountant!r}; choices: {', '.join(sorted(ACCOUNTANTS))}")
    if accountant == "prv":
        return
    if noise != "gaussian":
        raise BudgetError(f"privacy.accountant={accountant} accounts Gaussian noise; this method adds {noise} "
                          f"noise, which pazo accounts exactly: leave privacy.accountant=prv (the default)")
    if eps_error is not None:
        raise BudgetError(f"privacy.eps_error is the PRV accountant's accuracy; privacy.accountant={accountant} "
                          "has none to set: leave privacy.eps_error=null")


def accountant_for(mechanism: str, sigma: float, sample_rate: float, steps: int, delta: float,
                   eps_error: float | None, mechanisms: int = 1, accountant: str | None = "prv"):
    """The one chooser of a run's accountant (plan, tracker, cache check): Laplace noise's exact one
    whatever `accountant` says; for Gaussian noise PRV, or dp-accounting's RDP or PLD."""
    if mechanism == "laplace":
        return LaplaceAccountant(sigma, sample_rate, steps, delta, eps_error=eps_error)
    if accountant in DP_ACCOUNTING:
        return DpAccountingAccountant(accountant, sigma, sample_rate, steps, delta, mechanisms)
    return GaussianAccountant(sigma, sample_rate, steps, delta, eps_error=eps_error, mechanisms=mechanisms)


def epsilon_for(mechanism: str, sigma: float, sample_rate: float, steps: int, delta: float,
                eps_error: float | None = None, mechanisms: int = 1, accountant: str | None = "prv") -> float:
    """The guarantee (upper bound) after all `steps` of the account `accountant_for` chooses: what
    calibration's searches ask of a sigma (through `Account.epsilon`), asked with plain numbers."""
    return accountant_for(mechanism, sigma, sample_rate, steps, delta, eps_error, mechanisms,
                          accountant).epsilon(steps).upper


@dataclass(frozen=True)
class Account:
    """The one account a sigma search asks about (noise `mechanism`, sample rate, steps, delta, PRV's
    `eps_error`, `mechanisms` a step, `accountant`, and the `target` epsilon it aims at), checked once
    where it is made (`Account.aiming`): calibration's searches, the sigma cache's key and confirmation,
    and the cross-check's memo ask it what a sigma spends (`epsilon`), its PRV grid and its dp-accounting
    event, instead of passing its numbers from module to module."""
    mechanism: str
    sample_rate: float
    steps: int
    delta: float
    eps_error: float | None = None
    mechanisms: int = 1
    accountant: str | None = "prv"
    target: float | None = None

    @classmethod
    def aiming(cls, epsilon, delta, sample_rate, steps, eps_error: float | None = None, mechanisms=1,
               mechanism: str = "gaussian", accountant: str | None = "prv") -> Account:
        """The account of a search for the sigma that meets (`epsilon`, `delta`), its inputs refused in
        one BudgetError line each, in calibration's order: the target, then (PRV, and Laplace noise
        whatever `accountant` says) the mechanism, delta, the run's inputs and PRV's accuracy, or
        (dp-accounting's RDP or PLD) the accountant and the plan's inputs."""
        epsilon = check_target_epsilon(epsilon)
        if accountant != "prv" and mechanism == "gaussian":
            check_inputs(sample_rate, steps, delta, accountant)
            return cls("gaussian", sample_rate, int(steps), delta, None, int(mechanisms), accountant, epsilon)
        if mechanism not in MECHANISMS:
            raise BudgetError(f"unknown noise mechanism {mechanism!r}; choices: {', '.join(MECHANISMS)}")
        delta = check_delta(delta, mechanism)
        check_run(None, sample_rate, steps, mechanisms)
        eps_error = float(eps_error or default_eps_error(epsilon))
        if not (math.isfinite(eps_error) and 0 < eps_error < epsilon):
            raise BudgetError(f"eps_error must be in (0, epsilon={epsilon:g}) - the guarantee is the PRV "
                              f"estimate plus eps_error - got {eps_error!r}")
        return cls(mechanism, sample_rate, int(steps), delta, eps_error, int(mechanisms), accountant, epsilon)

    def effective(self) -> Account:
        """The same account of one release a step: Gaussian searches solve for the effective multiplier
        sigma / sqrt(mechanisms) (`effective_noise_multiplier`), then scale it back."""
        return replace(self, mechanisms=1)

    def epsilon(self, sigma: float, eps_error: float | None = None) -> float:
        """The guarantee (upper bound) after all the steps at noise multiplier `sigma`, by the account
        `accountant_for` chooses (PRV to `eps_error` where given, else to the account's own)."""
        return epsilon_for(self.mechanism, sigma, self.sample_rate, self.steps, self.delta,
                           self.eps_error if eps_error is None else eps_error, self.mechanisms, self.accountant)

    def grid(self, sigma_eff: float) -> tuple[float, float]:
        """(L, points) of the PRV grid of the account at effective multiplier `sigma_eff` (`prv_grid`)."""
        return prv_grid(sigma_eff, self.sample_rate, self.steps, self.delta, self.eps_error)

    def dp_event(self, sigma_eff: float):
        """dp-accounting's event of the account at effective multiplier `sigma_eff` (`gaussian_dp_event`)."""
        return gaussian_dp_event(sigma_eff, self.sample_rate, self.steps)
