"""The private two-point estimate every zeroth-order method here is built on (lines 6-12 of the
PAZO paper's Algorithms 1 and 2, and DPZero's step):

    for each of q directions u_j:   s_j = (1/b) (sum_i clip_C((f(x + lam u_j; xi_i) - f(x - lam u_j; xi_i)) / 2 lam)
                                               + N(0, q C^2 sigma^2))

b is the expected batch size (the realised size of a Poisson batch is itself private). The q noisy
sums of one batch are one Gaussian mechanism with multiplier sigma. Methods differ in where the
directions come from and in what they do with the s_j.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from pazo.methods.base import (Method, MethodConfig, at_least_one, one_of, positive, release_block, releases_on_device,
                               require)
from pazo.privacy.mechanisms import (LOCAL_SUMS, LocalSums, NoiseSpec, Release, ScalarPrivatizer, ScalarRelease,
                                     noise_generator, nonfinite_examples, rounded_to)
from pazo.zo.directions import Directions, SeededDirections, orthogonal_directions, resolve_radius

DIRECTIONS = ("gaussian", "sphere", "orthogonal")
RADII = ("sqrt_d", "fourth_root_d")


@dataclass
class ZerothOrderConfig(MethodConfig):
    q: int = 1                 # queries (directions) per step
    smoothing: float = 1e-2    # lam

    def __post_init__(self):
        super().__post_init__()
        at_least_one(self.q, "method.q")
        positive(self.smoothing, "method.smoothing")

    def release(self) -> Release:
        return Release(queries=self.q)


@dataclass
class RandomDirectionConfig(ZerothOrderConfig):
    direction: str = "gaussian"   # gaussian N(0, I) | sphere (of `radius`) | orthogonal (Stiefel block)
    radius: str = "sqrt_d"        # sphere/orthogonal radius: sqrt_d | fourth_root_d | a number

    def __post_init__(self):
        super().__post_init__()
        one_of(self.direction, DIRECTIONS, "method.direction")
        if self.direction != "gaussian" and self.radius not in RADII:
            try:
                value = float(self.radius)
            except (TypeError, ValueError):
                value = float("nan")
            require(value > 0, f"method.radius must be sqrt_d, fourth_root_d or a positive number, "
                               f"got {self.radius!r}")


class TwoPointMethod(Method):
    """Shared machinery: the scalar privatiser, random directions and the noisy estimates."""

    cfg: ZerothOrderConfig
    shards_batches = True

    def __init__(self, cfg: ZerothOrderConfig, ctx):
        super().__init__(cfg, ctx)
        dim = self.model.dim   # orthogonal directions: q of them must fit in the model's dimension
        require(getattr(cfg, "direction", None) != "orthogonal" or cfg.q <= dim,
                f"method.q={cfg.q} orthogonal directions do not fit in the model's {dim} parameters: use q <= {dim}")
        self.privatizer = self.make_privatizer(self.noise_spec(ctx.noise), noise_generator(ctx.streams))
        # (several processes add their shards' sums on the host: the device release is one process's)
        self.on_device = releases_on_device(self.model, ctx.device) and ctx.sums is LOCAL_SUMS

    def describe(self) -> dict:
        """Where the release is computed: `device` (on CUDA, nothing read back during the
        step: `releases_on_device`) or `host` (Python floats)."""
        return release_block(self.on_device)

    def make_privatizer(self, spec: NoiseSpec, generator: torch.Generator) -> ScalarRelease:
        """The release of a step's rows of per-example scalars: each clipped alone, the noise split
        over the q rows (DP-AggZO clips each example's q values together)."""
        return ScalarPrivatizer(spec, self.cfg.q, generator, self.ctx.sums)

    def privatize(self, finite_differences: list[list[float]] | torch.Tensor) -> list[float] | torch.Tensor:
        """The q noisy s_j from the per-example finite differences (rows: directions), as Python
        floats, or from a float64 tensor as one on its device."""
        if isinstance(finite_differences, torch.Tensor):
            return self.privatizer.release_tensor(finite_differences)
        return self.privatizer.release(finite_differences)

    def noise_spec(self, spec: NoiseSpec) -> NoiseSpec:
        """The noise specification of the scalars (DP-ZO rescales the clip)."""
        return spec

    def random_directions(self) -> Directions:
        """q directions of the configured distribution, each regenerated from its own seed."""
        cfg, model = self.cfg, self.model
        seeds = self.ctx.streams.draw_seeds("directions", cfg.q)
        dtype = model.params[0].dtype
        if cfg.direction == "orthogonal":
            return orthogonal_directions(model.dim, seeds[0], cfg.q, resolve_radius(cfg.radius, model.dim),
                                         model.split_flat, self.ctx.device, dtype)
        radius = resolve_radius(cfg.radius, model.dim) if cfg.direction == "sphere" else None
        return SeededDirections(model.shapes, seeds, cfg.direction, radius, device=self.ctx.device, dtype=dtype,
                                norm_on_device=self.on_device)

    def noisy_directional_derivatives(self, x, y, u: Directions) -> Estimate | DeviceEstimate:
        """The privatised s_j for each direction u_j, the per-example losses they came from, and in
        a private run how many examples had a non-finite finite difference (they contribute zero)."""
        lam = self.cfg.smoothing
        points = [(j, s) for j in range(u.count) for s in (lam, -lam)]
        seed = self.ctx.streams.draw_seeds("directions", 1)[0] if self.ctx.query_train_mode else None
        rows = self.ctx.engine.loss_rows(self.model, x, y, u, points, train=self.ctx.query_train_mode, seed=seed)
        if self.on_device:
            return self.device_estimate(rows)
        losses = host_lists(rows)
        plus, minus = losses[0::2], losses[1::2]
        finite_differences = [[(p - m) / (2 * lam) for p, m in zip(fp, fm)] for fp, fm in zip(plus, minus)]
        s = rounded_to(self.privatize(finite_differences), rows[0].dtype)
        nonfinite = len(nonfinite_examples(finite_differences)) if self.ctx.noise.private else None
        return Estimate(s, losses, rows[0].dtype, rows[0].device, nonfinite, self.ctx.sums)

    def device_estimate(self, rows: list[torch.Tensor]) -> DeviceEstimate:
        """`noisy_directional_derivatives` kept on the losses' device: the same finite differences
        in float64, the privatiser's device release, nothing read back to the host."""
        losses = torch.stack(rows)
        wide = losses.double()
        finite_differences = (wide[0::2] - wide[1::2]) / (2 * self.cfg.smoothing)
        s = self.privatize(finite_differences).to(losses.dtype)
        nonfinite = (~torch.isfinite(finite_differences)).any(dim=0).sum() if self.ctx.noise.private else None
        return DeviceEstimate(s, losses, nonfinite)

    def step(self, x, y, step):
        """Zeroth-order SGD: x <- x - lr * (1/q) sum_j s_j u_j."""
        u = self.random_directions()
        estimate = self.noisy_directional_derivatives(x, y, u)
        self.descend(u, estimate.mean_coefficients())
        return estimate.stats()


class Estimate(NamedTuple):
    """One step's privatised directional derivatives s_j (Python floats, rounded to the losses'
    dtype) and the per-example losses they came from: f(x + lam u_j) at 2j, f(x - lam u_j) at
    2j + 1, as lists of Python floats; in a private run, how many examples contributed zero for a
    non-finite value (a private diagnostic); how the batch's sums are added (`sums`: over the ranks
    in a data-parallel run)."""

    s: list[float]
    losses: list[list[float]]
    dtype: torch.dtype
    device: torch.device
    nonfinite: int | None = None
    sums: LocalSums = LOCAL_SUMS

    def mean_coefficients(self) -> list[float]:
        """s_j / q (`mean_coefficients`)."""
        return mean_coefficients(self.s, len(self.s), self.dtype, self.device)

    def stats(self) -> dict[str, float | None]:
        """The step's mean query loss over all its per-example losses, mean |s_j| and (private
        runs) the examples that contributed zero for a non-finite value."""
        count = self.sums.count(sum(map(len, self.losses)))
        total = self.sums.row_sums([list(itertools.chain.from_iterable(self.losses))])[0]
        return {"loss": total / count if count else float("nan"),
                "projected_grad": math.fsum(map(abs, self.s)) / len(self.s),
                "nonfinite_examples": None if self.nonfinite is None else float(self.sums.count(self.nonfinite))}


class DeviceEstimate(NamedTuple):
    """`Estimate` as tensors on the losses' device: s [q] in the losses' dtype, the losses [2q, B]
    (rows in the same order), the non-finite count as a 0-dim tensor (None in a non-private run)."""

    s: torch.Tensor
    losses: torch.Tensor
    nonfinite: torch.Tensor | None = None

    def mean_coefficients(self) -> torch.Tensor:
        """s_j / q as the device divides (the host path's CUDA division)."""
        return self.s if len(self.s) == 1 else self.s / len(self.s)

    def stats(self) -> dict[str, torch.Tensor | float | None]:
        """`Estimate.stats` as 0-dim tensors, read once the step is done (`host_stats`); the means
        in float64 as the device sums them (diagnostics: the release's sum is the exact one)."""
        count = self.losses.numel()
        return {"loss": self.losses.double().mean() if count else float("nan"),
                "projected_grad": self.s.double().abs().mean(),
                "nonfinite_examples": None if self.nonfinite is None else self.nonfinite.double()}


def host_lists(rows: list[torch.Tensor]) -> list[list[float]]:
    """Loss rows as lists of Python floats; on an accelerator joined first (one copy to the host
    instead of one per row)."""
    if len(rows) > 1 and rows[0].device.type != "cpu":
        flat, width = torch.cat(rows).tolist(), rows[0].numel()
        return [flat[i * width:(i + 1) * width] for i in range(len(rows))]
    return [row.tolist() for row in rows]


def mean_coefficients(s: list[float], count: int, dtype: torch.dtype, device: torch.device) -> list[float]:
    """The coefficients s_j / count as the division of a tensor of `dtype` (the losses') on `device`
    gives them (none for one direction). On CPU that division is correctly rounded, so it is done
    here on Python floats (the float64 quotient rounded once is the correctly rounded one for
    float32, float16 and bfloat16, whose precision is under half of float64's); CUDA multiplies by
    the rounded reciprocal instead, so there the device divides."""
    if count == 1:
        return s
    if device.type == "cpu":
        return rounded_to([v / count for v in s], dtype)
    return (torch.tensor(s, dtype=dtype, device=device) / count).tolist()
