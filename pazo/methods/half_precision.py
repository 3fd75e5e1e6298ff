"""Bit-exact perturb / restore of float16 and bfloat16 parameters for the in-place engine.

MeZO's cycle x -> x + s u -> (evaluate) -> x - s u rounds twice in half precision, and what the
rounding lost is not given back: the parameters drift a little with every query, and over a long
run (MeZO issue 42: LLaMA-2 in fp16) the drift can dominate the training. Here the perturbed
value is rounded once from float32 (x + s u computed in float32), and the restore computes
round(x' - s u) the same way; wherever that is not the original value, the original values are
kept, sparsely (index and value), at perturbation time. Restoring writes round(x' - s u) and then
puts the kept values back: the parameters are bit-identical to what they were, whatever the
scale.

What is held while the parameters are perturbed, beyond the parameters themselves:

* the kept entries, where rounding did not cancel: 6 bytes each (an int32 index and the float16
  value). Measured on random float16 matrices of scale 0.02 at MeZO's s = 1e-3, 4.4% of the
  entries (about 13% of the parameters' memory); at s = 1e-2, 22%. They are held from the shift
  to the restore.
* one group of the direction at a time (`SeededDirections`: the whole direction up to 2^22
  entries, else groups of about 1/16 of the parameters, a larger parameter alone), as in MeZO.
* transiently, while one parameter is moved: a piece of at most `CHUNK_NUMEL` (2^20) entries of
  its flattened view - its copy, float32 temporaries of round(x + s u) and the check - a few MB
  (about 20 MB at most), whatever the parameter's size (whole-parameter temporaries would be
  several float32 copies of the largest parameter: 0.4 GB each for OPT-1.3B's embedding).

On a model spread over devices (`model.device_map`) each direction tensor is first put on its
parameter's device (`pazo/methods/placement.py`). Float32 (and float64) parameters keep the
in-place engine's own add-and-subtract.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from pazo.methods.placement import to_param_devices

LOW_PRECISION = (torch.float16, torch.bfloat16)


def has_low_precision(params: Sequence[torch.Tensor]) -> bool:
    return any(p.dtype in LOW_PRECISION for p in params)


def _moved(p: torch.Tensor, u: torch.Tensor, s: float) -> torch.Tensor:
    """round(p + s u), computed in float32 for half-precision p."""
    return (p.float() + s * u.float()).to(p.dtype)


#: a half-precision parameter is moved and checked in pieces of at most this many entries of its
#: flattened view, so the float32 temporaries and the copy of the original are a few MB however
#: large the parameter (OPT-1.3B's embedding: 103M entries, 0.8 GB per float32 copy)
CHUNK_NUMEL = 2 ** 20


class ExactShift:
    """Moves parameters to x + s u_j and back to x, bit-exactly for half-precision tensors.

    The direction's tensors are put on their parameters' devices (`to_param_devices`), so a model
    spread over several devices (`model.device_map`) is shifted as one on a single device."""

    def __init__(self, params: Sequence[torch.Tensor], chunk_numel: int = CHUNK_NUMEL):
        self.params = list(params)
        self.chunk_numel = int(chunk_numel)
        self.current: tuple[object, int, float] | None = None      # (directions, j, s)
        self.kept: list[tuple[torch.Tensor, torch.Tensor] | None] = []
        self.kept_entries = 0

    def _pieces(self, p: torch.Tensor, u: torch.Tensor):
        """(offset, piece of p, piece of u) over p's flattened view, at most `chunk_numel` each; a
        non-contiguous p is one piece (written through its own view)."""
        if not p.is_contiguous():
            yield 0, p, u
            return
        flat_p, flat_u = p.view(-1), u.reshape(-1)
        for lo in range(0, flat_p.numel(), self.chunk_numel):
            yield lo, flat_p[lo:lo + self.chunk_numel], flat_u[lo:lo + self.chunk_numel]

    @torch.no_grad()
    def shift(self, directions, j: int, s: float) -> None:
        """x <- x + s u_j from the unperturbed x (restore first if perturbed)."""
        self.restore()
        self.kept = []
        for p, u in zip(self.params, _direction_on_params(directions, j, self.params)):
            if p.dtype not in LOW_PRECISION:
                p.add_(u, alpha=s)
                self.kept.append(None)
                continue
            index_dtype = torch.int32 if p.numel() < 2**31 else torch.int64   # 6 bytes per kept float16 entry
            lost_parts, value_parts = [], []
            for lo, piece, u_piece in self._pieces(p, u):
                original = piece.clone()
                piece.copy_(_moved(original, u_piece, s))
                lost = (_moved(piece, u_piece, -s) != original).flatten().nonzero().squeeze(1)
                if len(lost):
                    value_parts.append(original.flatten()[lost])
                    lost_parts.append((lost + lo).to(index_dtype))
                del original
            if lost_parts:
                kept = (torch.cat(lost_parts), torch.cat(value_parts))
                self.kept.append(kept)
                self.kept_entries += len(kept[0])
            else:
                self.kept.append(None)
        self.current = (directions, j, s)

    @torch.no_grad()
    def restore(self) -> None:
        """x + s u_j -> x, bit-exactly for half-precision tensors."""
        if self.current is None:
            return
        directions, j, s = self.current
        for p, u, kept in zip(self.params, _direction_on_params(directions, j, self.params), self.kept):
            if p.dtype not in LOW_PRECISION:
                p.sub_(u, alpha=s)
                continue
            for _, piece, u_piece in self._pieces(p, u):
                piece.copy_(_moved(piece, u_piece, -s))
            if kept is not None:
                p.view(-1)[kept[0].long()] = kept[1]
        self.current, self.kept = None, []


def _direction_on_params(directions, j: int, params: Sequence[torch.Tensor]):
    """Direction j's tensors, group by group, each on its parameter's device."""
    for lo, hi, tensors in directions.iter_groups(j):
        yield from to_param_devices(tensors, params[lo:hi])
