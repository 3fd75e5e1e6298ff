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
* transiently, one piece of the direction (`Directions.iter_pieces`: at most about 2^20 entries;
  a direction of up to 2^22 entries is drawn whole and kept while in use) and, for the piece of
  the parameter it moves, its copy, float32 temporaries of round(x + s u) and the check: a few MB
  (about 20 MB at most), whatever the model's size. (Whole-parameter temporaries would be several
  float32 copies of the largest parameter, 0.4 GB each for OPT-1.3B's embedding; a group of the
  direction, about 1/16 of the parameters.)

On a model spread over devices (`model.device_map`) each direction piece is first put on its
parameter's device. Float32 (and float64) parameters keep the in-place engine's own add-and-
subtract.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from pazo.methods.directions import PIECE_NUMEL
from pazo.methods.placement import to_param_device

LOW_PRECISION = (torch.float16, torch.bfloat16)


def has_low_precision(params: Sequence[torch.Tensor]) -> bool:
    return any(p.dtype in LOW_PRECISION for p in params)


class Workspace:
    """Buffers of one piece's size, reused piece after piece and from one shift to the next. On
    CPU, allocating a piece's temporaries afresh (a few MB each) between the small kept entries,
    which live on, fragments glibc's heap: a float16 OPT-125m step's peak resident set measured
    1.38x a forward's with fresh temporaries, 1.07-1.19x for two other methods doing the same work
    (scripts/results/memory_cpu_opt-125m_float16.json records the current figures)."""

    def __init__(self):
        self.buffers: dict[tuple, torch.Tensor] = {}

    def get(self, name: str, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (name, dtype, device)
        buf = self.buffers.get(key)
        if buf is None or buf.numel() < numel:
            buf = self.buffers[key] = torch.empty(max(numel, PIECE_NUMEL + 15), dtype=dtype, device=device)
        return buf[:numel]


def _move_into(out: torch.Tensor, x: torch.Tensor, u: torch.Tensor, s: float, ws: Workspace) -> torch.Tensor:
    """out <- round(x + s u), computed in float32 (s u rounded to float32, then the sum): the
    same numbers as (x.float() + s * u.float()).to(x.dtype), without its temporaries."""
    n, device = x.numel(), x.device
    prod = ws.get("prod", n, torch.float32, device).copy_(u.reshape(-1)).mul_(s)
    work = ws.get("work", n, torch.float32, device).copy_(x.reshape(-1)).add_(prod)
    return out.copy_(work.view(out.shape))


def parameter_pieces(directions, j: int, params: Sequence[torch.Tensor]):
    """Direction j against the parameters, a piece at a time (`Directions.iter_pieces`, each piece
    valid until the next is asked for): (i, lo, the entries lo.. of parameter i's flattened view it
    moves - a view into the live parameter -, the direction's piece on that parameter's device). A
    non-contiguous parameter has no flat view: its pieces are gathered and it is served whole
    (lo = 0; its direction then held whole)."""
    gathered: dict[int, list[torch.Tensor]] = {}
    for i, lo, u in directions.iter_pieces(j, reuse=True):
        p = params[i]
        u = to_param_device(u, p)
        if p.is_contiguous():
            yield i, lo, p.view(-1)[lo:lo + u.numel()], u
            continue
        parts = gathered.setdefault(i, [])
        parts.append(u.clone())
        if sum(t.numel() for t in parts) == p.numel():
            yield i, 0, p, torch.cat(gathered.pop(i)).view(p.shape)


class ExactShift:
    """Moves parameters to x + s u_j and back to x, bit-exactly for half-precision tensors.

    The direction comes a piece of about 2^20 entries at a time (`parameter_pieces`), each put on
    its parameter's device, so a model spread over several devices (`model.device_map`) is shifted
    as one on a single device; the piece's temporaries live in a `Workspace` reused throughout."""

    def __init__(self, params: Sequence[torch.Tensor], workspace: Workspace | None = None):
        self.params = list(params)
        self.workspace = workspace or Workspace()
        self.current: tuple[object, int, float] | None = None      # (directions, j, s)
        self.kept: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # parameter -> (indices, values)
        self.kept_entries = 0        # over all shifts
        self.kept_peak = 0           # the most held at once (one point's), and its bytes
        self.kept_peak_bytes = 0

    @torch.no_grad()
    def shift(self, directions, j: int, s: float) -> None:
        """x <- x + s u_j from the unperturbed x (restore first if perturbed)."""
        self.restore()
        self.kept, ws = {}, self.workspace
        for i, lo, piece, u in parameter_pieces(directions, j, self.params):
            if piece.dtype not in LOW_PRECISION:
                piece.add_(u, alpha=s)
                continue
            n, device = piece.numel(), piece.device
            original = ws.get("original", n, piece.dtype, device).copy_(piece.reshape(-1))
            _move_into(piece, original, u, s, ws)                                   # x' = round(x + s u)
            back = _move_into(ws.get("back", n, piece.dtype, device), piece, u, -s, ws)  # round(x' - s u)
            lost = torch.ne(back, original, out=ws.get("lost", n, torch.bool, device)).nonzero().squeeze(1)
            if len(lost):
                index_dtype = torch.int32 if self.params[i].numel() < 2**31 else torch.int64  # 6 bytes a float16 entry
                self.kept.setdefault(i, []).append(((lost + lo).to(index_dtype), original[lost]))
                self.kept_entries += len(lost)
        pairs = [pair for parts in self.kept.values() for pair in parts]
        held = sum(len(index) for index, _ in pairs)
        if held > self.kept_peak:
            self.kept_peak = held
            self.kept_peak_bytes = sum(index.nbytes + values.nbytes for index, values in pairs)
        self.current = (directions, j, s)

    @torch.no_grad()
    def restore(self) -> None:
        """x + s u_j -> x, bit-exactly for half-precision tensors."""
        if self.current is None:
            return
        directions, j, s = self.current
        for _, _, piece, u in parameter_pieces(directions, j, self.params):
            if piece.dtype not in LOW_PRECISION:
                piece.sub_(u, alpha=s)
            else:
                _move_into(piece, piece, u, -s, self.workspace)
        for i, parts in self.kept.items():
            p = self.params[i]
            for index, values in parts:
                if p.is_contiguous():
                    p.view(-1)[index.long()] = values
                else:
                    p[torch.unravel_index(index.long(), p.shape)] = values
        self.current, self.kept = None, {}
