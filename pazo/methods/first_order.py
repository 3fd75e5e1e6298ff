"""First-order baselines: SGD, DP-SGD, DPMD, DOPE-SGD and GEP.

All private ones use the same per-example machinery (chunked `vmap(grad)`), flat clipping of each
example's contribution to C, Gaussian noise N(0, (S sigma)^2 I) on the sum (S = C, or 2C under
replace-one) and division by the *expected* batch size.
"""
from __future__ import annotations

import math

import torch

from pazo.methods.base import Method, Release
from pazo.methods.engines import apply_flat_update
from pazo.methods.per_example import (auto_memory_mb, chunk_size_for, clip_rows, clipped_sum, flatten_rows,
                                      iter_per_example_grads, per_example_grads)


class FirstOrderMethod(Method):
    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        budget = cfg.get("grad_memory_mb") or auto_memory_mb(ctx.device)
        self.chunk = int(cfg.get("per_example_chunk") or chunk_size_for(
            self.model, budget, ctx.noise.expected_batch_size))
        self.noise_gen = ctx.streams.torch_generator("noise", device=ctx.device)

    @classmethod
    def release_for(cls, cfg) -> Release:
        return Release(queries=1)

    def noise(self, size: int, clip: float) -> torch.Tensor:
        """Gaussian noise for a sum of vectors clipped to `clip` (std S sigma, S the sensitivity)."""
        spec = self.ctx.noise
        std = spec.sensitivity_for(clip) * spec.sigma
        p = self.model.params[0]
        return torch.randn(size, generator=self.noise_gen, device=p.device, dtype=p.dtype) * std

    def private_grad(self, x, y, shift=None) -> tuple[torch.Tensor, float]:
        """(sum_i clip_C(g_i - shift) + N(0, (S sigma)^2 I)) / b and the batch's mean loss (from
        the same forward pass); without privacy, the plain mean of g_i - shift over the realised
        batch."""
        spec = self.ctx.noise
        if len(x) == 0 and not spec.private:
            return torch.zeros(self.model.dim, device=self.model.device, dtype=self.model.params[0].dtype), float("nan")
        if not spec.private:
            loss, g = self.model.mean_loss_and_grad(x, y)
            return (g - shift if shift is not None else g), float(loss)
        total, loss_sum = clipped_sum(self.model, x, y, self.chunk, spec.clip, shift)
        loss = float(loss_sum) / len(x) if len(x) else float("nan")
        return (total + self.noise(self.model.dim, spec.clip)) / spec.expected_batch_size, loss


class SGD(FirstOrderMethod):
    """Non-private mini-batch SGD (the reference)."""

    supports_privacy = False

    def step(self, x, y, step):
        if not len(x):
            return {"loss": float("nan")}
        loss, g = self.model.mean_loss_and_grad(x, y)
        apply_flat_update(self.model, g, self.lr)
        return {"loss": float(loss)}


class DPSGD(FirstOrderMethod):
    """DP-SGD (Abadi et al. 2016): flat per-example clipping over all parameters."""

    def step(self, x, y, step):
        g, loss = self.private_grad(x, y)
        apply_flat_update(self.model, g, self.lr)
        return {"loss": loss, "grad_norm": float(g.norm())}


class DPMD(FirstOrderMethod):
    """DPMD in the authors' practical form: alpha_t g_dp + (1 - alpha_t) g_pub with
    alpha_t = cos(pi t / (2T)), from all-private at t = 0 towards all-public at t = T."""

    uses_public = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.public = self.public_batches()

    def alpha(self, step: int) -> float:
        return math.cos(math.pi * (step - 1) / (2 * self.ctx.total_steps))

    def step(self, x, y, step):
        g_pub = self.model.mean_loss_grad(*self.public.sample())
        a = self.alpha(step)
        g_dp, loss = self.private_grad(x, y)
        g = a * g_dp + (1 - a) * g_pub
        apply_flat_update(self.model, g, self.lr)
        return {"loss": loss, "alpha": a}


class DOPESGD(FirstOrderMethod):
    """DOPE-SGD: clip (g_i - g_pub) to C, sum, noise, divide by b, add g_pub back (not scaled by
    the realised batch size, which is private under Poisson sampling)."""

    uses_public = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.public = self.public_batches()

    def step(self, x, y, step):
        g_pub = self.model.mean_loss_grad(*self.public.sample())
        g_dp, loss = self.private_grad(x, y, shift=g_pub)
        g = g_dp + g_pub
        apply_flat_update(self.model, g, self.lr)
        return {"loss": loss}


def parameter_groups(numels: list[int], num_groups: int) -> list[tuple[int, int]]:
    """Split the flat parameter vector at parameter boundaries into about `num_groups` contiguous
    [start, end) ranges of similar size."""
    total, target = sum(numels), sum(numels) / max(num_groups, 1)
    groups, start, pos = [], 0, 0
    for n in numels:
        pos += n
        if pos - start >= target and len(groups) < num_groups - 1:
            groups.append((start, pos))
            start = pos
    if start < total:
        groups.append((start, total))
    return groups


def allocate_bases(sizes: list[int], total: int, cap: int) -> list[int]:
    """Bases per group proportional to sqrt(group size), each at most min(size, cap)."""
    weights = [math.sqrt(s) for s in sizes]
    raw = [total * w / sum(weights) for w in weights]
    return [min(int(round(r)), s, cap) for r, s in zip(raw, sizes)]


class GEP(FirstOrderMethod):
    """Gradient embedding perturbation (Yu et al. 2021).

    An anchor subspace V (per parameter group, power iteration on per-example public gradients)
    splits each private gradient into its embedding w_i = V^T g_i (clipped to C0) and residual
    r_i = g_i - V w_i (clipped to C1 = method.clip); both sums are noised with the same sigma and
    the release is (V w + r) / b. Two Gaussian mechanisms per step, composed by the accountant.
    """

    uses_public = True

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.public = self.public_batches()
        self.clip0 = float(cfg.clip0)
        self.groups = parameter_groups(self.model.numels, int(cfg.num_groups))
        self.bases = allocate_bases([e - s for s, e in self.groups], int(cfg.num_bases),
                                    cap=int(cfg.public_batch_size))
        self.power_iters = int(cfg.power_iters)
        self.init_gen = ctx.streams.torch_generator("public", device=ctx.device)

    @classmethod
    def release_for(cls, cfg) -> Release:
        return Release(queries=1, mechanisms=2)

    def anchor_subspace(self) -> list[torch.Tensor]:
        """Per group an orthonormal [d_g, k_g] basis of the top public gradient directions."""
        pub = per_example_grads(self.model, *self.public.sample(), self.chunk)  # [b', d]
        bases = []
        for (s, e), k in zip(self.groups, self.bases):
            m = pub[:, s:e]
            v = torch.randn(e - s, k, generator=self.init_gen, device=m.device, dtype=m.dtype)
            v = torch.linalg.qr(m.T @ (m @ v))[0] if k else v
            for _ in range(self.power_iters - 1):
                v = torch.linalg.qr(m.T @ (m @ v))[0]
            bases.append(v)
        return bases

    def embed(self, rows: torch.Tensor, bases) -> torch.Tensor:
        return torch.cat([rows[:, s:e] @ v for (s, e), v in zip(self.groups, bases)], dim=1)

    def lift(self, w: torch.Tensor, bases) -> torch.Tensor:
        """V w: [..., k] -> [..., d]."""
        parts, offset = [], 0
        for v in bases:
            parts.append(w[..., offset:offset + v.shape[1]] @ v.T)
            offset += v.shape[1]
        return torch.cat(parts, dim=-1)

    def step(self, x, y, step):
        bases = self.anchor_subspace()
        k = sum(v.shape[1] for v in bases)
        spec = self.ctx.noise
        p = self.model.params[0]
        w_sum = torch.zeros(k, device=p.device, dtype=p.dtype)
        r_sum = torch.zeros(self.model.dim, device=p.device, dtype=p.dtype)
        residual_share, loss_sum = [], 0.0
        for grads, losses in iter_per_example_grads(self.model, x, y, self.chunk):
            rows = flatten_rows(grads)
            loss_sum += float(losses.sum())
            w = self.embed(rows, bases)
            r = rows - self.lift(w, bases)
            residual_share.append((r.norm(dim=1) / rows.norm(dim=1).clamp_min(1e-12)).mean())
            if spec.private:
                w, r = clip_rows(w, self.clip0), clip_rows(r, spec.clip)
            w_sum += w.sum(dim=0)
            r_sum += r.sum(dim=0)
        if spec.private:
            w_sum += self.noise(k, self.clip0)
            r_sum += self.noise(self.model.dim, spec.clip)
            denom = spec.expected_batch_size
        else:
            denom = max(len(x), 1)
        g = (self.lift(w_sum, bases) + r_sum) / denom
        apply_flat_update(self.model, g, self.lr)
        share = float(torch.stack(residual_share).mean()) if residual_share else float("nan")
        return {"loss": loss_sum / len(x) if len(x) else float("nan"), "residual_share": share}
