"""Private hyperparameter selection (Liu & Talwar 2019; Papernot & Steinke 2022): run a random
number K of training runs, each with a configuration drawn at random from the grid, and release
only the best. Its cost is a small multiple of one run's: dp-accounting's RDP accountant gives it
(`RepeatAndSelectDpEvent` over the run's Poisson-subsampled Gaussian, composed over its T steps).

K follows a truncated negative binomial distribution with shape eta and mean mu (Papernot &
Steinke's Definition 1): eta = 1 is the geometric, eta = 0 the logarithmic distribution, and the
Poisson distribution is the limit eta -> infinity (K may then be 0: nothing is released). K is
drawn from OS entropy: a K anyone could reproduce from a seed would void the bound.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math
import random
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp
from scipy import stats

from pazo.commands.console import spare_absl_stream
from pazo.privacy.accountants import effective_noise_multiplier

spare_absl_stream()   # dp-accounting brought absl in, on whatever sys.stderr was then

#: the distributions of K by name, and the shape dp-accounting's event takes for each
DISTRIBUTIONS = ("geometric", "logarithmic", "truncated_negative_binomial", "poisson")
#: the largest E[K] taken: each of the K runs is a whole training run, so E[K] 1000 is already 1000
#: trainings per cell and seed (the paper's whole Table 1 is 3226 runs), and the draw holds one entry
#: per run: at E[K] <= 1000 no draw exceeds `LARGEST_K` runs (`KDistribution.largest_draw`)
MAX_MEAN = 1000
#: the most runs any draw of K with E[K] <= MAX_MEAN can give (the logarithmic's at E[K] 1000,
#: 283,223 at the largest uniform number a draw reads; the others' are smaller)
LARGEST_K = 300_000
#: the largest number `random.random()` returns: the draw's inversion never reads a larger one
LARGEST_UNIFORM = 1 - 2.0 ** -53


@dataclass(frozen=True)
class KDistribution:
    """The distribution of the number of runs K: its name, mean, and (truncated negative binomial
    only) shape eta > 0."""
    name: str = "geometric"
    mean: float = 10.0
    shape: float | None = None

    def __post_init__(self):
        if self.name not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution of K {self.name!r}; choices: {', '.join(DISTRIBUTIONS)}")
        if isinstance(self.mean, bool) or not isinstance(self.mean, (int, float)) or not (
                math.isfinite(self.mean) and self.mean > 1):
            raise ValueError(f"the mean of K must be a number above 1, got {self.mean!r}")
        if self.mean > MAX_MEAN:
            raise ValueError(f"the mean of K is at most {MAX_MEAN}, got {self.mean:g}: each of the K runs is a whole "
                             f"training run ({MAX_MEAN} is already {MAX_MEAN} trainings per cell and seed), and "
                             f"the draw lists every run")
        if self.name == "truncated_negative_binomial":
            if isinstance(self.shape, bool) or not isinstance(self.shape, (int, float)) or not (
                    math.isfinite(self.shape) and self.shape > 0):
                raise ValueError(f"the truncated negative binomial needs a shape eta > 0 (0 is the logarithmic, 1 "
                                 f"the geometric distribution), got {self.shape!r}")
        elif self.shape is not None:
            raise ValueError(f"the {self.name} distribution of K takes no shape (got {self.shape!r}); "
                             "use truncated_negative_binomial")

    @property
    def eta(self) -> float:
        """The shape dp-accounting's `RepeatAndSelectDpEvent` takes (inf: Poisson)."""
        return {"geometric": 1.0, "logarithmic": 0.0, "poisson": math.inf}.get(self.name, self.shape)

    def describe(self) -> str:
        shape = f", eta {self.shape:g}" if self.name == "truncated_negative_binomial" else ""
        return f"{self.name} (mean {self.mean:g}{shape})"

    @property
    def lowest(self) -> int:
        """The smallest K: 0 for the Poisson distribution, 1 for the others."""
        return 0 if self.name == "poisson" else 1

    def law(self):
        """(scipy's frozen distribution, the probability of the values K takes: P(K >= 1) of the
        untruncated negative binomial for the truncated one, 1 otherwise)."""
        return _law(self.name, self.mean, self.eta)

    def pmf(self, k) -> np.ndarray:
        law, kept = self.law()
        k = np.asarray(k)
        return np.where(k >= self.lowest, law.pmf(k) / kept, 0.0)

    def quantile(self, p: float) -> int:
        """The smallest k with P(K <= k) >= p, for 0 <= p < 1: from the upper tail, P(K > k) <= 1 - p
        (the truncation at 0 leaves the tail as it is). Inverting the distribution function instead
        loses the tail where P(K = 0) of the untruncated law is near 1, and overflows for p near 1."""
        law, kept = self.law()
        return _upper_tail_inverse(law, (1 - p) * kept, self.lowest)

    def draw(self, rng: random.Random | None = None) -> int:
        """One K by inversion of its distribution function, from OS entropy unless `rng` is given
        (tests)."""
        return self.quantile((rng or random.SystemRandom()).random())

    def largest_draw(self) -> int:
        """The largest K a draw can give (the quantile of the largest uniform number it reads): the
        draw's list of runs never holds more."""
        return self.quantile(LARGEST_UNIFORM)

    def summary(self) -> str:
        """One line for a dry run: the distribution, E[K], P(K = 1) (P(K = 0) for Poisson) and
        its median and 95th percentile."""
        return (f"K ~ {self.describe()}: E[K] {self.mean:g}, P(K={self.lowest}) {float(self.pmf(self.lowest)):.3f}, "
                f"median {self.quantile(0.5)}, 95% at most {self.quantile(0.95)}")


def _upper_tail_inverse(law, tail: float, lowest: int) -> int:
    """The smallest k >= lowest with P(K > k) <= tail (> 0) under scipy's `law`, by doubling then
    bisection on its survival function, which is accurate far into the tail (scipy's own inverse,
    `isf`, overshoots the logarithmic's by a factor of two or more there)."""
    high = max(lowest, 1)
    while law.sf(high) > tail:
        high *= 2
    low = lowest - 1    # (at or below it, the answer is `lowest`)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if law.sf(middle) <= tail else (middle, high)
    return high


@functools.lru_cache(maxsize=64)
def _law(name: str, mean: float, eta: float):
    """K's law with dp-accounting's gamma for (eta, mean) (the parameter its bound uses), built once."""
    if name == "poisson":
        return stats.poisson(mean), 1.0
    gamma = rdp._gamma_truncated_negative_binomial(eta, mean)
    if name == "geometric":
        return stats.geom(gamma), 1.0
    if name == "logarithmic":
        return stats.logser(1 - gamma), 1.0
    law = stats.nbinom(eta, gamma)
    return law, float(law.sf(0))


@dataclass(frozen=True)
class RunAccount:
    """What one run's privacy cost depends on: its Poisson sample rate, steps, noise multiplier,
    independent Gaussian mechanisms per step, and the noise."""
    sample_rate: float
    steps: int
    sigma: float
    mechanisms: int = 1
    noise: str = "gaussian"

    def event(self) -> dp_event.DpEvent:
        if self.noise != "gaussian":
            raise ValueError(f"private selection accounts Gaussian runs only (this run adds {self.noise} noise)")
        step = dp_event.PoissonSampledDpEvent(
            self.sample_rate, dp_event.GaussianDpEvent(effective_noise_multiplier(self.sigma, self.mechanisms)))
        return dp_event.SelfComposedDpEvent(step, self.steps)


def _accountant() -> rdp.RdpAccountant:
    return rdp.RdpAccountant(neighboring_relation=rdp.NeighborRel.ADD_OR_REMOVE_ONE)


@contextlib.contextmanager
def _quiet_absl():
    """dp-accounting warns (through absl) for each low fractional order whose series does not
    converge; that order is then left out (its RDP infinite), which only loosens the bound. (A
    handler on the root logger for the while: a module-level `logging.warning` would otherwise give
    the root logger a stderr handler for good, and every later line of the process twice.)"""
    logger, root, placeholder = logging.getLogger("absl"), logging.getLogger(), logging.NullHandler()
    level = logger.level
    logger.setLevel(logging.ERROR)
    root.addHandler(placeholder)
    try:
        yield
    finally:
        logger.setLevel(level)
        root.removeHandler(placeholder)


def rdp_curve(account: RunAccount) -> np.ndarray:
    """One run's RDP at the accountant's orders."""
    accountant = _accountant()
    with _quiet_absl():
        accountant.compose(account.event())
    return np.array(accountant._rdp)


def run_epsilon(account: RunAccount, delta: float) -> float:
    """One run's epsilon at `delta` by the same RDP accountant (comparable with the selection's)."""
    accountant = _accountant()
    with _quiet_absl():
        accountant.compose(account.event())
    return float(accountant.get_epsilon(delta))


def selection_epsilon(accounts: list[RunAccount], k: KDistribution, delta: float, selections: int = 1) -> float:
    """Epsilon at `delta` of releasing the best of K runs, each one of `accounts` (the configurations
    a draw may pick), repeated `selections` times (one per seed) and composed.

    One distinct account: dp-accounting's `RepeatAndSelectDpEvent` over it. Several (q, T or sigma
    vary within the grid): every run satisfies the pointwise largest of their RDP curves, so the
    selection's RDP is the library's repeat-and-select formula applied to that curve."""
    distinct = list(dict.fromkeys(accounts))
    if not distinct:
        raise ValueError("a selection needs at least one run's account")
    accountant = _accountant()
    if len(distinct) == 1:
        with _quiet_absl():
            accountant.compose(dp_event.RepeatAndSelectDpEvent(distinct[0].event(), k.mean, k.eta), selections)
        return float(accountant.get_epsilon(delta))
    worst = np.max([rdp_curve(a) for a in distinct], axis=0)
    orders = accountant._orders
    selected = selections * np.asarray(rdp._compute_rdp_repeat_and_select(orders, worst, k.mean, k.eta))
    return float(rdp.compute_epsilon(orders, selected, delta)[0])
