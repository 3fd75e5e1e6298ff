"""Perturbation directions for zeroth-order queries.

A direction set yields, for direction j, one tensor per model parameter, in groups of consecutive
parameters (`Directions.iter_groups`), or in pieces of at most about 2^20 entries
(`Directions.iter_pieces`). Random directions are regenerated from a per-direction seed each time
they are needed (MeZO's trick): a model of up to 2^22 parameters has its direction drawn whole into
one buffer and kept while it is in use; a larger one is drawn a group at a time (about 1/16 of the
parameters), or a piece at a time (the half-precision in-place path, which so holds a few MB of
direction whatever the model), never whole. Both engines and the update see exactly the same
vectors, whichever way they ask for them.
"""
from __future__ import annotations

import itertools
import math
import threading
from collections import deque
from collections.abc import Iterator, Sequence

import torch

from pazo.privacy.device_sum import to_device
from pazo.zo.bases import orthonormal_basis
from pazo.zo.layout import PIECE_NUMEL, draws_per_parameter, model_layout, piece_bounds


def resolve_radius(radius, dim: int) -> float:
    """`sqrt_d` (sqrt(d), the usual two-point sphere), `fourth_root_d` (PAZO-M's norm alignment,
    appendix A.1) or a number."""
    if radius == "sqrt_d":
        return math.sqrt(dim)
    if radius == "fourth_root_d":
        return dim ** 0.25
    value = float(radius)
    if value <= 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    return value


class Directions:
    """A set of `count` directions over a model's parameters.

    `iter_groups(j)` yields direction j as consecutive groups of parameters, each as
    (lo, hi, tensors): the slices of u_j for parameters lo..hi-1, shaped like them (the in-place
    engine adds such a group with one fused `torch._foreach_add_` to parameters that are not
    packed; to packed ones it adds `flat_groups(j)` or `flat(j)`, one operation each); the whole
    direction as one [d] vector, `vector(j)` (the vectorised engine). Consumers must not modify
    the tensors they are given (a direction may be cached and served again)."""

    count: int

    def iter_groups(self, j: int) -> Iterator[tuple[int, int, list[torch.Tensor]]]:
        raise NotImplementedError

    def iter_tensors(self, j: int) -> Iterator[torch.Tensor]:
        for _, _, tensors in self.iter_groups(j):
            yield from tensors

    def tensors(self, j: int) -> list[torch.Tensor]:
        return list(self.iter_tensors(j))

    def iter_pieces(self, j: int, max_numel: int | None = None,
                    reuse: bool = False) -> Iterator[tuple[int, int, torch.Tensor]]:
        """Direction j as (i, lo, piece): entries lo.. of parameter i's flattened view, parameter by
        parameter, in pieces of `piece_bounds(numel, max_numel)`. Here cut from `iter_groups`;
        `SeededDirections` draws the pieces themselves, so that no group is held (`reuse`: the
        caller uses each piece before asking for the next, so one buffer may serve them all)."""
        for first, _, tensors in self.iter_groups(j):
            for k, t in enumerate(tensors):
                flat = t.reshape(-1)
                for lo, hi in piece_bounds(flat.numel(), max_numel):
                    yield first + k, lo, flat[lo:hi]

    def parameter_pieces(self, j: int, i: int) -> Iterator[tuple[int, torch.Tensor]]:
        """Direction j on parameter i alone, as (lo, piece): entries lo.. of its flattened view, in
        pieces of at most about 2^20 entries, whichever parameter was asked for before (the
        on-the-fly queries of half-precision models build each module's perturbed weights as the
        module runs, in the forward's order). Here cut from `iter_pieces` (a pass over the whole
        direction); the direction sets below serve a parameter directly."""
        for k, lo, piece in self.iter_pieces(j):
            if k == i:
                yield lo, piece

    def vector(self, j: int) -> torch.Tensor:
        return torch.cat([t.reshape(-1) for t in self.iter_tensors(j)])

    def flat(self, j: int) -> torch.Tensor | None:
        """Direction j as one flat [d] vector when it is held whole anyway (no copy made), else
        None: the in-place engine then adds it to packed parameters in one operation."""
        return None

    def flat_groups(self, j: int) -> Iterator[tuple[int, int, torch.Tensor]] | None:
        """Direction j as (lo, hi, flat entries of parameters lo..hi-1), group by group, where the
        set draws it so (no copy made), else None: the in-place engine adds each group to its
        slice of the packed parameters in one operation."""
        return None


def _pieces_of(flat: torch.Tensor) -> Iterator[tuple[int, torch.Tensor]]:
    """(lo, flat[lo:hi]) for the `piece_bounds` of a flat tensor."""
    for lo, hi in piece_bounds(flat.numel()):
        yield lo, flat[lo:hi]


class _HeldVectorPieces:
    """`parameter_pieces` for direction sets that hold direction j as a flat vector: views of it,
    split per parameter once per direction."""

    def parameter_pieces(self, j: int, i: int) -> Iterator[tuple[int, torch.Tensor]]:
        cache = getattr(self, "_split", None)
        if cache is None or cache[0] != j:
            cache = self._split = (j, [t.reshape(-1) for t in self.split_flat(self.flat(j))])
        yield from _pieces_of(cache[1][i])


_generators = threading.local()


def _new_generator(device: torch.device | str, seed: int) -> torch.Generator:
    """A generator of its own on `device`, seeded with `seed` (for draws that outlive a call)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def _seeded_generator(device: torch.device, seed: int) -> torch.Generator:
    """This thread's generator for `device`, seeded with `seed`: for draws made at once, start to
    end (a lazy iterator over draws holds its own), without a new generator per direction (tens of
    us between forwards)."""
    cache = getattr(_generators, "by_device", None)
    if cache is None:
        cache = _generators.by_device = {}
    if device.type == "cuda" and device.index is None:   # "cuda" is the current device, which may change
        device = torch.device("cuda", torch.cuda.current_device())
    gen = cache.get(device)
    if gen is None:
        gen = cache[device] = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def _scaled_(draw: torch.Tensor, factor: float | torch.Tensor) -> torch.Tensor:
    """draw *= factor in place (skipped for a Python 1.0; a tensor factor is never read)."""
    if isinstance(factor, torch.Tensor) or factor != 1.0:
        draw.mul_(factor)
    return draw


class SeededDirections(Directions):
    """Gaussian N(0, I_d) directions, or uniform on the sphere of a given radius, from seeds.

    Direction j is drawn from a generator seeded with seeds[j], group by group (`parameter_groups`)
    into one flat buffer per group. On CPU each parameter's slice is filled by its own draw, in
    parameter order, which gives exactly the numbers of `torch.randn(shape)` per parameter
    (`cpu_draws` joins parameters where that draws the same numbers), so a seed's directions on
    CPU do not depend on how the parameters are grouped; on CUDA each group is drawn in pieces of
    2^20 entries (a few kernels, whatever the number of parameters, and no draw larger than a
    piece), so the same seed gives other numbers on CUDA than on CPU. When the whole direction is
    one group it is kept until another direction is asked for.

    Every draw is made in `piece_bounds` pieces (of a parameter on CPU, of a group on CUDA), which
    on CPU gives the numbers of one draw; so `iter_pieces` draws the same numbers a piece at a
    time, holding one piece (about 2^20 entries) instead of a group."""

    def __init__(self, shapes: Sequence[torch.Size], seeds: Sequence[int], distribution: str = "gaussian",
                 radius: float | None = None, scale: float = 1.0, device="cpu", dtype=torch.float32,
                 group_numel: int | None = None, norm_on_device: bool = False):
        if distribution not in ("gaussian", "sphere"):
            raise ValueError(f"unknown direction distribution {distribution!r}; choices: gaussian, sphere")
        if distribution == "sphere" and radius is None:
            raise ValueError("a sphere distribution needs a radius")
        self.seeds, self.distribution = list(seeds), distribution
        self.radius, self.scale, self.dtype = radius, scale, dtype
        self.norm_on_device = norm_on_device   # a sphere's norm as a tensor, never read (`_factor`)
        self.device = device if isinstance(device, torch.device) else torch.device(device)
        self.shapes, self.numels, self.groups, self._cpu_draws = model_layout(shapes, group_numel)
        self._norms: dict[int, float | torch.Tensor] = {}
        self._kept: tuple[int, torch.Tensor, list[torch.Tensor] | None] | None = None  # (j, buffer, its views)
        self._states: tuple[int, list[torch.Tensor]] | None = None    # (j, generator state before each draw)
        self._last_draw: tuple[int, int, torch.Tensor] | None = None  # (j, draw index, its scaled numbers)
        self._plan: tuple[list, tuple] | None = None                  # (every draw, the draws per parameter)

    @property
    def count(self) -> int:
        return len(self.seeds)

    def _raw_groups(self, j: int) -> Iterator[tuple[int, int, torch.Tensor]]:
        """(lo, hi, flat N(0, I) draw of parameters lo..hi-1), a fresh buffer each."""
        gen = _new_generator(self.device, self.seeds[j])
        for lo, hi in self.groups:
            yield lo, hi, self._draw_group(gen, lo, hi)

    def _draw_group(self, gen: torch.Generator, lo: int, hi: int) -> torch.Tensor:
        """Parameters lo..hi-1 of a direction as one fresh flat buffer, drawn from `gen`."""
        buf = torch.empty(sum(self.numels[lo:hi]), device=self.device, dtype=self.dtype)
        for a, b in self._draws(lo, hi):
            buf[a:b].normal_(generator=gen)
        return buf

    def _draws(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The [a, b) ranges of a group's flat buffer (parameters lo..hi-1) drawn one after
        another: on CPU `cpu_draws` (the numbers of one draw per parameter), the group's
        `piece_bounds` on CUDA."""
        if self.device.type != "cpu":
            return piece_bounds(sum(self.numels[lo:hi]))
        return self._cpu_draws[(lo, hi)]

    def _raw_draws(self, j: int, reuse: bool = False,
                   states: list | None = None) -> Iterator[tuple[int, int, int, int, torch.Tensor]]:
        """(lo, hi, a, b, draw): each unscaled N(0, I) draw of `_raw_groups`, entries a..b-1 of the
        flat buffer of parameters lo..hi-1, one at a time; with `reuse`, each drawn into the same
        buffer (valid until the next draw is asked for); `states` gets the generator's state
        before each draw."""
        gen = _new_generator(self.device, self.seeds[j])
        buffer = None
        for lo, hi in self.groups:
            for a, b in self._draws(lo, hi):
                if states is not None:
                    states.append(gen.get_state())
                if not reuse or buffer is None or buffer.numel() < b - a:
                    buffer = torch.empty(max(b - a, PIECE_NUMEL + 15) if reuse else b - a, device=self.device,
                                         dtype=self.dtype)
                yield lo, hi, a, b, buffer[:b - a].normal_(generator=gen)

    def _raw_pieces(self, j: int, reuse: bool = False) -> Iterator[tuple[int, int, torch.Tensor]]:
        """(i, lo, unscaled N(0, I) piece of parameter i from entry lo): the draws of `_raw_draws`
        cut at parameter boundaries."""
        group, starts = None, []
        for lo, hi, a, b, draw in self._raw_draws(j, reuse):
            if group != (lo, hi):              # its parameters' starts in the group's buffer
                group, starts = (lo, hi), [0, *itertools.accumulate(self.numels[lo:hi])]
            for k in range(lo, hi):            # the parameters this draw covers
                start, stop = starts[k - lo], starts[k - lo + 1]
                if stop > a and start < b:
                    yield k, max(a, start) - start, draw[max(a, start) - a:min(b, stop) - a]

    def _views(self, lo: int, hi: int, buf: torch.Tensor) -> list[torch.Tensor]:
        return [piece.view(shape) for piece, shape in zip(buf.split(self.numels[lo:hi]), self.shapes[lo:hi])]

    def _factor(self, j: int, first: torch.Tensor | None = None) -> float | torch.Tensor:
        """The scale of direction j's raw N(0, I) draws: `scale`, or for the sphere scale * radius /
        norm, as a float64 0-dim tensor with `norm_on_device` (a step kept on the device,
        `releases_on_device`: the norm is never read back), else as a Python float. Either scales
        a float32 or float64 draw to the same numbers."""
        if self.distribution == "gaussian":
            return self.scale
        if j not in self._norms:  # with several groups, one extra pass, a piece at a time, to learn the norm
            if first is not None:
                norm = torch.linalg.vector_norm(first, dtype=torch.float64)   # one pass, no copy
            else:                 # the pass records the generator's states too (`parameter_pieces`)
                norm = self._record_states(j, norm=True).sqrt()
            self._norms[j] = norm if self.norm_on_device else float(norm)
        return self.scale * self.radius / self._norms[j]

    def iter_groups(self, j: int) -> Iterator[tuple[int, int, list[torch.Tensor]]]:
        if len(self.groups) == 1:
            buf = self._whole(j)
            if self._kept[2] is None:                  # the per-parameter views, made once per direction
                self._kept = (j, buf, self._views(*self.groups[0], buf))
            yield *self.groups[0], self._kept[2]
            return
        for lo, hi, buf in self._scaled_groups(j):
            yield lo, hi, self._views(lo, hi, buf)

    def _scaled_groups(self, j: int) -> Iterator[tuple[int, int, torch.Tensor]]:
        """(lo, hi, flat buffer of parameters lo..hi-1) of direction j, drawn (and scaled) a group
        at a time, a fresh buffer each."""
        factor = self._factor(j)
        for lo, hi, buf in self._raw_groups(j):
            yield lo, hi, _scaled_(buf, factor)

    def flat_groups(self, j: int) -> Iterator[tuple[int, int, torch.Tensor]]:
        if len(self.groups) == 1:
            return iter([(*self.groups[0], self._whole(j))])
        return self._scaled_groups(j)

    def _whole(self, j: int) -> torch.Tensor:
        """Direction j of a one-group model as one flat buffer, drawn (and scaled) once and kept
        until another direction is asked for; its per-parameter views only when asked for."""
        if self._kept is None or self._kept[0] != j:
            buf = self._draw_group(_seeded_generator(self.device, self.seeds[j]), *self.groups[0])
            self._kept = (j, _scaled_(buf, self._factor(j, buf)), None)
        return self._kept[1]

    def iter_pieces(self, j: int, max_numel: int | None = None,
                    reuse: bool = False) -> Iterator[tuple[int, int, torch.Tensor]]:
        """As `Directions.iter_pieces`; a direction of several groups is drawn a piece at a time
        (the pieces of `_draws`: `max_numel` is not used for it), so no group is ever held. With
        `reuse`, every piece is drawn into one buffer: a piece is valid only until the next is
        asked for (fresh buffers piece after piece fragment the CPU heap; see half_precision.py)."""
        if len(self.groups) == 1:                      # held whole (kept) anyway: cut from it
            yield from super().iter_pieces(j, max_numel)
            return
        factor = self._factor(j)
        for i, lo, piece in self._raw_pieces(j, reuse):
            yield i, lo, _scaled_(piece, factor)

    def flat(self, j: int) -> torch.Tensor | None:
        return self._whole(j) if len(self.groups) == 1 else None

    def vector(self, j: int) -> torch.Tensor:
        if len(self.groups) == 1:
            return self._whole(j)
        return torch.cat([buf for _, _, buf in self._scaled_groups(j)])

    def parameter_pieces(self, j: int, i: int) -> Iterator[tuple[int, torch.Tensor]]:
        """As `Directions.parameter_pieces`. A one-group direction is cut from the kept buffer.
        Otherwise the generator's state before each draw of direction j is recorded in one pass
        (`_draw_states`, with the sphere's norm), and a draw is redrawn from its state when a
        parameter it covers is asked for (the last one is kept: consecutive parameters share it):
        the same numbers as every other way of asking, a draw (about 2^20 entries) held at a time."""
        if len(self.groups) == 1:
            start = sum(self.numels[:i])
            yield from _pieces_of(self._whole(j)[start:start + self.numels[i]])
            return
        factor = self._factor(j)                       # before the states: a sphere's norm pass records them
        states = self._draw_states(j)
        if self._plan is None:
            self._plan = (self._all_draws(), self._coverage())
        all_draws, coverage = self._plan
        for index, lo, hi, at in coverage[i]:
            if self._last_draw is None or self._last_draw[:2] != (j, index):
                a, b = all_draws[index]
                gen = torch.Generator(device=self.device)
                gen.set_state(states[index])
                buf = self._last_draw[2] if self._last_draw is not None else None
                if buf is None or buf.numel() < b - a:
                    buf = torch.empty(max(b - a, PIECE_NUMEL + 15), device=self.device, dtype=self.dtype)
                _scaled_(buf[:b - a].normal_(generator=gen), factor)
                self._last_draw = (j, index, buf)
            yield at, self._last_draw[2][lo:hi]

    def _all_draws(self) -> list[tuple[int, int]]:
        """Every draw of a direction, group after group (ranges within each group's buffer)."""
        return [draw for lo, hi in self.groups for draw in self._draws(lo, hi)]

    def _coverage(self) -> tuple:
        """`draws_per_parameter` of this layout and device (cached with the layout)."""
        return draws_per_parameter(tuple(self.numels), tuple(self.groups),
                                    tuple(tuple(self._draws(lo, hi)) for lo, hi in self.groups))

    def _draw_states(self, j: int) -> list[torch.Tensor]:
        """The generator's state before each draw of direction j (one pass drawing it all, a
        draw at a time into one buffer), kept until another direction is asked for."""
        if self._states is None or self._states[0] != j:
            self._record_states(j)
        return self._states[1]

    def _record_states(self, j: int, norm: bool = False) -> torch.Tensor | None:
        """One pass over direction j's draws (`_raw_draws`) that records the generator's state
        before each; with `norm`, returns the squared norm of the unscaled direction, summed draw
        by draw in order (a float64 0-dim tensor on the directions' device)."""
        states: list[torch.Tensor] = []
        draws = (draw for *_, draw in self._raw_draws(j, reuse=True, states=states))
        total = None
        if norm:
            total = torch.zeros((), dtype=torch.float64, device=self.device)
            for draw in draws:
                total = total + torch.linalg.vector_norm(draw, dtype=torch.float64) ** 2
        else:
            deque(draws, maxlen=0)
        self._states = (j, states)
        return total


class FlatDirections(_HeldVectorPieces, Directions):
    """Explicit directions held as rows of a flat [count, d] tensor (PAZO-S candidates)."""

    def __init__(self, flat: torch.Tensor, split_flat):
        self.rows, self.split_flat = flat, split_flat

    @property
    def count(self) -> int:
        return self.rows.shape[0]

    def iter_groups(self, j: int) -> Iterator[tuple[int, int, list[torch.Tensor]]]:
        views = self.split_flat(self.rows[j])
        yield 0, len(views), views

    def vector(self, j: int) -> torch.Tensor:
        return self.rows[j]

    def flat(self, j: int) -> torch.Tensor:
        return self.rows[j]


def orthogonal_directions(dim: int, seed: int, count: int, radius: float, split_flat, device="cpu",
                          dtype=torch.float32) -> FlatDirections:
    """`count` orthonormal directions, uniform on the Stiefel manifold: Gram-Schmidt (a QR with
    positive diagonal) of a seeded Gaussian block, each row scaled to `radius`, so each row is
    marginally uniform on the sphere of that radius. The block is held in memory ([count, d]):
    unlike i.i.d. directions it cannot be regenerated one parameter at a time."""
    if count > dim:
        raise ValueError(f"cannot draw {count} orthogonal directions in dimension {dim}")
    gen = _new_generator(device, seed)
    block = torch.randn(count, dim, generator=gen, device=device, dtype=torch.float64)
    return FlatDirections((orthonormal_basis(block) * radius).to(dtype), split_flat)


class SubspaceDirections(_HeldVectorPieces, Directions):
    """Directions G^T u_j in the span of the rows of a basis G [k, d] (PAZO-P), u_j = coeffs[j]:
    one [k] x [k, d] product per direction, the last one kept. The coefficients (drawn on the host)
    go to the basis's device in one copy that does not wait for it."""

    def __init__(self, basis: torch.Tensor, coeffs: torch.Tensor, split_flat):
        self.basis, self.split_flat = basis, split_flat
        self.coeffs = to_device(coeffs, basis.device).to(basis.dtype)
        self._kept: tuple[int, torch.Tensor] | None = None

    @property
    def count(self) -> int:
        return self.coeffs.shape[0]

    def vector(self, j: int) -> torch.Tensor:
        if self._kept is None or self._kept[0] != j:
            self._kept = (j, self.coeffs[j] @ self.basis)
        return self._kept[1]

    def iter_groups(self, j: int) -> Iterator[tuple[int, int, list[torch.Tensor]]]:
        views = self.split_flat(self.vector(j))
        yield 0, len(views), views

    def flat(self, j: int) -> torch.Tensor:
        return self.vector(j)


def sample_coefficients(count: int, k: int, distribution: str, generator: torch.Generator) -> torch.Tensor:
    """[count, k] coefficient vectors: N(0, I_k), or uniform on the sphere of radius sqrt(k)."""
    z = torch.randn(count, k, generator=generator, dtype=torch.float64)
    if distribution == "sphere":
        z = z / z.norm(dim=1, keepdim=True) * math.sqrt(k)
    elif distribution != "gaussian":
        raise ValueError(f"unknown coefficient distribution {distribution!r}; choices: gaussian, sphere")
    return z.float()
