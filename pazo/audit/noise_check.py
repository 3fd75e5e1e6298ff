"""The white box's noise check: the run's steps once more, on the run's own Poisson batches, with
every example's contribution set to zero inside the release (the privatiser still sees the batch:
its examples, their number), so that each released value is the privatiser's noise alone (divided
by the expected batch size b, a public number), and a test of its scale against the scale the
guarantee claims. Noise that depends on the batch or its size is exercised (the debug break
`noise_div_batch`).

Why: a zeroth-order step releases one scalar per query, T x Q numbers in all, too few for a one-run
audit to name enough canaries when the noise is merely too small (`pazo.audit.canaries`); but those
same numbers measure the noise itself very well. With the contributions zero, the N released
values times b over the claimed standard deviation are N(0, r^2) draws, r the realised noise over
the claimed; sum z^2 / r^2 is chi-square with N degrees of freedom, so
r <= sqrt(sum z^2 / chi2_N.ppf(1 - confidence)) with that confidence. If the rest of the
mechanism is as the run says (Poisson rate q, T steps, the clip's sensitivity), the run's epsilon
is then at least the accountant's lower estimate at sigma times that bound: a lower bound that
rests on that model, unlike the one-run bounds, which rest on nothing but the canaries.

Laplace noise (DP-ZO's pure-DP variant) is read by its mean absolute value instead: with z the
released values in units of the claimed scale and r the realised scale over the claimed, |z| is
exponential with mean r, so sum |z| ~ Gamma(N, r) and r <= sum |z| / Gamma(N, 1).ppf(1 - confidence).
The epsilon at sigma times that bound is the run's own Laplace account there (an upper bound of
the mechanism's privacy, not a lower one): above the printed epsilon, it says the printed one
assumed more noise than the run drew.

The claimed standard deviation is read from the privatiser's own spec (sigma, clip, adjacency): the
check catches noise drawn at another scale than the spec says (a tenth, a missing sqrt(Q)), not a
spec whose sensitivity is itself wrong.
"""
from __future__ import annotations

import math
from dataclasses import replace

import torch
from scipy.stats import chi2, gamma

from pazo.audit.canaries import PrivatizerHook, ScalarHook, nominal_noise_scale
from pazo.privacy.accountants import (BudgetError, amplified_pure_epsilon, default_eps_error,
                                      effective_noise_multiplier, gaussian_one_step_delta)
from pazo.privacy.mechanisms import JointClipPrivatizer, ScalarPrivatizer, VectorPrivatizer
from pazo.privacy.plan import PrivacyPlan, make_accountant


class _NoiseProbe(PrivatizerHook):
    """Stands in for a privatiser in the audit loop: the step runs on the real Poisson batch
    (`runs_batch`), every contribution is zero inside the release (`neutralises`), and each released
    value's noise in units of its claimed std (Laplace: scale) is collected."""

    passes = "the probe"
    runs_batch = True

    def __init__(self, inner):
        super().__init__(inner, neutralises=True)
        self.sum_squares = 0.0
        self.sum_abs = 0.0
        self.values = 0

    def _collect(self, noise_in_std_units: torch.Tensor) -> None:
        z = noise_in_std_units.double().reshape(-1)
        self.sum_squares += float(z @ z)
        self.sum_abs += float(z.abs().sum())
        self.values += z.numel()


class ScalarNoiseProbe(_NoiseProbe, ScalarHook):
    """A zeroth-order method's scalar release (`ScalarPrivatizer`, DP-AggZO's `JointClipPrivatizer`)
    given the step's rows with every value 0: the batch is the step's, each query's sum its noise."""

    def hooked(self, rows, release):
        out = release([[0.0] * len(row) for row in rows])
        self._collect(torch.tensor(out, dtype=torch.float64) * self.inner.spec.expected_batch_size
                      / nominal_noise_scale(self.inner))
        return out


class VectorNoiseProbe(_NoiseProbe):
    """DP-SGD's `VectorPrivatizer` given a zero sum: each coordinate of the release is its noise
    (and a method that draws the noise itself, `noise`, has each draw read)."""

    def __call__(self, clipped_sum: torch.Tensor, clip: float) -> torch.Tensor:
        out = self.inner(torch.zeros_like(clipped_sum), clip)
        self._collect(out.detach() * self.inner.spec.expected_batch_size / nominal_noise_scale(self.inner, clip))
        return out

    def noise(self, size: int, clip: float, like: torch.Tensor) -> torch.Tensor:
        draw = self.inner.noise(size, clip, like)
        self._collect(draw.detach() / nominal_noise_scale(self.inner, clip))
        return draw


def attach_noise_probe(method):
    """Put the probe between `method` and its privatiser (scalar, Gaussian or Laplace; joint clip;
    vector); returns it, or None where the method has no privatiser."""
    privatizer = getattr(method, "privatizer", None)
    if isinstance(privatizer, (ScalarPrivatizer, JointClipPrivatizer)):
        method.privatizer = ScalarNoiseProbe(privatizer)
    elif isinstance(privatizer, VectorPrivatizer):
        method.privatizer = VectorNoiseProbe(privatizer)
    else:
        return None
    return method.privatizer


def noise_check(statistic: float, values: int, plan: PrivacyPlan, steps: int, delta: float,
                confidence: float, comparable: float) -> dict:
    """The realised noise over the claimed (estimate and upper bound at `confidence`), from
    `statistic`: the sum of the squared values in std units (Gaussian: chi-square), or of their
    absolute values in scale units (Laplace: Gamma); and the epsilon the run's accountant gives at
    sigma times that bound (its lower estimate), at `delta`, compared with the run's epsilon at
    that delta (`comparable`)."""
    if plan.noise == "laplace":
        ratio, upper, test = statistic / values, statistic / gamma.ppf(1 - confidence, values), "gamma_mean_abs"
    else:
        ratio, upper = math.sqrt(statistic / values), math.sqrt(statistic / chi2.ppf(1 - confidence, values))
        test = "chi_square"
    at_upper, how = epsilon_at_least(plan, plan.sigma * upper, steps, delta)
    return {"released_values": values, "noise_ratio": ratio, "noise_ratio_upper": upper, "statistic": test,
            "sigma_claimed": plan.sigma, "sigma_upper": plan.sigma * upper,
            "epsilon_at_sigma_upper": at_upper, "epsilon_from": how, "exceeds_printed": at_upper > comparable,
            "confidence": confidence}


def probe_statistic(probe, plan: PrivacyPlan) -> float:
    """The probe's statistic that `noise_check` reads for the run's noise."""
    return probe.sum_abs if plan.noise == "laplace" else probe.sum_squares


def epsilon_at_least(plan: PrivacyPlan, sigma: float, steps: int, delta: float) -> tuple[float, str]:
    """A lower bound on the epsilon (at `delta`) of the run's T Poisson-subsampled Gaussian steps
    at noise multiplier `sigma`, and how it was found: the PRV accountant's lower estimate, or
    where its grid cannot be built (a sigma far below the claimed one) the exact epsilon of one such
    step, which T steps spend at least. Laplace noise: the run's own (exact, upper) account at
    `sigma` (`laplace_account`)."""
    if plan.noise == "laplace":
        try:
            return make_accountant(replace(plan, sigma=sigma, delta=delta)).epsilon(steps).upper, "laplace_account"
        except BudgetError:  # too many steps for the exact composition: the pure-DP account
            return steps * amplified_pure_epsilon(sigma, plan.sample_rate), "laplace_account"
    try:
        # PRV's lower estimate whatever privacy.accountant is (RDP gives no lower bound)
        prv = replace(plan, sigma=sigma, delta=delta, accountant_name="prv",
                      eps_error=plan.eps_error or default_eps_error(plan.target_epsilon))
        return make_accountant(prv).epsilon(steps).lower, "prv_lower"
    except (BudgetError, RuntimeError, FloatingPointError):
        pass
    s = effective_noise_multiplier(sigma, plan.mechanisms)
    low, high = 0.0, 1.0
    while gaussian_one_step_delta(s, plan.sample_rate, high) > delta and high < 1e6:
        low, high = high, 2 * high
    for _ in range(60):  # bisection: delta(epsilon) decreases in epsilon
        mid = (low + high) / 2
        low, high = (mid, high) if gaussian_one_step_delta(s, plan.sample_rate, mid) > delta else (low, mid)
    return low, "one_step_exact"
