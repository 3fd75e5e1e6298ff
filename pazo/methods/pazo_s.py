"""PAZO-S (Algorithm 3 of the PAZO paper): take the public-gradient step whose noisy private loss
is lowest, among k public gradients and optionally one perturbed copy of the best.

Each candidate's per-example losses at x - eta g_j are clipped to [-C, C], summed and noised with
sqrt(k + 1) C sigma (sqrt(k) without the noisy candidate), so a step is one Gaussian mechanism."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pazo.errors import ConfigError
from pazo.methods.base import (Method, MethodConfig, at_least_one, boolean_or_auto, host_stats, release_block,
                               releases_on_device)
from pazo.methods.registry import register_method
from pazo.privacy.mechanisms import LOCAL_SUMS, Release, ScalarPrivatizer, noise_generator
from pazo.zo.directions import FlatDirections, SeededDirections


@dataclass
class PazoSConfig(MethodConfig):
    k: int = 3                     # public candidates per step
    public_batch_size: int = 16    # b' per public gradient
    public_grads_together: Any = "auto"  # how the k public gradients are taken: true, in one pass (vmapped;
                                         # the LSTM's own) holding k batches' activations; false, one by one;
                                         # auto: FunctionalModel.grads_together_by_default (CUDA: together)
    perturbation: float = 1e-3     # epsilon of line 11: z' ~ N(0, epsilon^2 I_d)
    noisy_candidate: bool = True   # lines 11-14; false: only the k public candidates

    def __post_init__(self):
        super().__post_init__()
        at_least_one(self.k, "method.k")
        at_least_one(self.public_batch_size, "method.public_batch_size")
        boolean_or_auto(self.public_grads_together, "method.public_grads_together")
        if not (isinstance(self.perturbation, (int, float)) and self.perturbation >= 0):
            raise ConfigError(f"method.perturbation must be >= 0, got {self.perturbation!r}")

    def release(self) -> Release:
        return Release(queries=self.k + int(self.noisy_candidate))


@register_method("pazo_s", config=PazoSConfig, label="PAZO-S", family="zeroth_order", uses_public=True,
                 heat_map=("public_batch_size", "perturbation"),
                 reference="PAZO paper, Algorithm 3",
                 forwards=lambda cfg: cfg.k + int(cfg.noisy_candidate),   # one per candidate (+ the noisy step's)
                 public_passes=lambda cfg: cfg.k)
class PazoS(Method):
    cfg: PazoSConfig
    shards_batches = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.public = self.public_batches()
        self.privatizer = ScalarPrivatizer(ctx.noise, cfg.release().queries, noise_generator(ctx.streams), ctx.sums)
        self.on_device = releases_on_device(self.model, ctx.device) and ctx.sums is LOCAL_SUMS

    def describe(self) -> dict:
        return {**release_block(self.on_device), "public_grads": self.public_grads_choice()}

    def outcome(self, stat_sums, steps_done):
        """The share of steps the noisy candidate g_best + z' won, beside the engine's facts."""
        out = super().outcome(stat_sums, steps_done)
        if "noisy_candidate_won" in stat_sums and steps_done:
            out["noisy_candidate_win_rate"] = stat_sums["noisy_candidate_won"] / steps_done
        return out

    def noisy_losses(self, x, y, candidates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """f_j = (1/b)(sum_i clip_C(f(x - eta g_j; xi_i)) + N(0, (k+1) C^2 sigma^2)) for each row g_j
        of `candidates`, and the raw per-example losses [count, B]."""
        directions = FlatDirections(candidates, self.model.split_flat)
        points = [(j, -self.lr) for j in range(directions.count)]
        seed = self.ctx.streams.draw_seeds("directions", 1)[0] if self.ctx.query_train_mode else None
        losses = self.ctx.engine.losses(self.model, x, y, directions, points,
                                        train=self.ctx.query_train_mode, seed=seed)
        if self.on_device:
            return self.privatizer.release_tensor(losses.double()).to(losses.dtype), losses
        return self.privatizer(losses), losses

    def batch_mean(self, losses: torch.Tensor) -> torch.Tensor | float:
        """The batch's mean loss (a diagnostic): torch's on one process; over every rank's shard on
        several (exact float64 sums, `ctx.sums`), so that rank 0's rows cover the whole batch."""
        if self.ctx.sums is LOCAL_SUMS:
            return losses.mean() if losses.numel() else float("nan")
        count = self.ctx.sums.count(losses.numel())
        return self.ctx.sums.row_sums([losses.double().tolist()])[0] / count if count else float("nan")

    def batch_count(self, flags: torch.Tensor) -> torch.Tensor | int:
        """How many examples of the batch are flagged, over every rank's shard on several processes."""
        return flags.sum() if self.ctx.sums is LOCAL_SUMS else self.ctx.sums.count(int(flags.sum()))

    def perturbed(self, g: torch.Tensor) -> torch.Tensor:
        """Line 11: g + z', z' ~ N(0, epsilon^2 I_d) from the direction stream."""
        seed = self.ctx.streams.draw_seeds("directions", 1)
        z = SeededDirections(self.model.shapes, seed, device=g.device, dtype=g.dtype).vector(0)
        return g + self.cfg.perturbation * z

    def step(self, x, y, step):
        # line 3: x, y is the private Poisson batch B; line 4: k public gradients g_1..g_k
        g = self.public_grads(self.public, self.cfg.k)
        # lines 6-9: noisy private losses f_j at x - eta g_j
        f, losses = self.noisy_losses(x, y, g)
        nonfinite = ~torch.isfinite(losses).all(dim=0)   # examples that contribute zero (a private diagnostic)
        # line 10: the best public candidate (chosen on the device: nothing is read back during the step)
        best = torch.argmin(f).reshape(1)
        chosen, chosen_losses = g.index_select(0, best)[0], losses.index_select(0, best)[0]
        won = torch.zeros((), dtype=torch.bool, device=f.device)
        if self.cfg.noisy_candidate:
            # lines 11-13: g_{k+1} = g_best + z' and its noisy private loss f_{k+1}
            g_extra = self.perturbed(chosen)
            f_extra, extra_losses = self.noisy_losses(x, y, g_extra[None])
            nonfinite |= ~torch.isfinite(extra_losses).all(dim=0)
            # line 14: j* = argmin over all k + 1 (the public candidate on a tie)
            won = f_extra[0] < f.index_select(0, best)[0]
            chosen, chosen_losses = torch.where(won, g_extra, chosen), torch.where(won, extra_losses[0], chosen_losses)
        # line 15: x <- x - eta g_{j*}
        self.apply_update(chosen)
        stats = {"loss": self.batch_mean(chosen_losses), "noisy_candidate_won": won, "chosen_public_index": best[0],
                 "nonfinite_examples": self.batch_count(nonfinite) if self.ctx.noise.private else None}
        return stats if self.on_device else host_stats(stats, self.cfg.name)
