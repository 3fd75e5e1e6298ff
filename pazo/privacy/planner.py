"""Privacy arithmetic before any compute: sigma for a target epsilon, the epsilon of a sigma, and
the steps a budget allows, for T steps of the Poisson-subsampled Gaussian mechanism (sample rate q,
noise multiplier sigma, delta), by one of three accountants:

- `prv`: pazo's own (prv-accountant's PRV upper bound, what every run calibrates and checks with);
- `pld`: dp-accounting's privacy loss distribution (its pessimistic estimate, an upper bound);
- `rdp`: dp-accounting's Renyi accountant (an upper bound, looser than the other two).

All three bound the same true epsilon from above; PRV and PLD also give a lower bound, so their
intervals must overlap and RDP must lie above both lower bounds (the tests check it). A plan is
public arithmetic on public numbers: it reads no data and costs no privacy.
"""
from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass

from pazo.privacy.accountants import (EPSILON_MAX, PRV_GRID_MAX, BudgetError, EpsilonBounds, GaussianAccountant,
                                      check_delta, check_run, check_target_epsilon, default_eps_error,
                                      effective_noise_multiplier, prv_grid)
from pazo.privacy.calibration import calibrate_sigma

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


@dataclass(frozen=True)
class Account:
    """Epsilon by one accountant: `upper` is the guarantee; `lower` a lower bound where the
    accountant gives one (RDP does not: its lower is 0)."""
    accountant: str
    lower: float
    upper: float


@contextlib.contextmanager
def _quiet_rdp():
    """dp-accounting's RDP warns through absl for every order its series leaves out (small alpha at
    large q): the orders it keeps still bound epsilon, so the warnings tell a user nothing."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        yield
    finally:
        absl.setLevel(level)


def _dp_event(sigma: float, sample_rate: float, steps: int):
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
            with _quiet_rdp():
                event = _dp_event(self.multiplier, self.sample_rate, steps_done)
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


def epsilon_of(sigma: float, sample_rate: float, steps: int, delta: float, accountant: str = "prv",
               eps_error: float | None = None) -> Account:
    """The epsilon T steps at noise multiplier `sigma` spend, by `accountant` (PRV to `eps_error`:
    a run's is that of its target epsilon, `default_eps_error`; None: from a rough RDP estimate,
    no finer than a grid that fits allows)."""
    check_inputs(sample_rate, steps, delta, accountant, sigma)
    if accountant == "prv":
        error = eps_error or _eps_error(sigma, sample_rate, steps, delta)
        bounds = GaussianAccountant(sigma, sample_rate, steps, delta, eps_error=error).epsilon(steps)
        return Account("prv", bounds.lower, bounds.upper)
    account = DpAccountingAccountant(accountant, sigma, sample_rate, steps, delta)
    upper = account.upper(steps)
    return Account(accountant, min(account.lower(steps), upper), upper)


def upper_epsilon_of(sigma: float, sample_rate: float, steps: int, delta: float, accountant: str = "prv",
                     eps_error: float | None = None) -> float:
    """`epsilon_of(...).upper`, the guarantee alone: PLD's lower bound is a second account as costly
    as the first (a run's cross-check and the planner's printout need only the guarantee). The
    inputs are checked as `epsilon_of` checks them (a PLD grid too fine to fit refused before it is built)."""
    if accountant == "prv":
        return epsilon_of(sigma, sample_rate, steps, delta, accountant, eps_error).upper
    check_inputs(sample_rate, steps, delta, accountant, sigma)
    return DpAccountingAccountant(accountant, sigma, sample_rate, steps, delta).upper(steps)


def _eps_error(sigma: float, sample_rate: float, steps: int, delta: float) -> float:
    """PRV's accuracy for an epsilon not known in advance: 1% of the RDP epsilon (above the true
    one), at most 0.01, as a run's own accounting uses for its target; but no finer than the
    finest whose grid fits in memory: the tiny epsilon of a large sigma would otherwise ask for a
    grid beyond PRV_GRID_MAX and be refused, where a coarser account still bounds it (the answer
    prints its lower bound beside the upper one)."""
    rough = DpAccountingAccountant("rdp", sigma, sample_rate, steps, delta).upper(steps)
    wanted = default_eps_error(max(rough, 1e-3))
    if sample_rate >= 1:   # exact: no grid
        return wanted
    _, points = prv_grid(sigma, sample_rate, steps, delta, wanted)
    fitting = wanted * points / PRV_GRID_MAX * 1.05   # the grid's points go as 1 / eps_error
    return min(max(wanted, fitting), default_eps_error(EPSILON_MAX))


def sigma_for(epsilon: float, sample_rate: float, steps: int, delta: float, accountant: str = "prv") -> float:
    """The smallest noise multiplier (to about 0.2%) whose epsilon by `accountant` is at most the target."""
    epsilon = check_target_epsilon(epsilon)
    check_inputs(sample_rate, steps, delta, accountant)
    if accountant == "prv":
        return calibrate_sigma(epsilon, delta, sample_rate, int(steps))
    from dp_accounting import mechanism_calibration as calibration
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    def event(s: float):
        return _dp_event(s, sample_rate, int(steps))

    try:
        with _quiet_rdp():
            rdp = calibration.calibrate_dp_mechanism(RdpAccountant, event, epsilon, delta,
                                                     bracket_interval=calibration.LowerEndpointAndGuess(1e-2, 1.0),
                                                     tol=1e-4)
        if accountant == "rdp":
            return _meeting(float(rdp), epsilon, sample_rate, int(steps), delta, accountant)
        # RDP's sigma meets the target by PLD too (RDP bounds it from above); PLD's is rarely under
        # 0.7 of it, and a bracket that misses is widened down to half (each PLD account costs seconds)
        pld = lambda: PLDAccountant(value_discretization_interval=PLD_INTERVAL)  # noqa: E731
        for low in (0.7, 0.5):
            bracket = calibration.ExplicitBracketInterval(max(rdp * low, PLD_MIN_SIGMA), rdp * 1.001)
            with contextlib.suppress(ValueError):
                sigma = calibration.calibrate_dp_mechanism(pld, event, epsilon, delta,
                                                           bracket_interval=bracket, tol=1e-3 * rdp)
                return _meeting(float(sigma), epsilon, sample_rate, int(steps), delta, accountant)
        raise ValueError(f"no sigma in [{max(rdp / 2, PLD_MIN_SIGMA):.4g}, {rdp:.4g}]")
    except (ValueError, RuntimeError, calibration.NoBracketIntervalFoundError) as err:   # none found
        raise BudgetError(f"no noise multiplier meets epsilon {epsilon:g} at delta {delta:g} ({err})") from None


def _meeting(sigma: float, epsilon: float, sample_rate: float, steps: int, delta: float, accountant: str) -> float:
    """`sigma`, raised by 0.1% at a time until its epsilon by `accountant` (as `epsilon_of` accounts,
    which a run's guarantee is) is at most the target: dp-accounting's calibration solves with its
    own accountant objects, to a tolerance."""
    while DpAccountingAccountant(accountant, sigma, sample_rate, steps, delta).upper(steps) > epsilon:
        sigma *= 1.001
    return sigma


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


def sample_rate_of(sample_rate: float | None, batch_size: int | None, n: int | None) -> float:
    """q from the command line: given, or batch size / n (a run's Poisson rate)."""
    if sample_rate is not None:
        if batch_size is not None:
            raise BudgetError("give the sample rate, or the batch size and n, not both")
        return sample_rate
    if batch_size is None or n is None:
        raise BudgetError("give the sample rate (--sample-rate), or the expected batch size and the private "
                          "set's size (--batch-size and --n)")
    if not (isinstance(n, int) and n >= 1 and isinstance(batch_size, int) and 1 <= batch_size <= n):
        raise BudgetError(f"the batch size must be an integer in [1, n], got batch size {batch_size} and n {n}")
    return batch_size / n


def steps_of(steps: int | None, epochs: float | None, sample_rate: float) -> int:
    """T from the command line: given, or epochs / q rounded, as a run plans its steps."""
    if steps is not None:
        if epochs is not None:
            raise BudgetError("give the steps or the epochs, not both")
        return steps
    if epochs is None:
        raise BudgetError("give the steps (--steps) or the epochs (--epochs)")
    if not (math.isfinite(epochs) and epochs > 0):
        raise BudgetError(f"epochs must be a positive number, got {epochs!r}")
    return steps_from_epochs(epochs, sample_rate)


def steps_from_epochs(epochs: float, sample_rate: float, epochs_key: str = "--epochs",
                      steps_key: str = "--steps") -> int:
    """T = round(epochs / q), the rule of both the command line and a run's `train.epochs`; epochs
    that give no step are refused (a run of zero steps is no run, and one step is not what was asked)."""
    steps = round(epochs / sample_rate)
    if steps < 1:
        raise BudgetError(f"{epochs_key} {epochs:g} gives {epochs / sample_rate:.3g} steps at sampling rate "
                          f"q = {sample_rate:.4g} (T = round(epochs / q)), fewer than one: give at least "
                          f"{sample_rate:.4g} epochs (one step), or {steps_key}")
    return steps
