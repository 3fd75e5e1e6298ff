"""The f-DP one-run lower bound on epsilon (Mahloujifar, Melis and Chaudhuri 2024, "Auditing
f-Differential Privacy in One Run", arXiv:2410.22235), beside the (epsilon, delta) bound of
`bound.py`.

The same game: m canaries, each in with probability 1/2; the auditor makes k guesses (the others
abstain), v of them right. Steinke et al. bound the chance of v right guesses through one
(epsilon, delta) point of the privacy curve; Mahloujifar et al. use the whole trade-off curve f of
the claimed guarantee, which is tighter when the claim is a Gaussian mechanism's. The claim tested
here is "(epsilon, delta)-DP as the Gaussian mechanism that is exactly (epsilon, delta)-DP is", i.e.
mu-GDP with mu = mu_for(epsilon, delta), f(x) = Phi(Phi^-1(1 - x) - mu).

Their test (the capped recursion of their Section 5): with tau the significance, start from the
masses r = tau v / m (right guesses) and h = tau (k - v) / m (wrong ones) that an adversary would
need to produce v right guesses with probability tau; walk i = v - 1, ..., 0, each time moving
wrong-guess mass up to what the trade-off curve forces, h <- max(h, Phi(Phi^-1(r) - mu)), and the
right-guess mass with it, r <- min(r + i / (k - i) (h_new - h), 1). If the masses end above the
k / m that k guesses can hold, the claim is rejected at level tau. The audited bound is the largest
epsilon rejected (bisection: rejection only gets harder as epsilon grows)."""
from __future__ import annotations

import functools
import math

from scipy.optimize import brentq
from scipy.special import ndtr, ndtri  # Phi and Phi^-1 (fast on scalars)


def gaussian_delta(epsilon: float, mu: float) -> float:
    """delta(epsilon) of mu-GDP (Dong, Roth and Su 2022, Corollary 2.13)."""
    return float(ndtr(-epsilon / mu + mu / 2) - math.exp(epsilon) * ndtr(-epsilon / mu - mu / 2))


@functools.lru_cache(maxsize=4096)
def mu_for(epsilon: float, delta: float) -> float:
    """The mu of the Gaussian mechanism that is exactly (epsilon, delta)-DP (0 when delta >= 1)."""
    if delta >= 1:
        return math.inf
    if not 0 < delta:
        return 0.0  # pure epsilon-DP is no Gaussian's: only mu = 0 meets delta = 0
    hi = 1.0
    while gaussian_delta(epsilon, hi) < delta:
        hi *= 2
    return brentq(lambda mu: gaussian_delta(epsilon, mu) - delta, 1e-12, hi, xtol=1e-12)


def rejects(m: int, k: int, v: int, mu: float, tau: float) -> bool:
    """Whether v right of k guesses among m canaries reject mu-GDP at significance tau."""
    if not 0 <= v <= k <= m:
        raise ValueError(f"need 0 <= v <= k <= m, got v={v}, k={k}, m={m}")
    if v == 0:
        return False
    r, h = tau * v / m, tau * (k - v) / m
    for i in range(v - 1, -1, -1):
        forced = float(ndtr(ndtri(r) - mu)) if math.isfinite(mu) else 0.0
        if forced <= h:
            break  # h (and so r) cannot move any more
        r, h = min(r + i / (k - i) * (forced - h), 1.0), forced
    return r + h > k / m


def epsilon_lower_bound_fdp(m: int, k: int, v: int, delta: float, beta: float = 0.05,
                            tol: float = 1e-6) -> float:
    """The largest epsilon whose Gaussian (epsilon, delta) claim v right of k guesses reject at
    level beta (0 if none)."""
    if not 0 < beta < 1:
        raise ValueError(f"beta must be in (0, 1), got {beta}")

    def rejected(eps: float) -> bool:
        return rejects(m, k, v, mu_for(eps, delta), beta)

    if not rejected(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while rejected(hi):
        lo, hi = hi, 2 * hi
        if hi > 1e3:
            return math.inf  # only with delta = 0 and all guesses right: no epsilon survives
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rejected(mid) else (lo, mid)
    return lo
