"""Queries of float16 and bfloat16 models that leave the parameters bit-identical.

MeZO's cycle x -> x + s u -> (evaluate) -> x - s u rounds twice in half precision, and what the
rounding lost is not given back: the parameters drift a little with every query, and over a long
run (MeZO issue 42: LLaMA-2 in fp16) the drift can dominate the training. Two ways here, each
evaluating the model at round(x + s u), computed in float32 and rounded once (`_move_into`):

* on the fly (`PerturbedForward`, what the in-place engine uses): the parameters are never
  written. While a query runs, each module that owns trainable parameters is given round(x + s u)
  of them when it is called (forward hooks) and its own parameters back when it returns. Held
  beyond the forward's memory: one module's perturbed weights (the largest is the embedding; OPT
  ties it to the output layer: 74 MiB of OPT-125m in float16, 0.2 GiB of OPT-1.3B, 3.1% of
  OPT-6.7B's parameters) and a draw of the direction (`Directions.parameter_pieces`, about 2^20
  entries). Needs every weight to be read by its own module's forward; the engine checks that on
  its first query (`at(..., watch=True)`).
* exact shift (`ExactShift`, the fallback: recurrent layers, or a weight read outside its
  module): the parameters move to round(x + s u) and back to round(x' - s u); wherever that is not
  the original value, the original values are kept, sparsely (an int32 index and the float16
  value, 6 bytes each), from the shift to the restore. Measured on random float16 matrices of
  scale 0.02 at MeZO's s = 1e-3, 4.4% of the entries (about 13% of the parameters' memory); at
  s = 1e-2, 22%. Transiently one piece of the direction (`Directions.iter_pieces`) and, for the
  piece of the parameter it moves, its copy, float32 temporaries and the check: about 20 MB at
  most, whatever the model's size.

On a model spread over devices (`model.device_map`) each direction piece is first put on its
parameter's device. Float32 (and float64) parameters keep the in-place engine's own add-and-
subtract (a half-precision model's float32 parameters are perturbed on the fly with the others).
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
from torch import nn

from pazo.zo.layout import PIECE_NUMEL
from pazo.zo.placement import to_param_device

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


#: methods and properties that read a tensor's metadata only: allowed on a watched parameter (any
#: other use, `.T`, `.data` and `data_ptr` included, counts as reading its values)
_METADATA_METHODS = {"size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "is_contiguous",
                     "is_floating_point", "is_complex", "element_size", "get_device", "__len__"}
_METADATA_PROPERTIES = {"dtype", "device", "shape", "requires_grad", "is_cuda", "is_cpu", "is_meta", "ndim", "layout",
                        "is_leaf", "grad_fn", "grad", "names", "is_sparse", "is_quantized", "itemsize", "nbytes"}


def _reads_values(func) -> bool:
    name = getattr(func, "__name__", "")
    if name == "__get__":                              # a property: its descriptor's name says which
        return getattr(getattr(func, "__self__", None), "__name__", None) not in _METADATA_PROPERTIES
    return name not in _METADATA_METHODS


class _Watched(torch.Tensor):
    """A parameter's stand-in while `PerturbedForward` checks a forward: the same storage, and
    every torch function that reads its values outside its own module's forward is recorded."""

    reads: list[tuple[int, str]] | None = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if cls.reads is not None and _reads_values(func):
            leaves, _ = torch.utils._pytree.tree_flatten((args, kwargs or {}))
            name = getattr(getattr(func, "__self__", None), "__name__", None) if func.__name__ == "__get__" else None
            cls.reads += [(t._pazo_index, name or getattr(func, "__name__", str(func)))
                          for t in leaves if isinstance(t, _Watched)]
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class PerturbedForward:
    """Queries at x + s u_j that never write the parameters: while a point is set (`at`), every
    module that owns trainable parameters runs its forward with round(x + s u_j) of them in their
    place, built (as `_move_into`: in float32, rounded once) when the module is called and dropped
    when it returns; the parameters are the module's again on leaving `at`, also when the forward
    raises. So nothing is restored and nothing is kept: what a query holds beyond the forward's
    own memory is one module's perturbed parameters (the largest is the input embedding, tied to
    the output layer in OPT: 74 MiB of OPT-125m's 239 MiB in float16, 0.2 GiB of OPT-1.3B's 2.5)
    and a draw of the direction (about 2^20 entries, `Directions.parameter_pieces`). The losses are
    those of `ExactShift`, which moves the parameters to the same round(x + s u_j).

    The hooks are torch's global module hooks, registered only while a point is set (nothing is
    left on the model). They see only calls through `module(...)`: a parameter whose values are read without its
    owner's forward (a parent reading a child's weight) would silently stay unperturbed. `at(...,
    watch=True)` runs a forward with every parameter replaced, outside its owner's forward, by a
    stand-in that records such reads (`direct_reads`, no memory: the same storage): any torch
    function or tensor property but metadata (a copy of the weight kept elsewhere, or a kernel
    given its raw pointer, is not seen); the engine does so on its first query and falls back to
    `ExactShift` if any was made. Recurrent layers (`nn.RNNBase`, whose fused kernels read cached
    weight lists) and non-contiguous parameters are not supported (`unsupported`)."""

    def __init__(self, module: nn.Module, params: Sequence[torch.Tensor], workspace: Workspace | None = None):
        index = {id(p): i for i, p in enumerate(params)}
        self.params, self.workspace = list(params), workspace or Workspace()
        owners = [(m, [(name, index[id(p)]) for name, p in m._parameters.items() if p is not None and id(p) in index])
                  for m in module.modules()]
        self.owners = [(m, own) for m, own in owners if own]
        recurrent = sorted({type(m).__name__ for m, _ in self.owners if isinstance(m, nn.RNNBase)})
        strided = sum(not p.is_contiguous() for p in self.params)
        self.unsupported = (f"recurrent layers ({', '.join(recurrent)})" if recurrent else
                            f"{strided} non-contiguous parameter(s)" if strided else None)
        self.owned = {id(m): own for m, own in self.owners}
        self.point: tuple[object, int, float] | None = None
        self.outside: list[torch.Tensor] = self.params      # what owners hold outside their forward
        self.checked = False                               # the engine's first query watched for direct reads
        self.direct_reads: list[tuple[int, str]] = []      # (parameter, torch function) of the last watch
        self.temporary_peak_bytes = 0   # the most one module's perturbed parameters took (memory reports)

    def _swap_in(self, module, args) -> None:
        """Global forward pre-hook while a point is set: an owner's weights become its perturbed ones."""
        own = self.owned.get(id(module))
        if own is not None:
            held = 0
            for name, i in own:
                module._parameters[name] = tensor = self.perturbed(i)
                held += tensor.nbytes
            self.temporary_peak_bytes = max(self.temporary_peak_bytes, held)

    def _swap_out(self, module, args, output) -> None:
        """Global forward hook: the owner's own weights back (the perturbed ones are dropped)."""
        own = self.owned.get(id(module))
        if own is not None:
            for name, i in own:
                module._parameters[name] = self.outside[i]

    @torch.no_grad()
    def perturbed(self, i: int) -> torch.Tensor:
        """Parameter i at the current point, a new tensor: round(x_i + s u_j) for a half-precision
        one (as `ExactShift` moves it), x_i + s u_j as the in-place add computes it otherwise."""
        directions, j, s = self.point
        p = self.params[i]
        out = torch.empty_like(p)
        source, target = p.view(-1), out.view(-1)          # contiguous (else `unsupported`)
        for lo, u in directions.parameter_pieces(j, i):
            n, u = u.numel(), to_param_device(u, p)
            if p.dtype in LOW_PRECISION:
                _move_into(target[lo:lo + n], source[lo:lo + n], u, s, self.workspace)
            else:
                torch.add(source[lo:lo + n], u, alpha=s, out=target[lo:lo + n])
        return out

    def _hold(self, tensors: Sequence[torch.Tensor]) -> None:
        self.outside = list(tensors)
        for m, own in self.owners:
            for name, i in own:
                m._parameters[name] = self.outside[i]

    @contextlib.contextmanager
    def at(self, directions, j: int, s: float, watch: bool = False):
        """Forwards inside see the parameters at x + s u_j (with `watch`, reads of a parameter
        outside its owner's forward are recorded in `direct_reads`)."""
        hooks = []
        try:
            self.point = (directions, j, s)
            hooks += [nn.modules.module.register_module_forward_pre_hook(self._swap_in),   # only while inside
                      nn.modules.module.register_module_forward_hook(self._swap_out)]
            if watch:
                watched = []
                for i, p in enumerate(self.params):
                    stand_in = p.detach().as_subclass(_Watched)
                    stand_in._pazo_index = i
                    watched.append(stand_in)
                self._hold(watched)
                _Watched.reads = []
            yield
        finally:
            for hook in hooks:
                hook.remove()
            self.point = None
            if watch:
                self.direct_reads, _Watched.reads = _Watched.reads or [], None
            self._hold(self.params)          # also whatever a raising forward left behind
