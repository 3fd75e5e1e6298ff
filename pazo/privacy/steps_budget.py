"""The steps a budget allows (`pazo-privacy steps`), in bounded time: the search never asks an
accountant about more steps than it can account (MAX_STEPS; for PRV, the most whose grid fits in
memory, known from RDP values before any grid is built), and a budget that allows even those is
said at once from the RDP bound, a closed form that bounds the true epsilon from above. A full
account of millions of steps costs a minute; doubling up to the limit cost minutes.
"""
from __future__ import annotations

from pazo.privacy.accountants import (MAX_STEPS, BudgetError, check_inputs, check_target_epsilon, default_eps_error,
                                      grid_fits, prv_grid)
from pazo.privacy.planner import upper_epsilon_of


def accountable_steps(sigma: float, sample_rate: float, delta: float, accountant: str, eps_error: float) -> int:
    """The most steps `accountant` can account: MAX_STEPS, or for PRV the last count whose grid of
    accuracy `eps_error` fits (its points grow with the steps, so a bisection on the size alone)."""
    if accountant != "prv" or sample_rate >= 1:
        return MAX_STEPS

    def fits(steps: int) -> bool:
        return grid_fits(prv_grid(sigma, sample_rate, steps, delta, eps_error)[1])   # (the accountant's refusal)

    if fits(MAX_STEPS):
        return MAX_STEPS
    low, high = 1, MAX_STEPS   # fits(low) (one step's grid: check_inputs and the first account), not fits(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def beyond_reach(epsilon: float, sigma: float, reach: int, accountant: str, evidence: str) -> BudgetError:
    """The answer when `reach` steps, the most the accountant accounts, are within the budget."""
    if reach >= MAX_STEPS:
        return BudgetError(f"the budget allows more than {MAX_STEPS:,} steps at sigma {sigma:g} (a plan considers "
                           f"at most {MAX_STEPS:,}; {evidence})")
    return BudgetError(f"at least {reach:,} steps fit within epsilon {epsilon:g} at sigma {sigma:g} ({evidence}); the "
                       f"{accountant} account of more steps is out of reach, so how many more cannot be told with it "
                       "(--accountant rdp accounts any number of steps)")


def steps_for(epsilon: float, sigma: float, sample_rate: float, delta: float, accountant: str = "prv") -> int:
    """The most steps whose epsilon by `accountant` is at most the target (0 when one step is over
    it); a BudgetError says when the budget allows more than the accountant can account."""
    epsilon = check_target_epsilon(epsilon)
    check_inputs(sample_rate, 1, delta, accountant, sigma)
    error = default_eps_error(epsilon)

    def within(t: int) -> bool:
        return upper_epsilon_of(sigma, sample_rate, t, delta, accountant, error) <= epsilon

    if not within(1):
        return 0
    reach = accountable_steps(sigma, sample_rate, delta, accountant, error)
    for limit in sorted({MAX_STEPS, reach}, reverse=True):   # the budget's limit, then the accountant's
        bound = upper_epsilon_of(sigma, sample_rate, limit, delta, "rdp")
        if bound <= epsilon - (0 if accountant == "rdp" else 2 * error):   # (room for the accountant's own error)
            raise beyond_reach(epsilon, sigma, limit, accountant, f"the RDP bound of {limit:,} steps is epsilon "
                               f"{bound:.4g}")
    return _last_within(within, reach, epsilon, sigma, accountant)


def _last_within(within, reach: int, epsilon: float, sigma: float, accountant: str) -> int:
    """The last t <= reach with within(t), given within(1): doubling, then bisection. An account
    refused on the way (prv-accountant's check of its own discretisation) ends the search with the
    steps known to fit."""
    low, high = 1, 2

    def fits(t: int) -> bool:
        try:
            return within(t)
        except BudgetError:
            raise BudgetError(f"at least {low:,} steps fit within epsilon {epsilon:g} at sigma {sigma:g}; the "
                              f"{accountant} account of {t:,} steps is out of reach, so how many more cannot be told "
                              "with it (--accountant rdp accounts any number of steps)") from None

    while high < reach and fits(high):
        low, high = high, high * 2
    if high >= reach:
        if fits(reach):
            raise beyond_reach(epsilon, sigma, reach, accountant, f"by the {accountant} account of {reach:,} steps")
        high = reach
    while high - low > 1:   # fits(low), not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
