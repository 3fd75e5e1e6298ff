"""The one-run lower bound on epsilon (Steinke, Nasr and Jagielski, NeurIPS 2023, "Privacy auditing
with one (1) training run", Theorem 3.1 and its (epsilon, delta) form).

Set-up: m canaries, each in the training data independently with probability 1/2 (S_i = +1 in,
-1 out). From the run's output alone the auditor makes a guess T_i in {+1, -1, 0} per canary
(0 = abstain); r = number of non-abstentions, v = number of correct guesses (T_i = S_i).

Theorem. If the training run is (epsilon, delta)-DP with respect to adding or removing one canary,
then for every v

    P[correct >= v]  <=  P[W >= v] + 2 m delta * max_{i = 1..v} P[v - i <= W <= v - 1] / i,
    W ~ Binomial(r, p),  p = e^epsilon / (1 + e^epsilon).

Without delta, each guess behaves at best like epsilon-randomised response (right with probability
p, independently); the delta term pays for the rare outputs where that fails. The right-hand side is
a p-value for the null hypothesis "the run is (epsilon, delta)-DP"; it grows with epsilon, so the
audited lower bound at confidence 1 - beta is the largest epsilon whose p-value is still <= beta
(found by bisection). A run whose audited bound exceeds its printed epsilon is, with confidence
1 - beta, not as private as printed.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom

from pazo.audit.fdp import epsilon_lower_bound_fdp
from pazo.errors import ConfigError


def guess_accuracy(epsilon: float) -> float:
    """p = e^eps / (1 + e^eps): the best accuracy of one guess under epsilon-DP."""
    return 1.0 / (1.0 + math.exp(-epsilon))


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Upper bound on P[at least v of r guesses correct] under (epsilon, delta)-DP, m canaries."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    if epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError(f"need epsilon >= 0 and delta in [0, 1], got {epsilon}, {delta}")
    if v == 0:
        return 1.0
    p = guess_accuracy(epsilon)
    tail = float(binom.sf(v - 1, r, p))  # P[W >= v]
    if delta == 0:
        return min(tail, 1.0)
    # max over i of P[v - i <= W <= v - 1] / i, the window growing downwards from v - 1
    pmf = binom.pmf(np.arange(v - 1, -1, -1), r, p)  # P[W = v - 1], P[W = v - 2], ..., P[W = 0]
    windows = np.add.accumulate(pmf)   # (sequential sums, as a loop adds them: the same floats)
    worst = max(0.0, float(np.max(windows / np.arange(1, v + 1))))
    return min(tail + 2 * m * delta * worst, 1.0)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, beta: float = 0.05,
                        tol: float = 1e-6) -> float:
    """The largest epsilon whose p-value is <= beta (0 if even epsilon = 0 is not rejected): with
    confidence 1 - beta the run is not (epsilon', delta)-DP for any epsilon' below it."""
    if not 0 < beta < 1:
        raise ValueError(f"beta must be in (0, 1), got {beta}")
    if p_value(m, r, v, 0.0, delta) > beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) <= beta:  # p-value -> 1 as epsilon grows (when v >= 1)
        lo, hi = hi, 2 * hi
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if p_value(m, r, v, mid, delta) <= beta:
            lo = mid
        else:
            hi = mid
    return lo


def guess_grid(m: int, fractions=(0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
               in_only=(0.005, 0.015, 0.03, 0.04)) -> list[tuple[int, int]]:
    """The (guesses "in", guesses "out") pairs an audit tries, fixed before it sees any score:
    k "in" guesses on the highest scores, and either no "out" guess or k on the lowest, for k a
    fraction of m (at least 1, at most m / 2); and, finer among the few, k "in" guesses alone (a
    white box that reads a few canaries for certain and knows nothing of the rest)."""
    def count(f):
        return min(max(1, round(f * m)), m // 2)
    pairs = {(count(f), out) for f in fractions for out in (0, count(f))} | {(count(f), 0) for f in in_only}
    return sorted(p for p in pairs if p[0] > 0)


def audit_guesses(scores, included, beta: float, delta: float,
                  grid: list[tuple[int, int]] | None = None) -> dict:
    """Guess from `scores` (higher = more likely in) and count against `included` (booleans) for
    every pair of `guess_grid`, each tested at beta / len(grid) (a union bound: the best of them
    holds at confidence 1 - beta). Returns the best pair's bound and counts, and the ceiling (the
    bound if every guess of the grid were right)."""
    m = len(scores)
    if m != len(included) or m < 2:
        raise ConfigError(f"need at least 2 canaries with one score each, got {m} scores, {len(included)} flags")
    grid = grid or guess_grid(m)
    # ascending, ties broken by index (a stable sort); numpy arrays, not Python lists: an audit of
    # millions of canaries would hold ~100 bytes a canary in lists
    order = np.argsort(np.asarray(scores, dtype=np.float64), kind="stable")
    included = np.asarray(included, dtype=bool)
    level = beta / len(grid)
    best, best_fdp = None, None
    for k_in, k_out in grid:
        guess_in, guess_out = order[m - k_in:], order[:k_out]
        correct = int(np.count_nonzero(included[guess_in])) + int(np.count_nonzero(~included[guess_out]))
        r = k_in + k_out
        bound = epsilon_lower_bound(m, r, correct, delta, level)
        row = {"epsilon_lower_bound": bound, "guesses": r, "correct": correct, "guesses_in": k_in,
               "guesses_out": k_out}
        if best is None or bound > best["epsilon_lower_bound"]:
            best = row
        # the f-DP bound on the same guesses, under the same union bound
        fdp = epsilon_lower_bound_fdp(m, r, correct, delta, level) if 2 * correct > r else 0.0
        if best_fdp is None or fdp > best_fdp["epsilon_lower_bound_fdp"]:
            best_fdp = {"epsilon_lower_bound_fdp": fdp, "fdp_guesses": r, "fdp_correct": correct}
    ceiling = max(epsilon_lower_bound(m, k_in + k_out, k_in + k_out, delta, level) for k_in, k_out in grid)
    ceiling_fdp = max(epsilon_lower_bound_fdp(m, k_in + k_out, k_in + k_out, delta, level) for k_in, k_out in grid)
    return {**best, **best_fdp, "confidence": 1 - beta, "tests": len(grid), "per_test_beta": level,
            "ceiling": ceiling, "ceiling_fdp": ceiling_fdp}
