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

import math
from dataclasses import dataclass

from pazo.privacy.accountants import (EPSILON_MAX, BudgetError, DpAccountingAccountant, GaussianAccountant,
                                      check_inputs, check_target_epsilon, default_eps_error, eps_error_to_fit,
                                      prv_grid)
from pazo.privacy.calibration import calibrate


@dataclass(frozen=True)
class EpsilonRange:
    """Epsilon by one accountant: `upper` is the guarantee; `lower` a lower bound where the
    accountant gives one (RDP does not: its lower is 0)."""
    accountant: str
    lower: float
    upper: float


def epsilon_of(sigma: float, sample_rate: float, steps: int, delta: float, accountant: str = "prv",
               eps_error: float | None = None) -> EpsilonRange:
    """The epsilon T steps at noise multiplier `sigma` spend, by `accountant` (PRV to `eps_error`:
    a run's is that of its target epsilon, `default_eps_error`; None: from a rough RDP estimate,
    no finer than a grid that fits allows)."""
    check_inputs(sample_rate, steps, delta, accountant, sigma)
    if accountant == "prv":
        error = eps_error or _eps_error(sigma, sample_rate, steps, delta)
        bounds = GaussianAccountant(sigma, sample_rate, steps, delta, eps_error=error).epsilon(steps)
        return EpsilonRange("prv", bounds.lower, bounds.upper)
    account = DpAccountingAccountant(accountant, sigma, sample_rate, steps, delta)
    upper = account.upper(steps)
    return EpsilonRange(accountant, min(account.lower(steps), upper), upper)


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
    return min(max(wanted, eps_error_to_fit(wanted, points)), default_eps_error(EPSILON_MAX))


def sigma_for(epsilon: float, sample_rate: float, steps: int, delta: float, accountant: str = "prv") -> float:
    """The smallest noise multiplier (to about 0.2%) whose epsilon by `accountant` is at most the target."""
    epsilon = check_target_epsilon(epsilon)
    check_inputs(sample_rate, steps, delta, accountant)
    return calibrate(accountant, epsilon, delta, sample_rate, int(steps))


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
