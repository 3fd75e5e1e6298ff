"""First-order baselines: SGD, DP-SGD, DPMD, DOPE-SGD and GEP.

All private ones use the same per-example machinery (chunked `vmap(grad)`, or a model's own
per-example pass: the LSTM's `grads_of_group_sums`; DP-SGD, DPMD and DOPE-SGD the book-keeping
engine of `pazo.methods.ghost_clip` instead where `method.clip_engine` picks it), flat clipping of each
example's contribution to C, Gaussian noise N(0, (S sigma)^2 I) on the sum (S = C, or 2C under
replace-one; `pazo.privacy.mechanisms.VectorPrivatizer`) and division by the *expected* batch size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from pazo.errors import ConfigError
from pazo.methods.base import Method, MethodConfig, at_least_one, one_of, positive, require
from pazo.methods.ghost_clip import GhostClipper
from pazo.models.dropout import is_random_in_training
from pazo.methods.per_example import (auto_memory_mb, chunk_size_for, clipped_sum, flatten_rows,
                                      iter_per_example_grads, per_example_grads, refuse_if_one_example_overflows)
from pazo.methods.registry import register_method
from pazo.privacy.mechanisms import (LOCAL_SUMS, LocalSums, Release, VectorPrivatizer, clip_factors, noise_generator,
                                     scaled_rows)


@dataclass
class FirstOrderConfig(MethodConfig):
    # MB for one chunk of per-example gradients; None = 1/4 of free GPU memory, 2 GiB on CPU
    grad_memory_mb: float | None = None
    per_example_chunk: int | None = None  # examples per chunk; None = derived from grad_memory_mb
    # how the clipped sum is computed (the same numbers up to float rounding): per_example (vmap of
    # grad), ghost (book-keeping: `pazo.methods.ghost_clip`), or auto (`choose_clip_engine`)
    clip_engine: str = "auto"

    def __post_init__(self):
        super().__post_init__()
        one_of(self.clip_engine, CLIP_ENGINES, "method.clip_engine")
        if self.grad_memory_mb is not None:
            positive(self.grad_memory_mb, "method.grad_memory_mb")
        if self.per_example_chunk is not None:
            at_least_one(self.per_example_chunk, "method.per_example_chunk")


CLIP_ENGINES = ("auto", "ghost", "per_example")


def choose_clip_engine(asked: str, model, *, private: bool, ghost_allowed: bool) -> tuple[str, str]:
    """(engine, why). `auto` picks ghost for a private step whose method allows it when every
    trainable parameter is in a layer the book-keeping rules cover and the model is on one device:
    then it skips the per-example gradients of the whole model (on CPU at batch 16: NF-ResNet's step
    from 6.5x to 2.7x SGD, digits' faster, ViT's as fast with 28% less memory, the CIFAR-shape CNN's
    18% slower: scripts/results/dpsgd_engines_cpu.json, docs/design/ghost-clipping.md). Where some parameters
    would need the per-example engine anyway (the LSTM, a tied LM head), that engine's forward comes
    on top, so auto keeps to it."""
    if not private:
        return "none", "not private: no per-example clipping"
    if asked == "per_example":
        return "per_example", "asked"
    if not ghost_allowed:
        if asked == "ghost":
            raise ConfigError("method.clip_engine=ghost is not available to this method (GEP projects flat "
                              "per-example gradients); use method.clip_engine=per_example or auto")
        return "per_example", "the method needs flat per-example gradients"
    if len(model.devices) > 1:
        if asked == "ghost":
            raise ConfigError("method.clip_engine=ghost needs the parameters on one device; use per_example or auto")
        return "per_example", "parameters on several devices"
    if asked == "ghost":
        return "ghost", "asked"
    fallback = GhostClipper(model, 1).fallback_names
    if fallback:
        return "per_example", f"{len(fallback)} parameter(s) outside the ghost rules"
    return "ghost", "every parameter in a covered layer"


@dataclass
class PublicFirstOrderConfig(FirstOrderConfig):
    public_batch_size: int = 32   # b'

    def __post_init__(self):
        super().__post_init__()
        at_least_one(self.public_batch_size, "method.public_batch_size")


class FirstOrderMethod(Method):
    #: whether the method's private step needs only the clipped sum (and so may use the ghost engine)
    ghost_allowed = True

    def __init__(self, cfg: FirstOrderConfig, ctx):
        super().__init__(cfg, ctx)
        budget = cfg.grad_memory_mb or auto_memory_mb(ctx.device)
        self.clip_engine, self.clip_engine_why = choose_clip_engine(
            cfg.clip_engine, self.model, private=ctx.noise.private, ghost_allowed=self.ghost_allowed)
        if ctx.noise.private and cfg.per_example_chunk is None and self.clip_engine == "per_example":
            refuse_if_one_example_overflows(self.model, budget)
        self.chunk = int(cfg.per_example_chunk or chunk_size_for(self.model, budget, ctx.noise.expected_batch_size))
        self.privatizer = VectorPrivatizer(ctx.noise, noise_generator(ctx.streams, ctx.device))
        refuse_random_shards(cfg.name, self.model, ctx.sums)
        self.ghost = GhostClipper(self.model, self.chunk) if self.clip_engine == "ghost" else None
        if self.ghost is not None:
            self.ghost.check_deterministic()
        # the ghost engine's check of its layers runs on public examples where there are any
        self.ghost_check_on_public = len(ctx.public) > 0

    def outside_guarantee(self) -> list[str]:
        if self.ghost is None or self.ghost_check_on_public:
            return []
        return ["the clip engine's per_example_parameters and its choice (summary engine.clip_engine): with no "
                "public examples, the ghost engine's check of its layers ran on the first private batch's first "
                "examples"]

    def check_ghost_layers(self, x, y) -> None:
        """The ghost engine's check of its layers on the first public examples (else the first private
        batch's, listed as outside the guarantee: which layers pass is data-dependent only through
        float coincidences, but it is released in the summary); where it finds parameters for
        the per-example engine on a random forward, `auto` falls back to that engine (a request for
        ghost is refused: `GhostClipper.check_deterministic`)."""
        if self.ghost_check_on_public:
            x, y = self.ctx.public.batch(np.arange(min(3, len(self.ctx.public))), self.model.input_device)
        try:
            self.ghost.check_layers(x, y)
        except ConfigError:
            if self.cfg.clip_engine != "auto":
                raise
            self.ghost, self.clip_engine = None, "per_example"
            self.clip_engine_why = "parameters outside the ghost rules on a random (dropout) forward"

    def clip_engine_block(self) -> dict:
        """The summary's record of how the clipped sum is computed (its `engine` block)."""
        block = {"requested": self.cfg.clip_engine, "used": self.clip_engine, "why": self.clip_engine_why}
        if self.ghost is not None:
            block["per_example_parameters"] = self.ghost.fallback_names
        return {"engine": {"clip_engine": block}}

    def describe(self) -> dict:
        return {**super().describe(), **self.clip_engine_block()}

    def outcome(self, stat_sums, steps_done):
        """The engine block again at the end: the first batch's check may have moved parameters of a
        layer used twice (or in place) to the per-example engine."""
        out = super().outcome(stat_sums, steps_done)
        out.setdefault("engine", {}).update(self.clip_engine_block()["engine"])
        return out

    def private_grad(self, x, y, shift=None) -> tuple[torch.Tensor, float, float | None]:
        """(sum_i clip_C(g_i - shift) + N(0, (S sigma)^2 I)) / b, the batch's mean loss (from the
        same forward pass) and how many examples contributed zero for a non-finite gradient (a
        private diagnostic); without privacy, the plain mean of g_i - shift over the realised
        batch, and None. On several processes the sums are over every rank's shard (`batch_totals`)
        and the noise, drawn alike on every rank from the shared noise stream, is added once."""
        spec = self.ctx.noise
        if not spec.private:
            return self.plain_grad(x, y, shift)
        if self.ghost is not None and not self.ghost.checked and len(x):
            self.check_ghost_layers(x, y)
        if self.ghost is not None:
            total, loss_sum, nonfinite = self.ghost(x, y, spec.clip, shift)
        else:
            total, loss_sum, nonfinite = clipped_sum(self.model, x, y, self.chunk, spec.clip, shift)
        (total, loss_sum), (nonfinite, size) = batch_totals(self.ctx.sums, [total, loss_sum], [nonfinite, len(x)])
        loss = float(loss_sum) / size if size else float("nan")
        return self.privatizer(total, spec.clip), loss, float(nonfinite)

    def plain_grad(self, x, y, shift=None) -> tuple[torch.Tensor, float, None]:
        """Without privacy: the mean of g_i - shift over the realised batch (every rank's shard on
        several processes: the shards' gradient and loss sums, added), its mean loss, and None."""
        model, sums = self.model, self.ctx.sums
        if sums is LOCAL_SUMS and len(x):
            loss, g = model.mean_loss_and_grad(x, y)
            return (g - shift if shift is not None else g), float(loss), None
        loss, g = model.mean_loss_and_grad(x, y) if len(x) else (model.zeros(()), model.zeros(model.dim))
        (g_sum, loss_sum), (size,) = batch_totals(sums, [g * len(x), loss.detach() * len(x)], [len(x)])
        if not size:
            return model.zeros(model.dim), float("nan"), None
        g = g_sum / size
        return (g - shift if shift is not None else g), float(loss_sum) / size, None


@register_method("sgd", config=FirstOrderConfig, label="SGD", family="first_order", private=False,
                 reference="mini-batch SGD (non-private reference)")
class SGD(FirstOrderMethod):
    """Non-private mini-batch SGD (the reference)."""

    def step(self, x, y, step):
        if not len(x):
            return {"loss": float("nan")}
        loss, g = self.model.mean_loss_and_grad(x, y)
        self.apply_update(g)
        return {"loss": float(loss)}


@dataclass
class PublicOnlyConfig(FirstOrderConfig):
    public_batch_size: int = 64   # public examples per step (the default private batch size)

    def __post_init__(self):
        super().__post_init__()
        at_least_one(self.public_batch_size, "method.public_batch_size")


@register_method("public_only", config=PublicOnlyConfig, label="Public only", family="first_order",
                 uses_public=True, private=False,
                 reference="reference: SGD on the public split alone, for the same number of steps")
class PublicOnly(FirstOrderMethod):
    """What the public data achieve without the private data: each step is an SGD step on a public
    batch; the private batch is ignored, so the run costs no privacy (it runs with privacy=none)."""

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.public = self.public_batches()

    def step(self, x, y, step):
        loss, g = self.model.mean_loss_and_grad(*self.public.sample())
        self.apply_update(g)
        return {"loss": float(loss)}


def refuse_random_shards(name: str, model, sums: LocalSums) -> None:
    """Several processes: a training forward that draws random numbers (dropout) would draw them from
    each rank's own generator, for its shard, not as one process draws them for the batch: refused."""
    if sums is not LOCAL_SUMS and is_random_in_training(model.module):
        raise ConfigError(f"method {name!r} on several processes: this model's training forward is random "
                          "(dropout), and each rank would draw its own masks, not those of the one-process run; "
                          "set the model's dropout to 0, or run it as one process")


def batch_totals(sums: LocalSums, parts: list[torch.Tensor],
                 counts: list) -> tuple[list[torch.Tensor], list[int]]:
    """A step's float sums (`parts`) and counts over the whole batch: one process's as they are; on
    several (`pazo.run.distributed.ShardSums`) each rank's shard's, the floats added in rank order (in
    the first part's dtype: the same on every rank, within float rounding of one process's) and the
    counts exactly."""
    if sums is LOCAL_SUMS:
        return parts, counts
    flat = sums.vector_sum(torch.cat([part.reshape(-1).to(parts[0].dtype) for part in parts]))
    pieces = flat.split([part.numel() for part in parts])
    totals = [piece.reshape(part.shape).to(part.dtype) for piece, part in zip(pieces, parts)]
    return totals, [sums.count(int(c)) for c in counts]


@register_method("dpsgd", config=FirstOrderConfig, label="DP-SGD", family="first_order",
                 reference="Abadi et al. 2016")
class DPSGD(FirstOrderMethod):
    """DP-SGD (Abadi et al. 2016): flat per-example clipping over all parameters."""

    shards_batches = True

    def step(self, x, y, step):
        g, loss, nonfinite = self.private_grad(x, y)
        self.apply_update(g)
        return {"loss": loss, "grad_norm": float(g.norm()), "nonfinite_examples": nonfinite}


@register_method("dpmd", config=PublicFirstOrderConfig, label="DPMD", family="first_order", uses_public=True,
                 reference="Amid et al. 2022 (DPMD), practical form")
class DPMD(FirstOrderMethod):
    """DPMD in the authors' practical form: alpha_t g_dp + (1 - alpha_t) g_pub with
    alpha_t = cos(pi t / (2T)), from all-private at t = 0 towards all-public at t = T."""

    shards_batches = True   # (every rank draws the same public batch and computes its gradient alike)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.public = self.public_batches()

    def alpha(self, step: int) -> float:
        return math.cos(math.pi * (step - 1) / (2 * self.ctx.total_steps))

    def step(self, x, y, step):
        g_pub = self.model.mean_loss_grad(*self.public.sample())
        a = self.alpha(step)
        g_dp, loss, nonfinite = self.private_grad(x, y)
        g = a * g_dp + (1 - a) * g_pub
        self.apply_update(g)
        return {"loss": loss, "alpha": a, "nonfinite_examples": nonfinite}


@register_method("dope_sgd", config=PublicFirstOrderConfig, label="DOPE-SGD", family="first_order",
                 uses_public=True, reference="Nasr et al. 2023 (DOPE-SGD)")
class DOPESGD(FirstOrderMethod):
    """DOPE-SGD: clip (g_i - g_pub) to C, sum, noise, divide by b, add g_pub back (not scaled by
    the realised batch size, which is private under Poisson sampling)."""

    shards_batches = True   # (every rank draws the same public batch and computes its gradient alike)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.public = self.public_batches()

    def step(self, x, y, step):
        g_pub = self.model.mean_loss_grad(*self.public.sample())
        g_dp, loss, nonfinite = self.private_grad(x, y, shift=g_pub)
        g = g_dp + g_pub
        self.apply_update(g)
        return {"loss": loss, "nonfinite_examples": nonfinite}


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


@dataclass
class GEPConfig(PublicFirstOrderConfig):
    clip0: float = 1.0      # C0, on the embedding (method.clip is C1, on the residual)
    num_bases: int = 20     # total bases, allocated to groups in proportion to sqrt(group size)
    num_groups: int = 3
    power_iters: int = 1

    def __post_init__(self):
        super().__post_init__()
        positive(self.clip0, "method.clip0")
        # no bases: the embedding is empty and GEP is DP-SGD on the residual with two mechanisms' noise
        require(isinstance(self.num_bases, int) and self.num_bases >= 1,
                f"method.num_bases must be an integer >= 1 (GEP with no anchor subspace is DP-SGD: "
                f"method=dpsgd), got {self.num_bases!r}")
        at_least_one(self.num_groups, "method.num_groups")
        at_least_one(self.power_iters, "method.power_iters")

    def release(self) -> Release:
        return Release(queries=1, mechanisms=2)  # embedding and residual, each noised with sigma


@register_method("gep", config=GEPConfig, label="GEP", family="first_order", uses_public=True,
                 reference="Yu et al. 2021 (gradient embedding perturbation)",
                 release="other")   # two noisy sums in a public subspace, not one privatiser call
class GEP(FirstOrderMethod):
    """Gradient embedding perturbation (Yu et al. 2021).

    Its residuals need each example's flat gradient, so it has the per-example engine only.

    An anchor subspace V (per parameter group, power iteration on per-example public gradients)
    splits each private gradient into its embedding w_i = V^T g_i (clipped to C0) and residual
    r_i = g_i - V w_i (clipped to C1 = method.clip); both sums are noised with the same sigma and
    the release is (V w + r) / b. Two Gaussian mechanisms per step, composed by the accountant.
    """

    ghost_allowed = False
    shards_batches = True   # (every rank computes the same anchor subspace from the same gathered public gradients)

    def __init__(self, cfg, ctx):
        super().__init__(cfg, ctx)
        self.public = self.public_batches()
        self.clip0 = cfg.clip0
        self.groups = parameter_groups(self.model.numels, cfg.num_groups)
        self.bases = allocate_bases([e - s for s, e in self.groups], cfg.num_bases, cap=cfg.public_batch_size)
        self.power_iters = cfg.power_iters
        self.init_gen = ctx.streams.torch_generator("public", device=ctx.device)

    def anchor_subspace(self) -> list[torch.Tensor]:
        """Per group an orthonormal [d_g, k_g] basis of the top public gradient directions. On several
        processes each rank computes its share of the public batch's per-example gradients and the
        ranks gather them (`ctx.sums.computed_rows`): every rank holds the same [b', d] rows."""
        x, y = self.public.sample()

        def grads_of(share: list[int]) -> torch.Tensor:
            picked = torch.as_tensor(share, dtype=torch.int64, device=x.device)
            return per_example_grads(self.model, x[picked], y[picked], self.chunk)

        pub = self.ctx.sums.computed_rows(len(x), grads_of)  # [b', d]
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
        residual_share, loss_sum, nonfinite = [], 0.0, 0
        for grads, losses in iter_per_example_grads(self.model, x, y, self.chunk):
            rows = flatten_rows(grads)
            loss_sum += float(losses.sum())
            w = self.embed(rows, bases)
            r = rows - self.lift(w, bases)
            residual_share.append((r.norm(dim=1) / rows.norm(dim=1).clamp_min(1e-12)).mean())
            if spec.private:  # each clipped; an example with a part not finite contributes zero to both sums
                w_norms, r_norms = w.norm(dim=1), r.norm(dim=1)
                finite = torch.isfinite(w_norms) & torch.isfinite(r_norms)
                nonfinite += int((~finite).sum())
                w = scaled_rows(w, clip_factors(w_norms, self.clip0) * finite)
                r = scaled_rows(r, clip_factors(r_norms, spec.clip) * finite)
            w_sum += w.sum(dim=0)
            r_sum += r.sum(dim=0)
        loss_sum = torch.tensor(loss_sum, dtype=torch.float64, device=p.device)   # (exactly the float summed)
        (w_sum, r_sum, loss_sum), (nonfinite, size) = batch_totals(self.ctx.sums, [w_sum, r_sum, loss_sum],
                                                                  [nonfinite, len(x)])
        if spec.private:
            w_sum += self.privatizer.noise(k, self.clip0, like=w_sum)
            r_sum += self.privatizer.noise(self.model.dim, spec.clip, like=r_sum)
            denom = spec.expected_batch_size
        else:
            denom = max(size, 1)
        g = (self.lift(w_sum, bases) + r_sum) / denom
        self.apply_update(g)
        return {"loss": float(loss_sum) / size if size else float("nan"),
                "residual_share": self.residual_share(residual_share),
                "nonfinite_examples": float(nonfinite) if spec.private else None}

    def residual_share(self, chunk_means: list[torch.Tensor]) -> float:
        """The mean over the step's chunks of |r_i| / |g_i| (a diagnostic): over every rank's chunks
        on several processes."""
        if self.ctx.sums is LOCAL_SUMS:
            return float(torch.stack(chunk_means).mean()) if chunk_means else float("nan")
        local = torch.stack(chunk_means).sum() if chunk_means else self.model.zeros(())
        (total,), (chunks,) = batch_totals(self.ctx.sums, [local.reshape(1)], [len(chunk_means)])
        return float(total[0]) / chunks if chunks else float("nan")
