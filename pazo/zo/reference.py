"""The private two-point step written plainly, as `pazo.methods.two_point` states it: slow on
purpose (one forward per query point, the parameters as one flat vector, no engine, no seeds, no
fused or in-place adds), for the tests to hold the methods' steps to. For q directions u_j:

    s_j = (1/b) (sum_i clip_C((f(x + lam u_j; xi_i) - f(x - lam u_j; xi_i)) / 2 lam) + z_j),
    z_j ~ N(0, q C^2 sigma^2);     x <- x - lr * w * (1/q) sum_j s_j u_j

(b the expected batch size; w = 1 for DPZero, 1 - alpha for PAZO-M). Without noise (MeZO) s_j is
the plain mean of the finite differences over the batch.
"""
from __future__ import annotations

import math

import torch
from torch.func import functional_call


def losses_at(module, loss_fn, names, shapes, theta, x, y):
    """Per-example losses of `module` with its parameters `names` set to the flat vector theta."""
    pieces = theta.split([math.prod(shape) for shape in shapes])
    params = {name: piece.view(shape) for name, piece, shape in zip(names, pieces, shapes)}
    return loss_fn(functional_call(module, params, (x,)), y)


def gaussian_noise(q, clip, sigma, generator):
    """z_j ~ N(0, q C^2 sigma^2) for the q noisy sums of one batch: one Gaussian mechanism."""
    return torch.randn(q, generator=generator, dtype=torch.float64) * (math.sqrt(q) * clip * sigma)


def two_point_scalars(loss_at, theta, directions, lam, clip=None, noise=None, b=None):
    """s_j for each direction u_j; `loss_at(theta)` gives the batch's per-example losses."""
    s = []
    for j, u in enumerate(directions):
        fd = (loss_at(theta + lam * u) - loss_at(theta - lam * u)) / (2 * lam)
        if noise is None:                                  # non-private (MeZO)
            s.append(fd.mean())
        else:
            s.append((fd.clamp(-clip, clip).sum() + noise[j]) / b)
    return s


def two_point_step(loss_at, theta, directions, lr, lam, clip=None, noise=None, b=None, weight=1.0):
    """x - lr * weight * (1/q) sum_j s_j u_j: the parameters after one two-point step."""
    s = two_point_scalars(loss_at, theta, directions, lam, clip, noise, b)
    estimate = sum(s_j * u for s_j, u in zip(s, directions)) / len(directions)
    return theta - lr * weight * estimate
