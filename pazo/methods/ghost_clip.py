"""DP-SGD's clipped sum by book-keeping (ghost clipping): per-example gradient norms from each
layer's activations and output gradients, without the per-example gradients of the whole model.

One forward of the module (hooks keep each covered layer's input and output) and one backward to the
layers' outputs give, per layer, what its per-example gradient is made of: a Linear's is
sum_t b_t a_t^T over positions t. Its squared norm is taken without forming it where that is cheaper
(the Gram trick, sum_{t,s} (a_t . a_s)(b_t . b_s), when its T^2 (p + d) multiply-adds are fewer
than forming it, T p d: T (p + d) < p d, which also bounds its memory; Li et al. 2022, Bu et al. 2023),
else formed per example for that layer only. The clip factors then weight the same output gradients
into the clipped sum (book-keeping: no second backward). Conv2d is a Linear over unfolded patches,
an Embedding sums output gradients by token id, LayerNorm/GroupNorm have cheap per-example
gradients (the normalised input times the output gradient); attention's projections are Linears;
NF-ResNet's weight-standardised convolutions (timm's ScaledStdConv2d) are a Conv2d followed by the
standardisation's Jacobian, and ViT's cls_token and pos_embed read the gradient at `pos_drop`.

Every other trainable parameter (a layer type not covered, a covered layer called twice or whose
output is changed in place, a parameter also used outside its layer, such as a tied head) gets its
per-example gradients from the per-example engine (`pazo.methods.per_example`), for those
parameters only. That is a second forward, so it needs a forward without randomness: a model with
dropout and uncovered parameters is refused (`clip_engine=per_example` then).

DOPE-SGD's shift (clip g_i - s) needs only <g_i, s> per example, which each layer gives too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import grad_and_value, vmap

from pazo.models.dropout import is_random_in_training
from pazo.models.functional import FunctionalModel
from pazo.privacy.mechanisms import clip_factors

# --- one rule per layer kind ----------------------------------------------------------------------------
# Each takes what the hooks kept (the layer's input, the gradient of the summed loss at its output)
# and gives per parameter either per-example gradients [B, *shape] or, for a Linear-like weight, the
# pair (a [B, T, d], b [B, T, p]) that defines them, from which norms and sums are taken.

@dataclass
class Factored:
    """Per-example gradients sum_t b[i, t] a[i, t]^T of a weight [p, d], never formed unless cheaper;
    where the norms form them and one chunk holds the batch, the clipped sum reuses them (no second
    pass over the positions; they take no more memory than the per-example engine's chunk)."""
    a: torch.Tensor   # [B, T, d]
    b: torch.Tensor   # [B, T, p]
    shape: torch.Size
    #: the per-example gradients [B, p, d], where the norms formed them in one chunk (the sum reuses them)
    formed: torch.Tensor | None = None

    def sq_norms(self, chunk: int) -> torch.Tensor:
        n, t, d = self.a.shape
        p = self.b.shape[2]
        if t == 1:
            return self.a[:, 0].square().sum(1) * self.b[:, 0].square().sum(1)
        if t * (p + d) < p * d:   # Gram trick (fewer operations, and then T^2 < p d too)
            return torch.cat([(torch.bmm(a, a.transpose(1, 2)) * torch.bmm(b, b.transpose(1, 2))).sum((1, 2))
                              for a, b in zip(self.a.split(chunk), self.b.split(chunk))])
        norms = []
        for a, b in zip(self.a.split(chunk), self.b.split(chunk)):
            grads = torch.bmm(b.transpose(1, 2), a)
            norms.append(torch.linalg.vector_norm(grads.flatten(1), dim=1).square())
        if n <= chunk:
            self.formed = grads
        return torch.cat(norms)

    def inner(self, shift: torch.Tensor) -> torch.Tensor:
        """<g_i, S> = sum_t b_t . (S a_t)."""
        return torch.einsum("btp,btp->b", self.a @ shift.reshape(self.b.shape[2], -1).T, self.b)

    def weighted_sum(self, w: torch.Tensor) -> torch.Tensor:
        if self.formed is not None:
            return torch.tensordot(w, self.formed, dims=1).reshape(self.shape)
        return torch.einsum("btp,btd->pd", self.b * w[:, None, None], self.a).reshape(self.shape)


def _linear(layer: nn.Linear, x, grad_out):
    a = x.reshape(x.shape[0], -1, x.shape[-1])
    b = grad_out.reshape(grad_out.shape[0], -1, grad_out.shape[-1])
    parts = {"weight": Factored(a, b, layer.weight.shape)}
    if layer.bias is not None:
        parts["bias"] = b.sum(1)
    return parts


def _conv2d(layer: nn.Conv2d, x, grad_out):
    a = F.unfold(x, layer.kernel_size, layer.dilation, layer.padding, layer.stride).transpose(1, 2)  # [B, L, C k k]
    b = grad_out.flatten(2).transpose(1, 2)                                                          # [B, L, out]
    parts = {"weight": Factored(a, b, layer.weight.shape)}
    if layer.bias is not None:
        parts["bias"] = b.sum(1)
    return parts


@dataclass
class StandardisedWeight:
    """Per-example gradients of a weight-standardised convolution's raw weight (timm's ScaledStdConv2d:
    each output channel's row v of length n becomes gain * scale * (v - mean) / sqrt(var + eps)).
    The conv gives, per example, the gradient G of the standardised weight (`conv`, factored); the
    raw weight's is J G, with J = c (I - 11^T/n - s s^T/n) per channel (s the standardised row, c =
    gain scale / sqrt(var + eps)), linear and symmetric: so sums and inner products go through J once,
    and norms are c^2 (|G|^2 - n m1^2 - n m2^2 (2 - |s|^2/n)), m1 = mean(G), m2 = mean(G s), or J G
    formed per example where the Gram trick does not pay."""
    conv: Factored        # G_i = sum_t b_t a_t^T over the unfolded patches, [out, n]
    s: torch.Tensor       # [out, n] the standardised rows
    c: torch.Tensor       # [out]
    shape: torch.Size
    m2: torch.Tensor      # [B, out] mean(G_i s) per channel (the gain's per-example gradient needs it too)

    def _apply_j(self, g: torch.Tensor) -> torch.Tensor:
        """J g for g [..., out, n]."""
        n = self.s.shape[1]
        m1 = g.mean(-1, keepdim=True)
        m2 = (g * self.s).sum(-1, keepdim=True) / n
        return self.c[:, None] * (g - m1 - self.s * m2)

    def sq_norms(self, chunk: int) -> torch.Tensor:
        n_ex, t, d = self.conv.a.shape
        p = self.conv.b.shape[2]
        if t * (p + d) >= p * d:
            norms = []
            for a, b in zip(self.conv.a.split(chunk), self.conv.b.split(chunk)):
                grads = torch.bmm(b.transpose(1, 2), a)
                norms.append(torch.linalg.vector_norm(self._apply_j(grads).flatten(1), dim=1).square())
            if n_ex <= chunk:
                self.conv.formed = grads   # (G, before J: the sum goes through J once)
            return torch.cat(norms)
        n = self.s.shape[1]
        r = self.s.square().sum(1) / n
        scaled = Factored(self.conv.a, self.conv.b * self.c, self.conv.shape).sq_norms(chunk)
        m1 = torch.einsum("btp,bt->bp", self.conv.b, self.conv.a.sum(2)) / n   # mean(G_i) per channel
        return scaled - (self.c.square() * n * (m1.square() + self.m2.square() * (2 - r))).sum(1)

    def inner(self, shift: torch.Tensor) -> torch.Tensor:
        return self.conv.inner(self._apply_j(shift.reshape(self.s.shape)))

    def weighted_sum(self, w: torch.Tensor) -> torch.Tensor:
        summed = self.conv.weighted_sum(w).reshape(self.s.shape)
        return self._apply_j(summed).reshape(self.shape)


def _scaled_std_conv2d(layer: nn.Conv2d, x, grad_out):
    """timm's ScaledStdConv2d: a Conv2d of the standardised weight, whose gain has per-example
    gradients scale <G_i, s> per channel."""
    conv = _conv2d(layer, x, grad_out)
    with torch.no_grad():
        v = layer.weight.reshape(layer.out_channels, -1)
        var = v.var(1, unbiased=False, keepdim=True)
        root = (var + layer.eps).sqrt()
        s = (v - v.mean(1, keepdim=True)) / root
        c = (layer.gain.reshape(-1) * layer.scale) / root.reshape(-1)
    a, b = conv["weight"].a, conv["weight"].b
    n = s.shape[1]
    m2 = torch.einsum("btp,btp->bp", b, a @ s.T) / n   # mean(G_i s) per channel, without forming G_i
    parts = {"weight": StandardisedWeight(conv["weight"], s, c, layer.weight.shape, m2),
             "gain": (layer.scale * n * m2).reshape(len(m2), *layer.gain.shape)}
    if "bias" in conv:
        parts["bias"] = conv["bias"]
    return parts


@dataclass
class EmbeddingRows:
    """Per-example gradients of an embedding table: output gradients added at their token ids."""
    ids: torch.Tensor    # [B, T]
    b: torch.Tensor      # [B, T, D], zero at the padding id
    shape: torch.Size

    def sq_norms(self, chunk: int) -> torch.Tensor:
        n, t, d = self.b.shape
        keys = (torch.arange(n, device=self.ids.device)[:, None] * self.shape[0] + self.ids).reshape(-1)
        unique, inverse = torch.unique(keys, return_inverse=True)
        rows = self.b.new_zeros(len(unique), d).index_add_(0, inverse, self.b.reshape(-1, d))
        return self.b.new_zeros(n).index_add_(0, unique // self.shape[0], rows.square().sum(1))

    def inner(self, shift: torch.Tensor) -> torch.Tensor:
        return (shift[self.ids] * self.b).sum((1, 2))

    def weighted_sum(self, w: torch.Tensor) -> torch.Tensor:
        d = self.b.shape[2]
        return self.b.new_zeros(self.shape).index_add_(0, self.ids.reshape(-1),
                                                       (self.b * w[:, None, None]).reshape(-1, d))


def _embedding(layer: nn.Embedding, ids, grad_out):
    ids = ids.reshape(ids.shape[0], -1)
    b = grad_out.reshape(ids.shape[0], ids.shape[1], -1)
    if layer.padding_idx is not None:
        b = b * (ids != layer.padding_idx).unsqueeze(-1).to(b.dtype)
    return {"weight": EmbeddingRows(ids, b, layer.weight.shape)}


def _layer_norm(layer: nn.LayerNorm, x, grad_out):
    normalised = F.layer_norm(x, layer.normalized_shape, eps=layer.eps)
    over = tuple(range(1, x.dim() - len(layer.normalized_shape)))   # positions between batch and features
    parts = {"weight": (grad_out * normalised).sum(over) if over else grad_out * normalised}
    if layer.bias is not None:
        parts["bias"] = grad_out.sum(over) if over else grad_out
    return parts


def _group_norm(layer: nn.GroupNorm, x, grad_out):
    normalised = F.group_norm(x, layer.num_groups, eps=layer.eps)
    over = tuple(range(2, x.dim()))
    return {"weight": (grad_out * normalised).sum(over), "bias": grad_out.sum(over)}


def _is_scaled_std_conv(module: nn.Module) -> bool:
    """timm's ScaledStdConv2d (by name: timm is imported only by the models that use it), plain
    otherwise (no groups, zero padding of fixed size)."""
    return (type(module).__name__ == "ScaledStdConv2d" and isinstance(module, nn.Conv2d)
            and isinstance(getattr(module, "gain", None), nn.Parameter) and module.groups == 1
            and module.padding_mode == "zeros" and not isinstance(module.padding, str))


def _rule(module: nn.Module):
    """The rule for a layer of a covered type and configuration, or None. Subclasses of Linear and the
    norms are taken (timm's LayerNorm), since the first batch's check (`check_layers`) leaves one
    that computes otherwise to the per-example engine; not other Conv2d subclasses (a standardised
    weight has its own rule, `StandardisedWeight`) nor Embedding's (OPT's learned positions take the
    attention mask)."""
    if isinstance(module, nn.Linear):
        return _linear
    if _is_scaled_std_conv(module):
        return _scaled_std_conv2d
    if type(module) is nn.Conv2d and module.groups == 1 and module.padding_mode == "zeros" \
            and not isinstance(module.padding, str):
        return _conv2d
    if type(module) is nn.Embedding and module.max_norm is None and not module.scale_grad_by_freq \
            and not module.sparse:
        return _embedding
    if isinstance(module, nn.LayerNorm) and module.elementwise_affine:
        return _layer_norm
    if isinstance(module, nn.GroupNorm) and module.affine:
        return _group_norm
    return None


def _vit_prefix_rule(vit: nn.Module):
    """timm's VisionTransformer adds `pos_embed` to [cls_token, patches] and passes the sum through
    `pos_drop`: the gradient at that layer's input is, per example, pos_embed's gradient, and its
    first position cls_token's. Where it applies (a class token, position embeddings over it, no
    register tokens, a fixed image size, a pos_drop of rate 0), else None."""
    drop = getattr(vit, "pos_drop", None)
    if not (isinstance(getattr(vit, "cls_token", None), nn.Parameter) and isinstance(getattr(vit, "pos_embed", None),
                                                                                     nn.Parameter)
            and getattr(vit, "reg_token", None) is None and not getattr(vit, "no_embed_class", True)
            and not getattr(vit, "dynamic_img_size", True) and isinstance(drop, (nn.Dropout, nn.Identity))
            and float(getattr(drop, "p", 0.0)) == 0.0):
        return None
    cls_shape, pos_shape = vit.cls_token.shape, vit.pos_embed.shape

    def rule(module, x, grad_out):
        n = grad_out.shape[0]
        return {"pos_embed": grad_out.reshape(n, *pos_shape), "cls_token": grad_out[:, :1].reshape(n, *cls_shape)}
    return drop, rule


def _sq_norms(part, chunk: int) -> torch.Tensor:
    if isinstance(part, torch.Tensor):   # per-example gradients [B, *shape]
        return torch.linalg.vector_norm(part.reshape(part.shape[0], -1), dim=1).square()
    return part.sq_norms(chunk)


def _inner(part, shift: torch.Tensor) -> torch.Tensor:
    if isinstance(part, torch.Tensor):
        return (part.reshape(part.shape[0], -1) * shift.reshape(1, -1)).sum(1)
    return part.inner(shift)


def _weighted_sum(part, w: torch.Tensor) -> torch.Tensor:
    if isinstance(part, torch.Tensor):
        return torch.tensordot(w, part, dims=1)
    return part.weighted_sum(w)


# --- the engine -----------------------------------------------------------------------------------------

@dataclass
class _Capture:
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    versions: list = field(default_factory=list)


class GhostClipper:
    """sum_i clip_C(g_i - shift) and the summed loss, as `per_example.clipped_sum` gives them, by
    book-keeping on the covered layers and per-example gradients of the rest (`fallback_names`)."""

    def __init__(self, model: FunctionalModel, chunk: int):
        self.model, self.chunk = model, chunk
        index = {id(p): i for i, p in enumerate(model.params)}
        self.layers: dict[str, tuple[nn.Module, object, dict[str, int]]] = {}
        for name, module in model.module.named_modules():
            rule = _rule(module)
            own = {n: index[id(p)] for n, p in module.named_parameters(recurse=False) if id(p) in index}
            if rule is not None and own:
                self.layers[name] = (module, rule, own)
            prefix = _vit_prefix_rule(module)
            if prefix is not None and {"cls_token", "pos_embed"} <= own.keys():
                self.layers[f"{name}.pos_drop" if name else "pos_drop"] = (
                    prefix[0], prefix[1], {k: own[k] for k in ("cls_token", "pos_embed")})
        self.checked = False
        self._update_fallback()

    def _update_fallback(self) -> None:
        covered = {i for _, _, own in self.layers.values() for i in own.values()}
        self.fallback = [i for i in range(len(self.model.params)) if i not in covered]

    @property
    def fallback_names(self) -> list[str]:
        """Trainable parameters whose per-example gradients are formed (no layer rule covers them)."""
        return [self.model.names[i] for i in self.fallback]

    # -- the covered layers' pass
    def _forward_backward(self, x, y):
        """Per covered parameter what its per-example gradients are made of, the per-example losses,
        and the layers not called exactly once on the batch's examples (or changed in place)."""
        captures = {name: _Capture() for name in self.layers}
        handles = []
        for name, (module, _, _) in self.layers.items():
            def keep(mod, args, out, c=captures[name]):
                first = args[0] if args else None   # (a call by keyword only is left to the fallback)
                c.inputs.append(first.detach() if isinstance(first, torch.Tensor) else None)
                c.outputs.append(out)
                c.versions.append(getattr(out, "_version", None))
            handles.append(module.register_forward_hook(keep))
        try:
            with torch.enable_grad():
                losses = self.model.current_losses(x, y)
        finally:
            for h in handles:
                h.remove()
        n = len(x)
        once = {name: c for name, c in captures.items()
                if len(c.outputs) == 1 and isinstance(c.outputs[0], torch.Tensor) and c.inputs[0] is not None
                and c.outputs[0].requires_grad and c.outputs[0]._version == c.versions[0]
                and c.outputs[0].shape[:1] == c.inputs[0].shape[:1] == (n,)}
        wanted = [c.outputs[0] for c in once.values()]
        grads = torch.autograd.grad(losses.sum(), wanted, allow_unused=True) if wanted else []
        parts = {}
        for (name, c), g in zip(once.items(), grads):
            g = torch.zeros_like(c.outputs[0]) if g is None else g
            module, rule, own = self.layers[name]
            for pname, part in rule(module, c.inputs[0], g.detach()).items():
                parts[own[pname]] = part
        return parts, losses.detach(), [name for name in self.layers if name not in once]

    def check_layers(self, x, y, examples: int = 3) -> None:
        """Once, on the first batch's first `examples`, in eval mode (no dropout): each covered
        parameter's per-example squared norms and inner products with a random direction, by its
        rule and by the per-example engine. A layer is left to the per-example engine where they
        differ (a weight tied to another layer or also used outside its own, a layer whose first
        dimension is not the batch's), or where it was not called exactly once, or its output was
        changed in place. Then the fallback's forward must be deterministic (`check_deterministic`)."""
        xs, ys = x[:examples], y[:examples]
        was_training = self.model.module.training
        self.model.set_training(False)
        try:
            parts, _, odd = self._forward_backward(xs, ys)
            self.layers = {n: v for n, v in self.layers.items() if n not in odd}
            keep, self.fallback = self.fallback, sorted(parts)
            exact = [g for chunk in self._fallback_grads(xs, ys) for g in zip(*chunk)] if parts else []
            self.fallback = keep
        finally:
            self.model.set_training(was_training)
        gen = torch.Generator(device="cpu").manual_seed(0)
        compared = {}
        for j, i in enumerate(sorted(parts)):
            per_example = torch.stack([row[j] for row in exact])
            direction = torch.randn(per_example.shape[1:], generator=gen, dtype=per_example.dtype)
            direction = direction.to(per_example.device)
            compared[i] = (torch.stack([_sq_norms(parts[i], self.chunk), _inner(parts[i], direction)]),
                           torch.stack([_sq_norms(per_example, self.chunk), _inner(per_example, direction)]))
        if compared:
            # rounding of the two ways, relative to the largest quantity compared
            scale = max(float(b.abs().max()) for _, b in compared.values())
            tol = 1e4 * torch.finfo(self.model.params[0].dtype).eps * scale
            for i, (mine, want) in compared.items():
                if float((mine - want).abs().max()) > tol:
                    self.layers = {n: (m, r, o) for n, (m, r, o) in self.layers.items() if i not in o.values()}
        self._update_fallback()
        self.checked = True
        self.check_deterministic(x, y)

    def check_deterministic(self, x=None, y=None) -> None:
        """The fallback's per-example gradients come from a second forward, which must be the first
        one again: refused on a model whose training forward draws random numbers, by its layers
        (a dropout module) or, given a batch, by two forwards of it that differ (a model that calls
        `F.dropout` itself, as Hugging Face's OPT does)."""
        random = is_random_in_training(self.model.module)
        if self.fallback and not random and x is not None:
            with torch.no_grad():
                random = not torch.equal(self.model.current_losses(x[:2], y[:2]),
                                         self.model.current_losses(x[:2], y[:2]))
        if self.fallback and random:
            from pazo.errors import ConfigError

            raise ConfigError(
                f"method.clip_engine=ghost: parameters {self.fallback_names[:4]} need per-example gradients from "
                "a second forward, and this model's training forward is random (dropout): its clip would not "
                "bound what is summed; use method.clip_engine=per_example (or auto), or a dropout of 0")

    # -- the rest, by the per-example engine
    def _fallback_chunks(self, x, y, shifts=None):
        """Per-example gradients [c, *shape] of the fallback parameters (less their shift), chunk by
        chunk; the same each time (the forward is deterministic: `check_deterministic`)."""
        for grads in self._fallback_grads(x, y):
            yield grads if shifts is None else [g - shifts[i] for g, i in zip(grads, self.fallback)]

    def _fallback_grads(self, x, y):
        model, keep = self.model, self.fallback
        if model.own_group_grads:
            for start in range(0, len(x), self.chunk):
                grads, _ = model.group_sum_grads(x[start:start + self.chunk], y[start:start + self.chunk],
                                                 groups=len(x[start:start + self.chunk]))
                yield [grads[i] for i in keep]
            return
        params = [p.detach() for p in model.params]

        def loss_one(sub, x1, y1):
            full = list(params)
            for i, p in zip(keep, sub):
                full[i] = p
            return model.losses_at(full, x1.unsqueeze(0), y1.unsqueeze(0)).squeeze(0)
        per_example = vmap(grad_and_value(loss_one), in_dims=(None, 0, 0), randomness="different")
        for start in range(0, len(x), self.chunk):
            grads, _ = per_example([params[i] for i in keep], x[start:start + self.chunk],
                                   y[start:start + self.chunk])
            yield list(grads)

    def __call__(self, x, y, bound: float,
                 shift: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(sum_i clip_bound(g_i - shift), the summed loss, how many examples contributed zero for a
        non-finite gradient), as `per_example.clipped_sum`. An example whose norm is not finite is
        left out of the sum by summing the others again (a weight of zero would still meet its NaN
        or infinite activations: 0 x inf is NaN); such batches are rare, and the others' sum is
        exactly the release without them."""
        model = self.model
        if not len(x):
            return model.zeros(model.dim), model.zeros(()), torch.zeros((), dtype=torch.int64)
        if not self.checked:
            self.check_layers(x, y)
        parts, losses, odd = self._forward_backward(x, y)
        if odd:
            raise RuntimeError(f"ghost clipping: layers {odd} were called other than once this step "
                               "(the model's structure changed since the first)")
        shifts = model.split_flat(shift) if shift is not None else None
        sq = model.zeros(len(x))   # (the parameters' dtype: a loss may be float32 beside float64 parameters)
        for i, part in parts.items():
            sq += _sq_norms(part, self.chunk)
            if shifts is not None:
                sq -= 2 * _inner(part, shifts[i])
        one_chunk = len(x) <= self.chunk
        stored = []
        if self.fallback:
            rows = []
            for grads in self._fallback_chunks(x, y, shifts):
                rows.append(sum(_sq_norms(g, self.chunk) for g in grads))
                if one_chunk:
                    stored.append(grads)
            sq += torch.cat(rows)
        if shifts is not None:
            covered_shift = sum(shifts[i].square().sum() for i in parts)
            sq = (sq + covered_shift).clamp_min(0)
        bad = ~torch.isfinite(sq)
        if bool(bad.any()):
            good = (~bad).nonzero().flatten().to(x.device)
            total, _, _ = self(x[good], y[good], bound, shift)
            return total, losses.sum(), bad.sum()
        factor = clip_factors(sq.sqrt(), bound)
        sums = [torch.zeros_like(p) for p in model.params]
        for i, part in parts.items():
            sums[i] += _weighted_sum(part, factor)
            if shifts is not None:
                sums[i] -= factor.sum() * shifts[i]
        start = 0   # the fallback's per-example gradients again (kept, if one chunk held them)
        for grads in (stored if one_chunk else self._fallback_chunks(x, y, shifts)) if self.fallback else []:
            w = factor[start:start + len(grads[0])]
            start += len(grads[0])
            for g, i in zip(grads, self.fallback):
                sums[i] += torch.tensordot(w, g, dims=1)
        return model.flatten(sums), losses.sum(), torch.zeros((), dtype=torch.int64)
