"""How a direction over a model's parameters is cut: groups of consecutive parameters
(`parameter_groups`), pieces of at most about 2^20 entries (`piece_bounds`) and, on CPU, the draws
that give exactly the numbers of one `torch.randn(shape)` per parameter (`cpu_draws`). A model's
layout is computed once (`model_layout`): a direction set is built every step.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

#: below this many elements a whole direction is generated into one buffer and kept (one
#: generation serves the +lam, -lam, restore and update of that direction)
WHOLE_DIRECTION_NUMEL = 2 ** 22
#: the pieces of `Directions.iter_pieces`: at most this many entries (and up to 15 more)
PIECE_NUMEL = 2 ** 20
#: larger models are drawn in groups of at most max(WHOLE_DIRECTION_NUMEL, d / GROUPS) elements,
#: so the in-place engine's extra memory is about 1/GROUPS of the parameters
GROUPS = 16


def parameter_groups(numels: Sequence[int], max_numel: int | None = None) -> list[tuple[int, int]]:
    """Consecutive runs [lo, hi) of parameters with at most `max_numel` elements together (a larger
    parameter is a group of its own); `max_numel` defaults to max(2^22, d / 16)."""
    dim = sum(numels)
    limit = max_numel if max_numel is not None else max(WHOLE_DIRECTION_NUMEL, math.ceil(dim / GROUPS))
    groups, lo, size = [], 0, 0
    for i, n in enumerate(numels):
        if i > lo and size + n > limit:
            groups.append((lo, i))
            lo, size = i, 0
        size += n
    if numels:
        groups.append((lo, len(numels)))
    return groups


def piece_bounds(numel: int, max_numel: int | None = None) -> list[tuple[int, int]]:
    """[lo, hi) pieces of `numel` consecutive entries, of at most `max_numel` (default PIECE_NUMEL,
    at least 16) each, except that a last piece of under 16 entries joins the one before: torch's
    CPU `normal_` fills 16 entries at a time and draws a tail of under 16 differently, and with
    this rule drawing the pieces one after another from one generator gives exactly the numbers of
    one draw of the whole (a test checks it)."""
    step = max(16, max_numel or PIECE_NUMEL)
    if numel <= step:
        return [(0, numel)]
    cuts = [*range(0, numel, step), numel]
    if cuts[-1] - cuts[-2] < 16:
        del cuts[-2]
    return list(zip(cuts, cuts[1:]))


def cpu_draws(numels: Sequence[int]) -> list[tuple[int, int]]:
    """The [a, b) ranges of a run of parameters' flat buffer that give, drawn one after another
    from a CPU generator, exactly the numbers of one draw per parameter (`torch.randn(shape)`): each
    parameter's `piece_bounds`, with consecutive whole parameters joined into one draw while the
    draw so far is a multiple of 16 entries and the next parameter has at least 16 (torch fills 16
    at a time, so such a join draws the same numbers) and the draw stays within PIECE_NUMEL. Fewer
    draws, the same direction: a test checks it against per-parameter `torch.randn`."""
    draws: list[tuple[int, int]] = []
    offset = 0
    for n in numels:
        pieces = piece_bounds(n)
        if (len(pieces) == 1 and draws and n >= 16 and (draws[-1][1] - draws[-1][0]) % 16 == 0
                and draws[-1][1] == offset and draws[-1][1] - draws[-1][0] + n <= PIECE_NUMEL):
            draws[-1] = (draws[-1][0], offset + n)
        else:
            draws += [(offset + a, offset + b) for a, b in pieces]
        offset += n
    return draws


def model_layout(shapes: Sequence, group_numel: int | None):
    """`_layout` of shapes given as torch.Size (a model's, as they are: rebuilding them as tuples
    costs more than the rest of a direction set's set-up) or as lists."""
    try:
        return _layout(tuple(shapes), group_numel)
    except TypeError:   # a list among them is not hashable
        return _layout(tuple(map(tuple, shapes)), group_numel)


@functools.lru_cache(maxsize=64)
def _layout(shapes: tuple, group_numel: int | None):
    """(shapes, numels, groups, CPU draws per group) of a model, computed once per model: a
    direction set is built every step."""
    shapes = [torch.Size(s) for s in shapes]
    numels = [s.numel() for s in shapes]
    groups = parameter_groups(numels, group_numel)
    draws = {}
    for lo, hi in groups:
        draws[(lo, hi)] = cpu_draws(numels[lo:hi])
    return shapes, numels, groups, draws


@functools.lru_cache(maxsize=64)
def draws_per_parameter(numels: tuple, groups: tuple, draws: tuple) -> tuple:
    """For each parameter, the draws that cover it, as (draw index, the draw's entries [a, b) within
    it, where they go in the parameter's flattened view). `draws` is per group, in order: the
    [a, b) ranges of the group's flat buffer drawn one after another from one generator."""
    per_parameter: list[list[tuple[int, int, int, int]]] = [[] for _ in numels]
    index = 0
    for (lo, hi), group_draws in zip(groups, draws):
        start = 0
        starts = []
        for n in numels[lo:hi]:
            starts.append(start)
            start += n
        for a, b in group_draws:
            for k in range(lo, hi):
                first, stop = starts[k - lo], starts[k - lo] + numels[k]
                if stop > a and first < b:
                    lo_in_draw, hi_in_draw = max(a, first) - a, min(b, stop) - a
                    per_parameter[k].append((index, lo_in_draw, hi_in_draw, max(a, first) - first))
            index += 1
    return tuple(tuple(p) for p in per_parameter)
