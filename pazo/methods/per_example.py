"""Per-example gradients with torch.func (vmap of grad over functional_call), or the model's own
(`FunctionalModel.own_group_grads`: the LSTM's, from its fused kernel), in chunks.

The whole [B, d] matrix is never needed by DP-SGD: each chunk of examples is turned into gradients,
reduced (clipped and summed, or projected) and dropped, so memory is chunk x d whatever the batch.
The chunk size comes from a memory budget (`grad_memory_mb`), or is given directly.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch.func import grad_and_value, vmap

from pazo.models.functional import FunctionalModel
from pazo.privacy.mechanisms import clip_factors, scaled_rows


def auto_memory_mb(device: torch.device) -> float:
    """Default budget for one chunk of per-example gradients: a quarter of the free GPU memory on
    CUDA (so the whole batch is usually one vmap call), 2 GiB on CPU."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free / 2**20 / 4
    return 2048.0


def chunk_size_for(model: FunctionalModel, memory_mb: float, batch_size: int | None = None,
                   overhead: float = 3.0) -> int:
    """Examples per chunk so that chunk x d gradients (plus `overhead` copies for vmap's
    intermediates) fit in `memory_mb`; with `batch_size`, the chunks are balanced (256 examples
    under a cap of 232 become 2 x 128, not 232 + 24)."""
    bytes_per_example = model.dim * model.params[0].element_size() * overhead
    cap = max(1, int(memory_mb * 2**20 // bytes_per_example))
    if batch_size:
        pieces = math.ceil(batch_size / cap)
        return max(1, math.ceil(batch_size / pieces))
    return cap


def refuse_if_one_example_overflows(model: FunctionalModel, memory_mb: float, overhead: float = 3.0) -> None:
    """One clear message, before any compute, when the per-example gradients of even one example
    (d parameters, `overhead` copies for vmap's intermediates) exceed the memory budget - the case
    of full-parameter DP-SGD on a large language model (DP-ZO's Table 2)."""
    need = model.dim * model.params[0].element_size() * overhead / 2**20
    if need > memory_mb:
        from pazo.errors import ConfigError

        raise ConfigError(
            f"per-example gradients of {model.dim:,} parameters need about {need / 1024:.1f} GiB for a single "
            f"example, over the budget of {memory_mb / 1024:.1f} GiB (method.grad_memory_mb): full-parameter "
            "DP-SGD does not fit; train LoRA adapters (model.lora.enabled=true: per-example gradients of the "
            "adapters only), raise method.grad_memory_mb, or use a zeroth-order method")


def _per_example_fn(model: FunctionalModel):
    """(x, y) -> (per-parameter per-example gradients, per-example losses) at the current parameters."""
    if model.own_group_grads:
        return lambda x, y: model.group_sum_grads(x, y, groups=len(x))

    def loss_one(params, x, y):
        return model.losses_at(params, x.unsqueeze(0), y.unsqueeze(0)).squeeze(0)
    per_example = vmap(grad_and_value(loss_one), in_dims=(None, 0, 0), randomness="different")
    params = [p.detach() for p in model.params]
    return lambda x, y: per_example(params, x, y)


def iter_per_example_grads(model: FunctionalModel, x: torch.Tensor, y: torch.Tensor,
                           chunk: int) -> Iterator[tuple[list[torch.Tensor], torch.Tensor]]:
    """Yield (per-parameter per-example gradients [c, *shape], per-example losses [c]) chunk by
    chunk; the losses come from the same forward pass."""
    fn = _per_example_fn(model)
    for start in range(0, len(x), chunk):
        grads, losses = fn(x[start:start + chunk], y[start:start + chunk])
        yield list(grads), losses


def flatten_rows(grads: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.reshape(g.shape[0], -1) for g in grads], dim=1)


def per_example_grads(model: FunctionalModel, x, y, chunk: int) -> torch.Tensor:
    """All flat per-example gradients [B, d] (tests, GEP's public anchors)."""
    parts = [flatten_rows(g) for g, _ in iter_per_example_grads(model, x, y, chunk)]
    return torch.cat(parts) if parts else model.zeros((0, model.dim))


def clipped_sum(model: FunctionalModel, x, y, chunk: int, bound: float,
                shift: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sum_i clip_bound(g_i - shift) over the batch, chunk by chunk (the DP-SGD numerator; DOPE-SGD
    shifts by g_pub), the sum of the per-example losses, and how many examples contributed zero
    because their gradient was not finite (NaN or infinite entries: `clip_factors`).

    Flat clipping needs only each example's total norm: it is summed over parameters, and each
    parameter's per-example gradients are then reduced with the clip factors in one contraction,
    so no [c, d] copy is made (but for a chunk with a non-finite example, whose rows are zeroed
    first: 0 x inf is NaN).
    """
    sums = [torch.zeros_like(p) for p in model.params]
    loss_sum = model.zeros(())
    nonfinite = torch.zeros((), dtype=torch.int64, device=loss_sum.device)
    shifts = model.split_flat(shift) if shift is not None else None
    for grads, losses in iter_per_example_grads(model, x, y, chunk):
        if shifts is not None:
            grads = [g - s for g, s in zip(grads, shifts)]
        # (.to: no-ops on one device; on a model spread over devices each piece meets the others on
        # model.device, and the clip factors go to each parameter's device)
        # (vector_norm reads each piece once; pow(2).sum() first writes a copy of it: 12x the time on
        # the IMDB LSTM's per-example embedding gradients on this CPU)
        sq = sum(torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1).square().to(loss_sum.device)
                 for g in grads)
        norms = sq.sqrt()
        factor = clip_factors(norms, bound)
        bad = (~torch.isfinite(norms)).sum()
        nonfinite += bad
        if bad:  # zero those examples' rows (one small sync per chunk; the step reads its loss anyway)
            finite = torch.isfinite(norms).to(factor.dtype)
            grads = [scaled_rows(g, finite.to(g.device)) for g in grads]
        for total, g in zip(sums, grads):
            total += torch.tensordot(factor.to(g.device), g, dims=1)
        loss_sum += losses.sum().to(loss_sum.device)
    return model.flatten(sums), loss_sum, nonfinite
