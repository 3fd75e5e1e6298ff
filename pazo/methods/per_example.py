"""Per-example gradients with torch.func (vmap of grad over functional_call), in chunks.

The whole [B, d] matrix is never needed by DP-SGD: each chunk of examples is turned into gradients,
reduced (clipped and summed, or projected) and dropped, so memory is chunk x d whatever the batch.
The chunk size comes from a memory budget (`grad_memory_mb`), or is given directly.
"""
from __future__ import annotations

from typing import Callable, Iterator

import torch
from torch.func import grad, vmap

from pazo.models.functional import FunctionalModel


def chunk_size_for(model: FunctionalModel, memory_mb: float, overhead: float = 3.0) -> int:
    """Examples per chunk so that chunk x d gradients (plus `overhead` copies for vmap's
    intermediates) fit in `memory_mb`."""
    bytes_per_example = model.dim * model.params[0].element_size() * overhead
    return max(1, int(memory_mb * 2**20 // bytes_per_example))


def _per_example_fn(model: FunctionalModel):
    def loss_one(params, x, y):
        return model.losses_at(params, x.unsqueeze(0), y.unsqueeze(0)).squeeze(0)
    return vmap(grad(loss_one), in_dims=(None, 0, 0), randomness="different")


def iter_per_example_grads(model: FunctionalModel, x: torch.Tensor, y: torch.Tensor,
                           chunk: int) -> Iterator[torch.Tensor]:
    """Yield flat per-example gradients [c, d] chunk by chunk (eval mode is the caller's choice)."""
    fn = _per_example_fn(model)
    params = [p.detach() for p in model.params]
    for start in range(0, len(x), chunk):
        grads = fn(params, x[start:start + chunk], y[start:start + chunk])
        yield torch.cat([g.reshape(g.shape[0], -1) for g in grads], dim=1)


def per_example_grads(model: FunctionalModel, x, y, chunk: int) -> torch.Tensor:
    """All flat per-example gradients [B, d] (tests, GEP's public anchors)."""
    parts = list(iter_per_example_grads(model, x, y, chunk))
    return torch.cat(parts) if parts else x.new_zeros((0, model.dim))


def clip_rows(rows: torch.Tensor, bound: float) -> torch.Tensor:
    """Scale each row to norm at most `bound` (flat clipping)."""
    norms = rows.norm(dim=1, keepdim=True)
    return rows * (bound / (norms + 1e-12)).clamp(max=1.0)


def clipped_sum(model: FunctionalModel, x, y, chunk: int, bound: float,
                transform: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """sum_i clip_bound(transform(g_i)) over the batch, chunk by chunk: the DP-SGD numerator."""
    total = torch.zeros(model.dim, device=model.device, dtype=model.params[0].dtype)
    for rows in iter_per_example_grads(model, x, y, chunk):
        if transform is not None:
            rows = transform(rows)
        total += clip_rows(rows, bound).sum(dim=0)
    return total
