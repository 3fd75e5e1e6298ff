"""Zeroth-order baselines without public data: MeZO (non-private), DPZero, DP-ZO and the
hybrid-noise DP-ZOGD. Each is the two-point step of `two_point.py` with its own directions, clip
or noise."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from pazo.methods.base import one_of, positive, require
from pazo.methods.registry import register_method
from pazo.methods.two_point import RandomDirectionConfig, TwoPointMethod
from pazo.privacy.mechanisms import IsotropicNoise, Release, noise_generator


@register_method("mezo", config=RandomDirectionConfig, label="MeZO", family="zeroth_order", private=False,
                 reference="Malladi et al. 2023, Algorithm 1")
class MeZO(TwoPointMethod):
    """Non-private zeroth-order SGD: x <- x - lr * (1/q) sum_j g_j u_j, g_j the plain mean of the
    finite differences."""


@register_method("dpzero", config=RandomDirectionConfig, label="DPZero", family="zeroth_order",
                 reference="Zhang et al. 2023 (DPZero), Algorithm 1")
class DPZero(TwoPointMethod):
    """Private zeroth-order SGD with scalar noise: the two-point step as it stands."""


@dataclass
class DPZOConfig(RandomDirectionConfig):
    noise: str = "gaussian"   # gaussian | laplace (pure epsilon-DP with privacy.delta=0)

    def __post_init__(self):
        super().__post_init__()
        one_of(self.noise, ("gaussian", "laplace"), "method.noise")

    def release(self) -> Release:
        return Release(queries=self.q, noise=self.noise)


@register_method("dp_zo", config=DPZOConfig, label="DP-ZO", family="zeroth_order",
                 reference="Tang et al. 2024 (DP-ZO), Algorithm 1")
class DPZO(TwoPointMethod):
    """DP-ZO: the raw loss difference l+ - l- is clipped to C and the noisy sum divided by 2 lam b;
    Gaussian or Laplace noise (`noise`).

    (sum_i clip_C(l+ - l-) + noise(C)) / (2 lam b) = (sum_i clip_{C/2lam}((l+ - l-)/2lam) +
    noise(C/2lam)) / b, which is DPZero with clip C/(2 lam): one implementation serves both names
    (a test shows the updates coincide)."""

    def noise_spec(self, spec):
        return replace(spec, clip=spec.clip / (2 * self.cfg.smoothing))


@dataclass
class HybridZOGDConfig(RandomDirectionConfig):
    q: int = 4                      # K directions per step
    direction: str = "orthogonal"   # K = q orthonormal directions ...
    radius: str = "1.0"             # ... of unit norm, as in the paper's update rule
    beta: float = 0.9               # share of the noise variance along the directions (1 = directional only)
    projection_radius: float | None = None  # project onto the ball of this radius after each step

    DEFINING = ("direction", "radius")

    def __post_init__(self):
        super().__post_init__()
        require(isinstance(self.beta, (int, float)) and 0 < self.beta <= 1,
                f"method.beta must be in (0, 1] (beta = 0 has no composition guarantee), got {self.beta!r}")
        if self.projection_radius is not None:
            positive(self.projection_radius, "method.projection_radius")


@register_method("dp_zogd", config=HybridZOGDConfig, label="DP-ZOGD", family="zeroth_order",
                 reference="hidden-state DP-ZOGD paper, noisy ZOGD with hybrid noise",
                 privacy_note="dp_zogd: epsilon is the standard-composition bound over the released "
                              "directional scalars (the isotropic noise is not counted); the paper's "
                              "hidden-state bound is known only up to constants and is not computed")
class HybridZOGD(TwoPointMethod):
    """Noisy ZOGD with K orthogonal directions and hybrid noise:

        w <- Pi_R[w - lr/K sum_k (g_k + sqrt(K) G1_k) u_k - lr/sqrt(d) G2],
        G1_k ~ N(0, beta s^2), G2 ~ N(0, (1 - beta) s^2 I_d),

    with unit directions u_k (K = q, orthonormal). The directional scalars carry the privacy: their
    noise is that of DPZero with q = K queries (noise multiplier sigma from the accountant), which
    fixes s = S sigma / (b sqrt(beta)); the isotropic part only adds noise and is not counted.
    beta = 1 is DPZero with orthogonal unit directions.
    """

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.isotropic = IsotropicNoise(ctx.noise, cfg.beta, noise_generator(ctx.streams, ctx.device, substream=1))

    def step(self, x, y, step):
        stats = super().step(x, y, step)                                  # directional part, with G1
        self.isotropic.add_to(self.model.params, self.lr, self.model.dim)  # - lr/sqrt(d) G2
        radius = self.cfg.projection_radius
        if radius is not None:                                            # Pi_R
            with torch.no_grad():
                norm = self.model.flat_params().norm().item()
                if norm > radius:
                    for p in self.model.params:
                        p.mul_(radius / norm)
            stats["param_norm"] = min(norm, float(radius))
        return stats
