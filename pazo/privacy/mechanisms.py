"""The Gaussian mechanism on clipped per-example scalars, as every zeroth-order method uses it.

Each query of a step is a vector of per-example scalars (a finite difference, or a loss). It is
clipped to [-C, C] per example, summed, noised with N(0, (sqrt(queries) * S * sigma)^2) where S is
the sensitivity of the sum (C under add/remove adjacency, 2C under replace-one), and divided by the
*expected* batch size b (the realised size of a Poisson batch is itself private). With `queries`
noisy sums of one batch, the step as a whole is one Gaussian mechanism with multiplier sigma.
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

    @property
    def private(self) -> bool:
        return self.sigma is not None

    @property
    def sensitivity(self) -> float:
        return (2.0 if self.adjacency == "replace_one" else 1.0) * self.clip


class ScalarPrivatizer:
    """Clip, sum, add Gaussian noise and normalise rows of per-example scalars."""

    def __init__(self, spec: NoiseSpec, queries: int, generator: torch.Generator | None):
        if queries < 1:
            raise ValueError("queries must be >= 1")
        self.spec, self.queries, self.generator = spec, queries, generator

    @property
    def noise_std(self) -> float:
        """Std of the noise on each *sum* (before dividing by b)."""
        if not self.spec.private:
            return 0.0
        return math.sqrt(self.queries) * self.spec.sensitivity * self.spec.sigma

    def clip(self, values: torch.Tensor) -> torch.Tensor:
        return values.clamp(-self.spec.clip, self.spec.clip)

    def __call__(self, values: torch.Tensor) -> torch.Tensor:
        """values: [Q, B] per-example scalars -> [Q] privatised means."""
        if not self.spec.private:  # non-private: plain mean over the realised batch
            return values.mean(dim=1) if values.shape[1] else values.new_zeros(values.shape[0])
        sums = self.clip(values).sum(dim=1)
        noise = torch.randn(sums.shape, generator=self.generator, device="cpu", dtype=torch.float64)
        noisy = sums.double().cpu() + self.noise_std * noise
        return (noisy / self.spec.expected_batch_size).to(device=values.device, dtype=values.dtype)
