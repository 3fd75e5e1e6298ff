"""PAZO-M (Algorithm 1 of the PAZO paper): mix one public gradient with the private two-point
estimate, x <- x - eta (alpha g_pub + (1 - alpha) g~/q)."""
from __future__ import annotations

from dataclasses import dataclass

from pazo.errors import ConfigError
from pazo.methods.base import at_least_one
from pazo.methods.registry import register_method
from pazo.methods.two_point import RandomDirectionConfig, TwoPointMethod


@dataclass
class PazoMConfig(RandomDirectionConfig):
    direction: str = "sphere"          # line 7: u uniform on the sphere ...
    radius: str = "fourth_root_d"      # ... of radius d^(1/4), aligning |g~/q| with |grad f| (appendix A.1)
    alpha: float = 0.5                 # weight of the public gradient
    public_batch_size: int = 32        # b'

    DEFINING = ("direction", "radius")

    def __post_init__(self):
        super().__post_init__()
        if not (isinstance(self.alpha, (int, float)) and 0 <= self.alpha <= 1):
            raise ConfigError(f"method.alpha must be in [0, 1], got {self.alpha!r}")
        at_least_one(self.public_batch_size, "method.public_batch_size")


@register_method("pazo_m", config=PazoMConfig, label="PAZO-M", family="zeroth_order", uses_public=True,
                 heat_map=("public_batch_size", "alpha"),
                 reference="PAZO paper, Algorithm 1",
                 public_passes=lambda cfg: int(cfg.alpha > 0))   # one public gradient, unless alpha = 0
class PazoM(TwoPointMethod):
    cfg: PazoMConfig

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.public = self.public_batches()

    def step(self, x, y, step):
        alpha = self.cfg.alpha
        # line 3: x, y is the private Poisson batch B
        # line 4: a public batch B' and its gradient g_pub, taken at x_t (before any of the update)
        g_pub = self.model.mean_loss_grad(*self.public.sample()) if alpha > 0 else None
        # lines 5-7: q directions u_j on the sphere of radius d^(1/4)
        u = self.random_directions()
        # lines 8-11: s_j = (1/b)(sum_i clip_C((f+ - f-) / 2 lam) + N(0, q C^2 sigma^2)); g~ = sum_j s_j u_j
        estimate = self.noisy_directional_derivatives(x, y, u)
        # line 13: x <- x - eta ((1 - alpha) g~/q + alpha g_pub)
        coefs = estimate.mean_coefficients()
        if alpha < 1:   # alpha = 1: the public gradient alone (a device step cannot skip zero coefficients)
            self.descend(u, coefs.double() * (1 - alpha) if self.on_device else [(1 - alpha) * c for c in coefs])
        stats = estimate.stats()
        if g_pub is not None:
            self.apply_update(g_pub, alpha)   # alpha in the step size: no scaled copy
            norm = g_pub.norm()
            stats["public_grad_norm"] = norm if self.on_device else float(norm)
        return stats
