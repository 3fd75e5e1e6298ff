"""DPZero's dimension-independence experiment (Zhang et al. 2023, Figures 1-2), re-implemented.

Per-example losses l_i(x) = 1/2 (x - xi_i)^T A (x - xi_i) with A = diag(lam), lam_1 = 1 and an
eigenvalue profile that sets the effective rank Tr(A) / lam_max:
  small  lam_i = 1/i^2     (Tr(A) < pi^2/6 whatever d)
  medium lam_i = 1/sqrt(i) (Tr(A) ~ 2 sqrt(d))
  large  lam_i = 1         (Tr(A) = d)
Private training points xi_i ~ N(mu, I_d), mu ~ N(0, I_d); a fresh test sample from the same law.

Three full-batch (epsilon, delta)-DP methods with the same noise multiplier (q = 1, T steps):
  dpgd      first-order DP-GD: clip each gradient to C, add N(0, sigma^2 C^2 I_d), divide by n
  dpgd_0th  zeroth-order DP-GD that privatises the whole d-dimensional estimate
            g_i = ((l_i(x + h u) - l_i(x - h u)) / 2h) u: clipped in norm, d-dimensional noise
  dpzero    DPZero: clip the scalar finite difference, scalar noise, times u
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

MODES = ("small", "medium", "large")
METHODS = ("dpgd_0th", "dpzero", "dpgd")


def eigenvalues(d: int, mode: str) -> torch.Tensor:
    i = torch.arange(1, d + 1, dtype=torch.float64)
    if mode == "small":
        return 1.0 / i**2
    if mode == "medium":
        return 1.0 / i.sqrt()
    if mode == "large":
        return torch.ones(d, dtype=torch.float64)
    raise ValueError(f"unknown mode {mode!r}; choices: {', '.join(MODES)}")


def effective_rank(lam: torch.Tensor) -> float:
    return float(lam.sum() / lam.max())


@dataclass
class Quadratic:
    lam: torch.Tensor      # [d] diagonal of A
    train: torch.Tensor    # [n, d] private points
    test: torch.Tensor     # [m, d]

    @classmethod
    def generate(cls, d: int, mode: str, n: int, n_test: int, seed: int) -> Quadratic:
        g = torch.Generator().manual_seed(seed)
        mu = torch.randn(d, generator=g, dtype=torch.float64)
        draw = lambda k: mu + torch.randn(k, d, generator=g, dtype=torch.float64)  # noqa: E731
        return cls(eigenvalues(d, mode), draw(n), draw(n_test))

    def per_example_losses(self, x: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
        return 0.5 * ((x - data) ** 2 * self.lam).sum(dim=-1)

    def loss(self, x, data) -> float:
        return float(self.per_example_losses(x, data).mean())

    def grad_norm(self, x, data) -> float:
        return float((self.lam * (x - data.mean(dim=0))).norm())


def _clip_rows(v: torch.Tensor, c: float) -> torch.Tensor:
    return v * (c / v.norm(dim=1, keepdim=True).clamp_min(1e-12)).clamp(max=1.0)


def run_method(problem: Quadratic, method: str, lr: float, steps: int, sigma: float, clip: float,
               smoothing: float, seed: int) -> dict:
    """Train from x = 0; return final train/test gradient norms and the best train/test losses."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choices: {', '.join(METHODS)}")
    g = torch.Generator().manual_seed(seed)
    d, n = problem.lam.numel(), problem.train.shape[0]
    x = torch.zeros(d, dtype=torch.float64)
    best_train, best_test = problem.loss(x, problem.train), problem.loss(x, problem.test)
    for _ in range(steps):
        if method == "dpgd":
            grads = problem.lam * (x - problem.train)
            update = (_clip_rows(grads, clip).sum(0) + sigma * clip * torch.randn(d, generator=g,
                                                                                     dtype=torch.float64)) / n
        else:
            u = torch.randn(d, generator=g, dtype=torch.float64)
            diff = (problem.per_example_losses(x + smoothing * u, problem.train)
                    - problem.per_example_losses(x - smoothing * u, problem.train)) / (2 * smoothing)
            if method == "dpzero":
                scalar = (diff.clamp(-clip, clip).sum() + sigma * clip * torch.randn(
                    (), generator=g, dtype=torch.float64)) / n
                update = scalar * u
            else:
                vectors = _clip_rows(diff[:, None] * u[None, :], clip)
                update = (vectors.sum(0) + sigma * clip * torch.randn(d, generator=g, dtype=torch.float64)) / n
        x = x - lr * update
        train_loss = problem.loss(x, problem.train)
        if not math.isfinite(train_loss):
            break
        best_train = min(best_train, train_loss)
        best_test = min(best_test, problem.loss(x, problem.test))
    finite = bool(torch.isfinite(x).all())
    return {"train_grad_norm": problem.grad_norm(x, problem.train) if finite else float("inf"),
            "test_grad_norm": problem.grad_norm(x, problem.test) if finite else float("inf"),
            "best_train_loss": best_train, "best_test_loss": best_test}


def sweep(dims, modes, lrs, steps: int, n: int, n_test: int, sigma: float, clip: float,
          smoothing: float, seeds) -> list[dict]:
    """Every (mode, d, method, lr, seed); the caller picks the best lr per (mode, d, method)."""
    rows = []
    for mode in modes:
        for d in dims:
            for seed in seeds:
                problem = Quadratic.generate(d, mode, n, n_test, seed)
                for method in METHODS:
                    for lr in lrs:
                        out = run_method(problem, method, lr, steps, sigma, clip, smoothing, seed + 1000)
                        rows.append({"mode": mode, "d": d, "effective_rank": effective_rank(problem.lam),
                                     "method": method, "lr": lr, "seed": seed, **out})
    return rows


def best_over_lr(rows: list[dict]) -> list[dict]:
    """Per (mode, d, method): the lr with the lowest mean best train loss over seeds, and the means
    of every metric at that lr."""
    import pandas as pd

    df = pd.DataFrame(rows)
    metrics = ["train_grad_norm", "test_grad_norm", "best_train_loss", "best_test_loss"]
    mean = df.groupby(["mode", "d", "method", "lr"], as_index=False)[metrics + ["effective_rank"]].mean()
    idx = mean.groupby(["mode", "d", "method"])["best_train_loss"].idxmin()
    return mean.loc[idx].sort_values(["mode", "method", "d"]).to_dict("records")


__all__ = ["MODES", "METHODS", "Quadratic", "best_over_lr", "effective_rank", "eigenvalues",
           "run_method", "sweep", "np"]
