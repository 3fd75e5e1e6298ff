"""Two-point zeroth-order methods: MeZO (non-private), DPZero and PAZO-M/P/P' share one step.

Per step (Algorithms 1-2 of the PAZO paper): q directions u_j; for each, per-example finite
differences (f(x + lam u_j) - f(x - lam u_j)) / (2 lam), clipped to C, summed, noised with
sqrt(q) C sigma, divided by the expected batch size; the update is x -= lr * (1/q) sum_j s_j u_j,
mixed with a public gradient for PAZO-M. Subclasses only choose the directions and the mix.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from pazo.methods.base import Method, MethodContext, Release
from pazo.methods.directions import (SeededDirections, SubspaceDirections, normalized_rows,
                                     orthogonal_directions, orthonormal_basis, resolve_radius,
                                     sample_coefficients)
from pazo.methods.engines import apply_directional_update, apply_flat_update
from pazo.privacy.mechanisms import ScalarPrivatizer


class TwoPointMethod(Method):
    def __init__(self, cfg, ctx: MethodContext):
        super().__init__(cfg, ctx)
        self.q, self.smoothing = int(cfg.q), float(cfg.smoothing)
        self.privatizer = ScalarPrivatizer(self.noise_spec(ctx.noise), self.q,
                                           ctx.streams.torch_generator("noise"))

    def noise_spec(self, spec):
        """The noise specification the privatiser uses (DP-ZO rescales the clip)."""
        return spec

    @classmethod
    def release_for(cls, cfg) -> Release:
        return Release(queries=int(cfg.q))

    def directions(self, step: int):
        """Direction set for this step (q directions)."""
        seeds = self.ctx.streams.draw_seeds("directions", self.q)
        dist = self.cfg.direction
        if dist == "orthogonal":
            return orthogonal_directions(self.model.dim, seeds[0], self.q,
                                         resolve_radius(self.cfg.radius, self.model.dim),
                                         self.model.split_flat, self.ctx.device, self.model.params[0].dtype)
        radius = resolve_radius(self.cfg.radius, self.model.dim) if dist == "sphere" else None
        return SeededDirections(self.model.shapes, seeds, dist, radius,
                                device=self.ctx.device, dtype=self.model.params[0].dtype)

    def finish(self, directions, coefs: list[float], stats: dict) -> None:
        apply_directional_update(self.model, directions, coefs, self.lr)

    def step(self, x, y, step):
        directions = self.directions(step)
        stats: dict[str, float] = {}
        if directions.count == 0:  # PAZO-P whose public gradients were all zero: nothing to query
            self.finish(directions, [], stats)
            return {"loss": float("nan"), **stats}
        lam = self.smoothing
        points = [(j, s) for j in range(directions.count) for s in (lam, -lam)]
        seed = self.ctx.streams.draw_seeds("directions", 1)[0] if self.ctx.query_train_mode else None
        losses = self.ctx.engine.losses(self.model, x, y, directions, points,
                                        train=self.ctx.query_train_mode, seed=seed)
        diffs = (losses[0::2] - losses[1::2]) / (2 * lam)  # [q, B]
        scalars = self.privatizer(diffs)  # [q]
        coefs = (scalars / directions.count).tolist()
        self.finish(directions, coefs, stats)
        loss = float(losses.mean()) if losses.numel() else float("nan")
        return {"loss": loss, "projected_grad": float(scalars.abs().mean()), **stats}


class MeZO(TwoPointMethod):
    """Non-private zeroth-order SGD (Malladi et al. 2023)."""

    supports_privacy = False


class DPZero(TwoPointMethod):
    """Private zeroth-order SGD with scalar noise (Zhang et al. 2023)."""


class DPZO(TwoPointMethod):
    """DP-ZO (Tang et al. 2024, Algorithm 1): the raw loss difference l+ - l- is clipped to C and
    the noisy sum divided by 2 lam b; Gaussian or Laplace noise (`noise`).

    (sum_i clip_C(l+ - l-) + noise(C)) / (2 lam b) = (sum_i clip_{C/2lam}((l+ - l-)/2lam) +
    noise(C/2lam)) / b, which is DPZero with clip C/(2 lam): one implementation serves both names
    (a test shows the updates coincide)."""

    @classmethod
    def release_for(cls, cfg) -> Release:
        return Release(queries=int(cfg.q), noise=str(cfg.noise))

    def noise_spec(self, spec):
        return replace(spec, clip=spec.clip / (2 * self.smoothing))


class PazoM(TwoPointMethod):
    """Algorithm 1: x -= lr * (alpha g_pub + (1 - alpha) g_zo), u on the sphere of radius d^(1/4)."""

    uses_public = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.alpha = float(cfg.alpha)
        self.public = self.public_batches()

    def finish(self, directions, coefs, stats):
        # g_pub is taken at x_t, before any part of the update (Algorithm 1, line 4)
        g_pub = self.model.mean_loss_grad(*self.public.sample()) if self.alpha > 0 else None
        apply_directional_update(self.model, directions, [(1 - self.alpha) * c for c in coefs], self.lr)
        if g_pub is not None:
            apply_flat_update(self.model, self.alpha * g_pub, self.lr)
            stats["public_grad_norm"] = float(g_pub.norm())


class PazoP(TwoPointMethod):
    """Algorithm 2: directions G u in the span of k public gradients (orthonormalised with QR;
    PAZO-P' only normalises them), u uniform on the sphere of radius sqrt(k)."""

    uses_public = True
    orthonormalize = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.k = int(cfg.k)
        self.public = self.public_batches()
        self.coef_gen = ctx.streams.torch_generator("directions")

    def directions(self, step):
        grads = torch.stack([self.model.mean_loss_grad(*self.public.sample()) for _ in range(self.k)])
        basis = orthonormal_basis(grads) if self.orthonormalize else normalized_rows(grads)
        self.rank = basis.shape[0]
        if self.rank == 0:
            return SubspaceDirections(basis, torch.zeros(0, 0), self.model.split_flat)
        coeffs = sample_coefficients(self.q, self.rank, self.cfg.coef_distribution, self.coef_gen)
        return SubspaceDirections(basis, coeffs, self.model.split_flat)

    def finish(self, directions, coefs, stats):
        super().finish(directions, coefs, stats)
        stats["subspace_rank"] = float(self.rank)


class PazoPNormalized(PazoP):
    """PAZO-P': the public gradients are normalised but not orthonormalised."""

    orthonormalize = False


class HybridZOGD(TwoPointMethod):
    """Noisy ZOGD with K orthogonal directions and hybrid noise (the hidden-state DP-ZOGD paper):

        w <- Pi_R[w - lr/K sum_k (g_k + sqrt(K) G1_k) u_k - lr/sqrt(d) G2],
        G1_k ~ N(0, beta s^2), G2 ~ N(0, (1 - beta) s^2 I_d),

    with unit directions u_k (K = q, orthonormal). The directional scalars carry the privacy: their
    noise is that of DPZero with q = K queries (noise multiplier sigma from the accountant), which
    fixes s = S sigma / (b sqrt(beta)); the isotropic part only adds noise and is not counted.
    beta = 1 is DPZero with orthogonal unit directions.
    """

    privacy_note = ("dp_zogd: epsilon is the standard-composition bound over the released directional "
                    "scalars (the isotropic noise is not counted); the paper's hidden-state bound is "
                    "known only up to constants and is not computed")

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.beta = float(cfg.beta)
        self.radius = cfg.get("projection_radius")
        self.iso_gen = ctx.streams.torch_generator("noise", ctx.device, substream=1)

    def finish(self, directions, coefs, stats):
        super().finish(directions, coefs, stats)
        spec = self.ctx.noise
        if spec.private and self.beta < 1:
            s = spec.sensitivity * spec.sigma / (spec.expected_batch_size * self.beta ** 0.5)
            std = self.lr * (1 - self.beta) ** 0.5 * s / self.model.dim ** 0.5
            with torch.no_grad():
                for p in self.model.params:
                    p.add_(torch.randn(p.shape, generator=self.iso_gen, device=p.device, dtype=p.dtype), alpha=std)
        if self.radius is not None:
            with torch.no_grad():
                norm = self.model.flat_params().norm().item()
                if norm > self.radius:
                    for p in self.model.params:
                        p.mul_(self.radius / norm)
            stats["param_norm"] = min(norm, float(self.radius))
