"""Every noise draw that protects the private data, and what one step releases.

An auditor reads this file to see all of them: the scalar privatiser of the zeroth-order methods
(MeZO/DPZero/DP-ZO/PAZO-M/P/S), DP-AggZO's jointly clipped scalars, the vector privatiser of the
first-order ones (DP-SGD, DPMD, DOPE-SGD, GEP) and DP-ZOGD's isotropic parameter noise. All draw
from the run's `noise` stream (`noise_generator`), never from the streams that choose batches or
directions.

Scalars. Each query of a step is a vector of per-example scalars (a finite difference, or a loss). It is
clipped to [-C, C] per example, summed, noised and divided by the *expected* batch size b (the
realised size of a Poisson batch is itself private). S is the sensitivity of the sum (C under
add/remove adjacency, 2C under replace-one).

* Gaussian: N(0, (sqrt(queries) S sigma)^2) per query; the `queries` noisy sums of one batch are
  together one Gaussian mechanism with multiplier sigma.
* Laplace: Laplace(0, queries S sigma) per query; by basic composition the step is (1/sigma)-DP
  on the batch (for Laplace noise the scale grows with the number of queries, not its root).

Jointly clipped scalars (DP-AggZO). Each example's values of the Q queries form one Q-vector,
scaled to L2 norm at most C; the Q sums are noised with N(0, (S sigma)^2) each (one Gaussian
mechanism on a Q-vector of sensitivity S) and divided by b. With Q = 1 it is the Gaussian scalar
privatiser, draw for draw.

Vectors. Each per-example vector is scaled to norm at most C (`clip_factors`, used by the
first-order methods' per-example machinery) before the sum is noised.

Non-finite contributions. An example with a NaN or infinite value (a scalar of any query, an entry
of its vector: a norm that is not finite) contributes zero to every sum of the release, as if it
were not in the batch (the noise is drawn alike). Its value cannot be clipped (NaN compares with
nothing, and 0 x inf is NaN), so one such example would otherwise make the whole release NaN. How
many there were is a private diagnostic of the step (`nonfinite_examples`).

Debug breaks (`debug_break`), for privacy auditing only (`python -m pazo.audit`, which checks that
its white-box audit catches them; `python -m pazo.train` refuses them): `noise_div10` divides every
noise scale here by 10 without changing sigma or the printed epsilon; `no_clip` turns clipping into
the identity; `noise_from_direction_seed` draws the noise from the run's *direction* stream, whose
seed is public (the directions of a zeroth-order run are regenerated from it), instead of the
secret noise stream. Each is one line at the spot it breaks, in a release on Python floats and
again in its device form (`release_tensor`) where that has its own.
"""
from __future__ import annotations

import array
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from pazo.privacy.device_sum import exact_row_sums, to_device
from pazo.rng import RandomStreams


@dataclass(frozen=True)
class Release:
    """What one step releases about the private batch, for the accountant and the noise scale.

    queries: noisy sums of the same Poisson batch, the noise split over them
             (std sqrt(queries) * S * sigma each): together one Gaussian mechanism.
    mechanisms: independent Gaussian mechanisms per step, each with multiplier sigma.
    noise: "gaussian", or "laplace" (scale queries * S * sigma per query: a (1/sigma)-DP step).
    joint_clip: each example's values of the queries are clipped together, as one vector of L2 norm
             at most C (DP-AggZO): the noise is not split, S * sigma on each sum (still one Gaussian
             mechanism with multiplier sigma).
    """

    queries: int
    mechanisms: int = 1
    noise: str = "gaussian"
    joint_clip: bool = False


DEBUG_BREAKS = ("noise_div10", "no_clip", "noise_from_direction_seed", "noise_div_batch")
_debug_break: str | None = None


@contextmanager
def debug_break(name: str | None) -> Iterator[None]:
    """Break this file's guarantees on purpose while the block runs (None: no break). For the
    privacy audit's tests of itself only: the guarantee a run prints is false inside."""
    global _debug_break
    if name is not None and name not in DEBUG_BREAKS:
        raise ValueError(f"unknown debug break {name!r}; choices: {', '.join(DEBUG_BREAKS)}")
    previous, _debug_break = _debug_break, name
    try:
        yield
    finally:
        _debug_break = previous


def active_debug_break() -> str | None:
    return _debug_break


def _noise_factor() -> float:
    return 0.1 if _debug_break == "noise_div10" else 1.0  # debug break: noise / 10, epsilon unchanged


def _batch_divisor(rows: Sequence[Sequence[float]]) -> int:
    """1, or under the debug break `noise_div_batch` the realised batch size (the rows' examples)."""
    return max(len(rows[0]), 1) if _debug_break == "noise_div_batch" and rows else 1  # debug break


def clip_factors(norms: torch.Tensor, bound: float) -> torch.Tensor:
    """Per-example factors that scale vectors of norms `norms` to norm at most `bound`; 0 where a
    norm is not finite (the example contributes zero: scale its vector with `scaled_rows`, since
    0 x inf is NaN)."""
    if _debug_break == "no_clip":  # debug break: no clipping
        return torch.ones_like(norms)
    factors = (bound / (norms + 1e-12)).clamp(max=1.0)
    return torch.where(torch.isfinite(norms), factors, torch.zeros_like(factors))


def scaled_rows(rows: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """rows [B, ...] times per-example `factors` (broadcast on dim 0); a row whose factor is 0 (a
    non-finite one, `clip_factors`) becomes exactly 0, whatever its entries."""
    factors = factors.reshape(-1, *([1] * (rows.dim() - 1)))
    return torch.where(factors == 0, torch.zeros((), dtype=rows.dtype, device=rows.device), rows * factors)


def nonfinite_examples(rows: Sequence[Sequence[float]]) -> set[int]:
    """The examples (positions in the rows) with a NaN or infinite value in any row."""
    if all(math.isfinite(sum(row)) for row in rows):  # the common case, one pass (an overflow looks further)
        return set()
    return {i for row in rows for i, v in enumerate(row) if not math.isfinite(v)}


def finite_examples(rows: Sequence[Sequence[float]]) -> Sequence[Sequence[float]]:
    """The rows with every value of each `nonfinite_examples` example set to 0: it contributes zero
    to each sum (the rows themselves when there is none)."""
    bad = nonfinite_examples(rows)
    if not bad:
        return rows
    return [[0.0 if i in bad else v for i, v in enumerate(row)] for row in rows]


def noise_generator(streams: RandomStreams, device: str | torch.device = "cpu", substream: int = 0) -> torch.Generator:
    """A generator on the run's noise stream (distinct `substream`s are independent)."""
    # debug break: the noise from the public direction stream's seed
    stream = "directions" if _debug_break == "noise_from_direction_seed" else "noise"
    return streams.torch_generator(stream, device, substream)


@dataclass(frozen=True)
class NoiseSpec:
    """What the privatiser needs to know; `sigma=None` means a non-private run."""

    sigma: float | None
    clip: float
    expected_batch_size: int
    adjacency: str = "add_remove"  # or "replace_one" (sensitivity 2C, the original DPZero code)
    mechanism: str = "gaussian"    # or "laplace"

    @property
    def private(self) -> bool:
        return self.sigma is not None

    def sensitivity_for(self, clip: float) -> float:
        """Sensitivity of a sum of values clipped to `clip` under this adjacency."""
        return (2.0 if self.adjacency == "replace_one" else 1.0) * clip

    @property
    def sensitivity(self) -> float:
        return self.sensitivity_for(self.clip)


class LocalSums:
    """The sums of a release when one process holds the whole batch: each row summed exactly
    (`exact_sum`), the batch's size as it is. A data-parallel run's ranks each hold a shard of the
    batch and add their shards' exact sums instead (`pazo.run.distributed.ShardSums`): the same floats."""

    def row_sums(self, rows: Sequence[Sequence[float]]) -> list[float]:
        return [exact_sum(row) for row in rows]

    def count(self, local: int) -> int:
        return local

    def vector_sum(self, local: torch.Tensor) -> torch.Tensor:
        """A float vector summed over the batch (a first-order step's clipped gradients and losses):
        one process holds the whole batch's sum already."""
        return local

    def computed_rows(self, count: int, compute: Callable[[list[int]], torch.Tensor]) -> torch.Tensor:
        """Rows [count, ...] that are computed each on its own (public gradients, one per public
        batch): `compute(indices)` gives the rows of `indices`, in their order. One process computes
        them all; a data-parallel run's ranks each compute their share and gather them
        (`pazo.run.distributed.ShardSums`): each row is one call's, on one rank, sent whole."""
        return compute(list(range(count)))


#: the sums of a one-process run
LOCAL_SUMS = LocalSums()


class ScalarRelease:
    """A release of rows of per-example scalars (`release`, on Python floats), also taken from a
    [Q, B] tensor: `means` (Python floats rounded to its dtype) or the call (a [Q] tensor)."""

    def release(self, rows: Sequence[Sequence[float]]) -> list[float]:
        raise NotImplementedError

    def means(self, values: torch.Tensor) -> list[float]:
        """`release` of the rows of a [Q, B] tensor, rounded to its dtype, as Python floats."""
        return rounded_to(self.release(values.tolist()), values.dtype)

    def release_tensor(self, values: torch.Tensor) -> torch.Tensor:
        """`release` of the rows of a [Q, B] float64 tensor as a [Q] float64 tensor on its device.
        Here through the host (a wrapper that sees the rows, such as the audit's, keeps seeing
        them); `ScalarPrivatizer` and `JointClipPrivatizer` compute it on the device."""
        return torch.tensor(self.release(values.tolist()), dtype=torch.float64, device=values.device)

    def __call__(self, values: torch.Tensor) -> torch.Tensor:
        """values: [Q, B] per-example scalars -> [Q] privatised means (`means`, as a tensor)."""
        return torch.tensor(self.means(values), dtype=values.dtype, device=values.device)


class ScalarPrivatizer(ScalarRelease):
    """Clip, sum, add noise and normalise rows of per-example scalars.

    The arithmetic is done on Python floats (float64), each row's clipped values summed exactly
    (`exact_sum`): the release does not depend on the order of the examples, nor on how a machine
    vectorises a sum, and a zeroth-order step of a small model pays a tensor operation only for the
    noise draw (each costs tens of microseconds between its forward passes), a float64 tensor from
    the noise stream. `release_tensor` is the same release kept on a CUDA device (the design note
    on exact releases)."""

    def __init__(self, spec: NoiseSpec, queries: int, generator: torch.Generator | None,
                 sums: LocalSums = LOCAL_SUMS):
        if queries < 1:
            raise ValueError("queries must be >= 1")
        self.spec, self.queries, self.generator, self.sums = spec, queries, generator, sums

    @property
    def noise_scale(self) -> float:
        """Gaussian std, or Laplace scale, of the noise on each *sum* (before dividing by b)."""
        if not self.spec.private:
            return 0.0
        releases = self.queries if self.spec.mechanism == "laplace" else math.sqrt(self.queries)
        return releases * self.spec.sensitivity * self.spec.sigma * _noise_factor()

    def _noise(self, count: int) -> list[float]:
        """`count` draws of the noise on a sum (std or scale `noise_scale`)."""
        if self.spec.mechanism == "laplace":  # inverse CDF, so that our seeded generator drives it
            return self._noise_tensor(count).tolist()
        scale = self.noise_scale
        return [scale * z for z in torch.randn(count, generator=self.generator, dtype=torch.float64).tolist()]

    def clipped(self, row: Sequence[float]) -> list[float]:
        """Each value clipped to [-C, C]; a NaN or infinite one is 0 (it has no clipped value)."""
        if _debug_break == "no_clip":  # debug break: no clipping
            return list(row)
        c, inf = self.spec.clip, math.inf
        return [(c if v > c else -c if v < -c else v) if -inf < v < inf else 0.0 for v in row]

    def release(self, rows: Sequence[Sequence[float]]) -> list[float]:
        """rows: per query, the per-example scalars -> per query (sum_i clip_C(v_i) + noise) / b,
        float64 (b the expected batch size), an example with a non-finite value in any row
        contributing zero to every query; non-private: the plain mean over the realised batch."""
        if not self.spec.private:
            return plain_row_means(rows, self.sums)
        sums = self.sums.row_sums([self.clipped(row) for row in finite_examples(rows)])
        b, divisor = self.spec.expected_batch_size, _batch_divisor(rows)
        return [(s + z / divisor) / b for s, z in zip(sums, self._noise(len(sums)))]

    def release_tensor(self, values: torch.Tensor) -> torch.Tensor:
        """`release` on the rows' device: the same clip, the same noise draws, each sum within
        one ulp of the host's (`device_sum`), no copy to the host."""
        if not self.spec.private:
            return plain_means(values)
        if _debug_break == "no_clip":  # debug break: no clipping
            clipped = finite_columns(values)
        else:
            clipped = finite_columns(values).clamp(-self.spec.clip, self.spec.clip)
        return noisy_means(exact_row_sums(clipped), self._noise_tensor(len(values)), self.spec, values)

    def _noise_tensor(self, count: int) -> torch.Tensor:
        """`_noise` as a float64 tensor on the host (the same draws, the same products)."""
        if self.spec.mechanism == "laplace":
            u = torch.rand(count, generator=self.generator, dtype=torch.float64) - 0.5
            return -self.noise_scale * torch.sign(u) * torch.log1p(-2 * u.abs())
        return torch.randn(count, generator=self.generator, dtype=torch.float64) * self.noise_scale


class JointClipPrivatizer(ScalarRelease):
    """DP-AggZO's release: rows of per-example scalars (one row per query), each example's column
    of Q values clipped as one vector to L2 norm C, the Q sums each given N(0, (S sigma)^2) and
    divided by the expected batch size b.

    Adding or removing one example moves the vector of sums by at most C in L2 norm, so the Q noisy
    sums are one Gaussian mechanism with multiplier sigma (sensitivity S: C, or 2C replace-one).
    Python floats and exact sums as in `ScalarPrivatizer`, and the same draws: with one query it
    releases what the Gaussian `ScalarPrivatizer` does, bit for bit (a value of norm above C is
    scaled as C * (v / |v|) = +-C)."""

    def __init__(self, spec: NoiseSpec, generator: torch.Generator | None, sums: LocalSums = LOCAL_SUMS):
        if spec.mechanism != "gaussian":
            raise ValueError("joint clipping is a Gaussian mechanism")
        self.spec, self.generator, self.sums = spec, generator, sums

    @property
    def noise_scale(self) -> float:
        """Gaussian std of the noise on each *sum* (before dividing by b): S sigma, not split."""
        if not self.spec.private:
            return 0.0
        return self.spec.sensitivity * self.spec.sigma * _noise_factor()

    def clipped(self, rows: Sequence[Sequence[float]]) -> list[list[float]]:
        """The rows with each example's column scaled to L2 norm at most C (for one value: the
        clamp to [-C, C]); a column with a NaN or infinite entry, or whose norm overflows, is 0."""
        if _debug_break == "no_clip":  # debug break: no clipping
            return [list(row) for row in rows]
        c = self.spec.clip
        columns = []
        for column in zip(*rows):
            norm = math.hypot(*column)   # NaN if an entry is NaN and none infinite, else inf
            if not math.isfinite(norm):
                column = [0.0] * len(column)
            elif norm > c:
                column = [c * (v / norm) for v in column]
            columns.append(column)
        return [list(row) for row in zip(*columns)] if columns else [[] for _ in rows]

    def release(self, rows: Sequence[Sequence[float]]) -> list[float]:
        """rows: per query, the per-example scalars -> per query (sum_i clip_C(v_i)_j + noise) / b,
        float64, an example with a non-finite value contributing zero; non-private: the plain mean
        over the realised batch."""
        if not self.spec.private:
            return plain_row_means(rows, self.sums)
        sums = self.sums.row_sums(self.clipped(rows))
        scale, b, divisor = self.noise_scale, self.spec.expected_batch_size, _batch_divisor(rows)
        noise = [scale * z for z in torch.randn(len(sums), generator=self.generator, dtype=torch.float64).tolist()]
        return [(s + z / divisor) / b for s, z in zip(sums, noise)]

    def release_tensor(self, values: torch.Tensor) -> torch.Tensor:
        """`release` on the rows' device: the same draws; each column's norm is torch's of the
        column scaled by its largest entry (within a few ulps of `math.hypot`, which does not
        overflow either), each sum within one ulp of the host's (`device_sum`)."""
        if not self.spec.private:
            return plain_means(values)
        clipped = values
        if _debug_break != "no_clip":  # debug break: no clipping
            finite = finite_columns(values)
            largest = finite.abs().amax(dim=0)
            norms = largest * torch.linalg.vector_norm(finite / largest.where(largest > 0, 1.0), dim=0)
            usable = torch.isfinite(values).all(dim=0) & torch.isfinite(norms)   # else the column is 0
            c = self.spec.clip
            clipped = finite.where(norms <= c, c * (finite / norms)).where(usable, 0.0)
        noise = torch.randn(len(values), generator=self.generator, dtype=torch.float64) * self.noise_scale
        return noisy_means(exact_row_sums(clipped), noise, self.spec, values)


def plain_row_means(rows: Sequence[Sequence[float]], sums: LocalSums) -> list[float]:
    """A non-private release on Python floats: each row's exact mean over the realised batch (0 for
    an empty one), the batch counted over every shard."""
    count = sums.count(len(rows[0]) if rows else 0)
    return [total / count if count else 0.0 for total in sums.row_sums(rows)]


def finite_columns(values: torch.Tensor) -> torch.Tensor:
    """[Q, B] values with each example that has a NaN or infinite value in any row set to 0 (the
    tensor form of `finite_examples`)."""
    return values.where(torch.isfinite(values).all(dim=0), 0.0)


def plain_means(values: torch.Tensor) -> torch.Tensor:
    """A non-private release: each row's mean over the realised batch (0 for an empty one)."""
    count = values.shape[1]
    return exact_row_sums(values) / count if count else values.new_zeros(len(values))


def noisy_means(sums: torch.Tensor, noise: torch.Tensor, spec: NoiseSpec, values: torch.Tensor) -> torch.Tensor:
    """(sums + noise) / b on the sums' device, `noise` drawn on the host (copied without waiting
    for the device), b the expected batch size; the debug break `noise_div_batch` as `release`."""
    divisor = max(values.shape[1], 1) if _debug_break == "noise_div_batch" and len(values) else 1  # debug break
    return (sums + to_device(noise, sums.device) / divisor) / spec.expected_batch_size


def exact_sum(values: Iterable[float]) -> float:
    """The sum of float64 numbers correctly rounded (`math.fsum`), so independent of their order;
    where fsum gives up (inf + -inf: NaN; an intermediate overflow: then +-inf or NaN, even where the
    exact sum is finite) the plain sum. Clipped values (at most C each) never overflow."""
    values = list(values)
    try:
        return math.fsum(values)
    except (ValueError, OverflowError):
        return sum(values)


def rounded_to(numbers: list[float], dtype: torch.dtype) -> list[float]:
    """Python floats rounded to `dtype` as `torch.tensor(numbers, dtype=dtype).tolist()` rounds
    them (to nearest, ties to even; beyond the range to infinity), without the tensor for float32
    and float64."""
    if dtype == torch.float64:
        return list(numbers)
    if dtype == torch.float32:
        return array.array("f", numbers).tolist()
    return torch.tensor(numbers, dtype=dtype).tolist()


class VectorPrivatizer:
    """Gaussian noise N(0, (S sigma)^2 I) for a sum of per-example vectors, each clipped to norm
    `clip` (S its sensitivity under the run's adjacency), drawn on the parameters' device."""

    def __init__(self, spec: NoiseSpec, generator: torch.Generator):
        self.spec, self.generator = spec, generator

    def noise(self, size: int, clip: float, like: torch.Tensor) -> torch.Tensor:
        std = self.spec.sensitivity_for(clip) * self.spec.sigma * _noise_factor()
        return torch.randn(size, generator=self.generator, device=like.device, dtype=like.dtype) * std

    def __call__(self, clipped_sum: torch.Tensor, clip: float) -> torch.Tensor:
        """(sum_i clip(g_i) + N(0, (S sigma)^2 I)) / b, b the expected batch size."""
        return (clipped_sum + self.noise(clipped_sum.numel(), clip, clipped_sum)) / self.spec.expected_batch_size


class IsotropicNoise:
    """DP-ZOGD's isotropic part (the hidden-state paper's G2): after the directional update,
    x += lr / sqrt(d) * N(0, (1 - beta) s^2 I_d) with s = S sigma / (b sqrt(beta)), where the
    directional scalars carry the variance share beta. It only adds noise; the accountant does not
    count it."""

    def __init__(self, spec: NoiseSpec, beta: float, generator: torch.Generator):
        self.spec, self.beta, self.generator = spec, beta, generator

    def std(self, lr: float, dim: int) -> float:
        s = self.spec.sensitivity * self.spec.sigma / (self.spec.expected_batch_size * self.beta ** 0.5)
        return lr * (1 - self.beta) ** 0.5 * s / dim ** 0.5

    @torch.no_grad()
    def add_to(self, params: Sequence[torch.Tensor], lr: float, dim: int) -> None:
        if not self.spec.private or self.beta >= 1:
            return
        std = self.std(lr, dim)
        for p in params:  # drawn on the generator's device, then put on the parameter's (model.device_map)
            noise = torch.randn(p.shape, generator=self.generator, device=self.generator.device, dtype=p.dtype)
            p.add_(noise.to(p.device), alpha=std)
