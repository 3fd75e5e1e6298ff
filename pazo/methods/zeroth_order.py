"""Zeroth-order baselines without public data: MeZO (non-private), DPZero, DP-ZO, the
hybrid-noise DP-ZOGD and DP-AggZO. Each is the two-point step of `two_point.py` with its own
directions, clip or noise."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from pazo.methods.base import one_of, positive, require
from pazo.methods.registry import register_method
from pazo.methods.two_point import RandomDirectionConfig, TwoPointMethod
from pazo.privacy.mechanisms import IsotropicNoise, JointClipPrivatizer, NoiseSpec, Release, noise_generator


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
        self.add_isotropic_noise()                                        # - lr/sqrt(d) G2
        radius = self.cfg.projection_radius
        if radius is not None:                                            # Pi_R, after the whole update
            self.apply_pending_update()
            stats["param_norm"] = self.project(float(radius))
        return stats

    def add_isotropic_noise(self) -> None:
        """The update's part lr/sqrt(d) G2: into the parameters under SGD, else into the step's
        pending update (x <- x - lr u: the same noise, scaled by -1 so that lr times it is added)."""
        parts = self.update_rule.pending_parts(self.model)
        if parts is None:
            self.isotropic.add_to(self.model.params, self.lr, self.model.dim)
        else:
            self.isotropic.add_to(parts, -1.0, self.model.dim)

    @torch.no_grad()
    def project(self, radius: float) -> float | torch.Tensor:
        """Pi_R: the parameters scaled onto the ball of radius R if outside it; their norm after
        (on the device, without reading it, where the step stays there)."""
        norm = self.model.flat_params().norm()
        if self.on_device:   # in float64, as the host's Python floats
            norm = norm.double()
            torch._foreach_mul_(self.model.params, torch.where(norm > radius, radius / norm, 1.0))
            return norm.clamp(max=radius)
        norm = norm.item()
        if norm > radius:
            for p in self.model.params:
                p.mul_(radius / norm)
        return min(norm, radius)


@dataclass
class DPAggZOConfig(RandomDirectionConfig):
    q: int = 16   # K directions per step, the same for the whole batch

    ALIASES = {"k": "q", "K": "q"}   # the paper's symbol, for the message on a mistyped key
    DEFINING = ("direction",)   # Gaussian directions N(0, I_d), as in the authors' code

    def release(self) -> Release:
        return Release(queries=self.q, joint_clip=True)

    def departures(self) -> list[str]:
        """Beyond its defining fields, where this run differs from the authors' code (which a
        comparison with their numbers needs to know)."""
        return [*super().departures(),
                "dp_aggzo: the sums are divided by the expected batch size b = q n with n public (the authors' "
                "code spends 5% of epsilon on a Laplace-noised n and divides by it), and sigma is calibrated by "
                "this run's accountant for the whole epsilon (theirs: Opacus' RDP accountant for 95% of it)",
                "dp_aggzo: no forward of the private batch after the update (the authors' code takes one to log "
                "the training loss, outside its accounting) and no weight decay (their default is 0)"]


@register_method("dp_aggzo", config=DPAggZOConfig, label="DP-AggZO", family="zeroth_order",
                 reference="Bao et al. 2025 (DP-AggZO, USENIX Security), Algorithm 1",
                 privacy_note="dp_aggzo: each example's K directional derivatives (divided by K) are clipped "
                              "together to L2 norm C; the K noisy sums are one Gaussian mechanism of "
                              "sensitivity C, noise C sigma on each",
                 release="joint_scalar")
class DPAggZO(TwoPointMethod):
    """DP-AggZO: K directions u_1..u_K ~ N(0, I_d), shared by the batch; for each example i its
    K finite differences, divided by K, form one vector

        v_i = (1/K) [(f(x + lam u_k; xi_i) - f(x - lam u_k; xi_i)) / 2 lam]_{k=1..K},

    clipped to L2 norm C; then s = (sum_i clip_C(v_i) + N(0, C^2 sigma^2 I_K)) / b and
    x <- x - lr * sum_k s_k u_k. With K = 1 it is DPZero, step for step (a test checks it)."""

    cfg: DPAggZOConfig

    def make_privatizer(self, spec: NoiseSpec, generator: torch.Generator) -> JointClipPrivatizer:
        return JointClipPrivatizer(spec, generator, self.ctx.sums)

    def privatize(self, finite_differences: list[list[float]] | torch.Tensor) -> list[float] | torch.Tensor:
        """s = (sum_i clip_C(v_i) + N(0, C^2 sigma^2 I_K)) / b, v_i example i's K finite differences / K."""
        k = self.cfg.q
        if isinstance(finite_differences, torch.Tensor):
            return super().privatize(finite_differences / k)
        return super().privatize([[g / k for g in row] for row in finite_differences])

    def step(self, x, y, step):
        """x <- x - lr * sum_k s_k u_k (the 1/K is inside each example's vector)."""
        u = self.random_directions()
        estimate = self.noisy_directional_derivatives(x, y, u)
        self.descend(u, estimate.s)
        return estimate.stats()
