"""PAZO-S (Algorithm 3): choose, by noisy private loss, the best of k public-gradient steps and
optionally one perturbed copy of the winner.

Each candidate's per-example losses at x - lr g_j are clipped to [-C, C], summed and noised with
sqrt(k + 1) C sigma (sqrt(k) without the noisy candidate), so a step is one Gaussian mechanism.
"""
from __future__ import annotations

import torch

from pazo.methods.base import Method, Release
from pazo.methods.directions import FlatDirections, SeededDirections
from pazo.methods.engines import apply_flat_update
from pazo.privacy.mechanisms import ScalarPrivatizer


class PazoS(Method):
    uses_public = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.k = int(cfg.k)
        self.noisy_candidate = bool(cfg.noisy_candidate)
        self.perturbation = float(cfg.perturbation)
        self.public = self.public_batches()
        self.privatizer = ScalarPrivatizer(ctx.noise, self.release.queries,
                                           ctx.streams.torch_generator("noise"))

    @classmethod
    def release_for(cls, cfg) -> Release:
        return Release(queries=int(cfg.k) + int(bool(cfg.noisy_candidate)))

    def _noisy_losses(self, x, y, grads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Privatised mean loss at x - lr * g for each row g of grads, and the raw losses."""
        directions = FlatDirections(grads, self.model.split_flat)
        points = [(j, -self.lr) for j in range(directions.count)]
        seed = self.ctx.streams.draw_seeds("directions", 1)[0] if self.ctx.query_train_mode else None
        losses = self.ctx.engine.losses(self.model, x, y, directions, points,
                                        train=self.ctx.query_train_mode, seed=seed)  # [k, B]
        return self.privatizer(losses), losses

    def step(self, x, y, step):
        grads = torch.stack([self.model.mean_loss_grad(*self.public.sample()) for _ in range(self.k)])
        scores, losses = self._noisy_losses(x, y, grads)
        best = int(torch.argmin(scores))
        chosen, won = grads[best], 0.0
        chosen_losses = losses[best]
        if self.noisy_candidate:
            seed = self.ctx.streams.draw_seeds("directions", 1)
            z = SeededDirections(self.model.shapes, seed, device=self.ctx.device,
                                 dtype=grads.dtype).tensors(0)
            candidate = chosen + self.perturbation * torch.cat([t.reshape(-1) for t in z])
            score, cand_losses = self._noisy_losses(x, y, candidate[None])
            if float(score[0]) < float(scores[best]):
                chosen, won, chosen_losses = candidate, 1.0, cand_losses[0]
        apply_flat_update(self.model, chosen, self.lr)
        loss = float(chosen_losses.mean()) if chosen_losses.numel() else float("nan")
        return {"loss": loss, "noisy_candidate_won": won, "chosen_public_index": float(best)}
