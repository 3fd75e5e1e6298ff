"""Noise on clipped per-example scalars, as every zeroth-order method uses it.

Each query of a step is a vector of per-example scalars (a finite difference, or a loss). It is
clipped to [-C, C] per example, summed, noised and divided by the *expected* batch size b (the
realised size of a Poisson batch is itself private). S is the sensitivity of the sum (C under
add/remove adjacency, 2C under replace-one).

* Gaussian: N(0, (sqrt(queries) S sigma)^2) per query; the `queries` noisy sums of one batch are
  together one Gaussian mechanism with multiplier sigma.
* Laplace: Laplace(0, queries S sigma) per query; by basic composition the step is (1/sigma)-DP
  on the batch (for Laplace noise the scale grows with the number of queries, not its root).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class NoiseSpec:
    """What the privatiser needs to know; `sigma=None` means a non-private run."""

    sigma: float | None
    clip: float
    expected_batch_size: int
    adjacency: str = "add_remove"  # or "replace_one" (sensitivity 2C, the original DPZero code)
    mechanism: str = "gaussian"    # or "laplace"

    @property
    def private(self) -> bool:
        return self.sigma is not None

    def sensitivity_for(self, clip: float) -> float:
        """Sensitivity of a sum of values clipped to `clip` under this adjacency."""
        return (2.0 if self.adjacency == "replace_one" else 1.0) * clip

    @property
    def sensitivity(self) -> float:
        return self.sensitivity_for(self.clip)


class ScalarPrivatizer:
    """Clip, sum, add Gaussian noise and normalise rows of per-example scalars."""

    def __init__(self, spec: NoiseSpec, queries: int, generator: torch.Generator | None):
        if queries < 1:
            raise ValueError("queries must be >= 1")
        self.spec, self.queries, self.generator = spec, queries, generator

    @property
    def noise_scale(self) -> float:
        """Gaussian std, or Laplace scale, of the noise on each *sum* (before dividing by b)."""
        if not self.spec.private:
            return 0.0
        releases = self.queries if self.spec.mechanism == "laplace" else math.sqrt(self.queries)
        return releases * self.spec.sensitivity * self.spec.sigma

    def _noise(self, shape) -> torch.Tensor:
        if self.spec.mechanism == "laplace":  # inverse CDF, so that our seeded generator drives it
            u = torch.rand(shape, generator=self.generator, dtype=torch.float64) - 0.5
            return -self.noise_scale * torch.sign(u) * torch.log1p(-2 * u.abs())
        return self.noise_scale * torch.randn(shape, generator=self.generator, dtype=torch.float64)

    def clip(self, values: torch.Tensor) -> torch.Tensor:
        return values.clamp(-self.spec.clip, self.spec.clip)

    def __call__(self, values: torch.Tensor) -> torch.Tensor:
        """values: [Q, B] per-example scalars -> [Q] privatised means."""
        if not self.spec.private:  # non-private: plain mean over the realised batch
            return values.mean(dim=1) if values.shape[1] else values.new_zeros(values.shape[0])
        sums = self.clip(values).sum(dim=1)
        noisy = sums.double().cpu() + self._noise(sums.shape)
        return (noisy / self.spec.expected_batch_size).to(device=values.device, dtype=values.dtype)
