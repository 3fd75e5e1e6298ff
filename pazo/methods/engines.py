"""Two ways to evaluate per-example losses at perturbed parameters x + s * u_j.

* vectorised: all P perturbed parameter sets are stacked and evaluated in one (or a few, with
  `chunk_size`) `torch.func.vmap` calls - fast for small and medium models, memory P x d.
* inplace: MeZO's perturb / evaluate / restore on the live parameters with directions regenerated
  on the fly - memory about that of inference, the reason zeroth-order methods exist for big models.

Both return the same [P, B] loss matrix for the same directions (up to float rounding of the
in-place restore), which a test checks.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch

from pazo.methods.half_precision import exact_inplace_losses, has_low_precision
from pazo.models.functional import FunctionalModel

ENGINES = ("vectorised", "inplace")
Point = tuple[int, float]  # (direction index j, scale s): the parameters x + s * u_j


@contextlib.contextmanager
def query_mode(model: FunctionalModel, train: bool):
    """Queries run in eval mode (dropout off) by default. In train mode every forward of the step
    replays the same RNG state (see `_forward`), so the +/- evaluations see the same dropout masks."""
    was = model.module.training
    model.module.train(train)
    try:
        yield
    finally:
        model.module.train(was)


def _forward(model, x, y, train: bool, seed: int | None, fn):
    if not train or seed is None:
        return fn()
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        return fn()


class VectorisedEngine:
    name = "vectorised"

    def __init__(self, chunk_size: int | None = None):
        self.chunk_size = chunk_size

    @torch.no_grad()
    def losses(self, model: FunctionalModel, x, y, directions, points: Sequence[Point],
               train: bool = False, seed: int | None = None) -> torch.Tensor:
        if len(x) == 0:
            return x.new_zeros((len(points), 0))
        dirs = {j: directions.tensors(j) for j in sorted({j for j, _ in points})}
        base = [p.detach() for p in model.params]
        chunk = self.chunk_size or len(points)
        out = []
        with query_mode(model, train):
            for start in range(0, len(points), chunk):
                part = points[start:start + chunk]
                stacked = [torch.stack([b + s * dirs[j][i] for j, s in part]) for i, b in enumerate(base)]
                out.append(_forward(model, x, y, train, seed, lambda: model.stacked_losses(
                    stacked, x, y, randomness="same" if train else "error")))
        return torch.cat(out)


class InPlaceEngine:
    name = "inplace"

    @staticmethod
    def _shift(model: FunctionalModel, directions, j: int, alpha: float) -> None:
        for p, u in zip(model.params, directions.iter_tensors(j)):
            p.add_(u, alpha=alpha)

    @torch.no_grad()
    def losses(self, model: FunctionalModel, x, y, directions, points: Sequence[Point],
               train: bool = False, seed: int | None = None) -> torch.Tensor:
        if len(x) == 0:
            return x.new_zeros((len(points), 0))
        if has_low_precision(model.params):   # float16 / bfloat16: bit-exact restore (half_precision.py)
            return exact_inplace_losses(model, x, y, directions, points, train=train, seed=seed)
        out, cur_j, cur_s = [], None, 0.0
        with query_mode(model, train):
            try:
                for j, s in points:
                    if j == cur_j:  # MeZO: +s, evaluate, move by (s' - s), evaluate, ...
                        self._shift(model, directions, j, s - cur_s)
                    else:
                        if cur_j is not None:
                            self._shift(model, directions, cur_j, -cur_s)
                        self._shift(model, directions, j, s)
                    cur_j, cur_s = j, s
                    out.append(_forward(model, x, y, train, seed, lambda: model.current_losses(x, y)))
            finally:
                if cur_j is not None:
                    self._shift(model, directions, cur_j, -cur_s)
        return torch.stack(out)


def build_engine(cfg):
    if cfg.name == "vectorised":
        return VectorisedEngine(chunk_size=cfg.get("chunk_size"))
    if cfg.name == "inplace":
        return InPlaceEngine()
    raise ValueError(f"unknown engine {cfg.name!r}; choices: {', '.join(ENGINES)}")


@torch.no_grad()
def apply_directional_update(model: FunctionalModel, directions, coefs: Sequence[float], lr: float) -> None:
    """x <- x - lr * sum_j coefs[j] * u_j, regenerating each u_j (memory of one parameter)."""
    for j, c in enumerate(coefs):
        if c != 0.0:
            for p, u in zip(model.params, directions.iter_tensors(j)):
                p.add_(u, alpha=-lr * c)


@torch.no_grad()
def apply_flat_update(model: FunctionalModel, flat: torch.Tensor, lr: float) -> None:
    """x <- x - lr * g for a flat [d] vector g."""
    for p, g in zip(model.params, model.split_flat(flat)):
        p.add_(g, alpha=-lr)
