"""PAZO-P (Algorithm 2 of the PAZO paper): two-point queries along directions G u in the span of k
public gradients, i.e. zeroth-order learning of the k coefficients that combine them. PAZO-P'
normalises the public gradients instead of orthonormalising them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pazo.methods.base import at_least_one, boolean_or_auto, one_of
from pazo.methods.registry import register_method
from pazo.methods.two_point import TwoPointMethod, ZerothOrderConfig
from pazo.zo.bases import normalized_rows, orthonormal_basis
from pazo.zo.directions import SubspaceDirections, sample_coefficients


@dataclass
class PazoPConfig(ZerothOrderConfig):
    k: int = 3                             # public batches (gradients) per step
    public_batch_size: int = 16            # b' per public gradient
    public_grads_together: Any = "auto"    # how the k public gradients are taken: true, in one pass (vmapped;
                                           # the LSTM's own) holding k batches' activations; false, one by one;
                                           # auto: FunctionalModel.grads_together_by_default (CUDA: together)
    coef_distribution: str = "sphere"      # line 7: u uniform on the sphere of radius sqrt(k) | gaussian

    DEFINING = ("coef_distribution",)

    def __post_init__(self):
        super().__post_init__()
        at_least_one(self.k, "method.k")
        at_least_one(self.public_batch_size, "method.public_batch_size")
        boolean_or_auto(self.public_grads_together, "method.public_grads_together")
        one_of(self.coef_distribution, ("gaussian", "sphere"), "method.coef_distribution")


@register_method("pazo_p", config=PazoPConfig, label="PAZO-P", family="zeroth_order", uses_public=True,
                 heat_map=("public_batch_size", "k"),
                 reference="PAZO paper, Algorithm 2 (orthonormalised G)",
                 public_passes=lambda cfg: cfg.k)   # k public gradients span the subspace
class PazoP(TwoPointMethod):
    cfg: PazoPConfig
    orthonormalize = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.public = self.public_batches()
        self.coef_gen = ctx.streams.torch_generator("directions")

    def describe(self) -> dict:
        return {**super().describe(), "public_grads": self.public_grads_choice()}

    def public_basis(self) -> torch.Tensor:
        """Line 4-5: G, the k public gradients (ortho)normalised, as rows [rank, d]; gradients
        that add nothing (zero, or dependent) are dropped."""
        grads = self.public_grads(self.public, self.cfg.k)
        return orthonormal_basis(grads) if self.orthonormalize else normalized_rows(grads)

    def step(self, x, y, step):
        # line 3: x, y is the private Poisson batch B; lines 4-5: G from k public batches
        G = self.public_basis()
        rank = G.shape[0]
        if rank == 0:  # every public gradient was zero: there is no direction to query
            return {"loss": float("nan"), "subspace_rank": 0.0}
        # lines 6-7: q coefficient vectors u_j on the sphere of radius sqrt(k); directions G u_j
        u = SubspaceDirections(G, sample_coefficients(self.cfg.q, rank, self.cfg.coef_distribution, self.coef_gen),
                               self.model.split_flat)
        # lines 8-11: s_j = (1/b)(sum_i clip_C((f(x + lam G u_j) - f(x - lam G u_j)) / 2 lam) + N(0, q C^2 sigma^2))
        estimate = self.noisy_directional_derivatives(x, y, u)
        # line 13: x <- x - eta g~/q, g~ = sum_j s_j G u_j
        self.descend(u, estimate.mean_coefficients())
        return {**estimate.stats(), "subspace_rank": float(rank)}


@register_method("pazo_p_prime", config=PazoPConfig, label="PAZO-P'", family="zeroth_order", uses_public=True,
                 reference="PAZO paper, Algorithm 2 with normalised (not orthonormalised) G",
                 public_passes=lambda cfg: cfg.k)
class PazoPNormalized(PazoP):
    orthonormalize = False
