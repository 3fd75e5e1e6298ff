"""Perturbation directions for zeroth-order queries.

A direction set yields, for direction j, one tensor per model parameter. Random directions are
regenerated from a per-direction seed each time they are needed (MeZO's trick: the in-place engine
never holds more than one parameter's slice of a direction), so both engines and the update see
exactly the same vectors.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch


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
    """A set of `count` directions; `iter_tensors(j)` yields direction j one parameter at a time."""

    count: int

    def iter_tensors(self, j: int) -> Iterator[torch.Tensor]:
        raise NotImplementedError

    def tensors(self, j: int) -> list[torch.Tensor]:
        return list(self.iter_tensors(j))


class SeededDirections(Directions):
    """Gaussian N(0, I_d) directions, or uniform on the sphere of a given radius, from seeds."""

    def __init__(self, shapes: Sequence[torch.Size], seeds: Sequence[int], distribution: str = "gaussian",
                 radius: float | None = None, scale: float = 1.0, device="cpu", dtype=torch.float32):
        if distribution not in ("gaussian", "sphere"):
            raise ValueError(f"unknown direction distribution {distribution!r}; choices: gaussian, sphere")
        if distribution == "sphere" and radius is None:
            raise ValueError("a sphere distribution needs a radius")
        self.shapes, self.seeds, self.distribution = list(shapes), list(seeds), distribution
        self.radius, self.scale, self.device, self.dtype = radius, scale, device, dtype
        self._norms: dict[int, float] = {}

    @property
    def count(self) -> int:
        return len(self.seeds)

    def _raw(self, j: int) -> Iterator[torch.Tensor]:
        gen = torch.Generator(device=self.device)
        gen.manual_seed(self.seeds[j])
        for shape in self.shapes:
            yield torch.randn(shape, generator=gen, device=self.device, dtype=self.dtype)

    def _factor(self, j: int) -> float:
        if self.distribution == "gaussian":
            return self.scale
        if j not in self._norms:  # one extra pass to learn the norm; nothing is kept
            self._norms[j] = math.sqrt(sum(float(z.double().pow(2).sum()) for z in self._raw(j)))
        return self.scale * self.radius / self._norms[j]

    def iter_tensors(self, j: int) -> Iterator[torch.Tensor]:
        factor = self._factor(j)
        for z in self._raw(j):
            yield z.mul_(factor) if factor != 1.0 else z



class FlatDirections(Directions):
    """Explicit directions held as rows of a flat [count, d] tensor (PAZO-S candidates)."""

    def __init__(self, flat: torch.Tensor, split_flat):
        self.flat, self.split_flat = flat, split_flat

    @property
    def count(self) -> int:
        return self.flat.shape[0]

    def iter_tensors(self, j: int) -> Iterator[torch.Tensor]:
        yield from self.split_flat(self.flat[j])



def orthogonal_directions(dim: int, seed: int, count: int, radius: float, split_flat, device="cpu",
                          dtype=torch.float32) -> FlatDirections:
    """`count` orthonormal directions, uniform on the Stiefel manifold: Gram-Schmidt (a QR with
    positive diagonal) of a seeded Gaussian block, each row scaled to `radius`, so each row is
    marginally uniform on the sphere of that radius. The block is held in memory ([count, d]):
    unlike i.i.d. directions it cannot be regenerated one parameter at a time."""
    if count > dim:
        raise ValueError(f"cannot draw {count} orthogonal directions in dimension {dim}")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    block = torch.randn(count, dim, generator=gen, device=device, dtype=torch.float64)
    return FlatDirections((orthonormal_basis(block) * radius).to(dtype), split_flat)


class SubspaceDirections(Directions):
    """Directions G^T u_j in the span of the rows of a basis G [k, d] (PAZO-P), u_j = coeffs[j]."""

    def __init__(self, basis: torch.Tensor, coeffs: torch.Tensor, split_flat):
        self.basis, self.coeffs, self.split_flat = basis, coeffs, split_flat

    @property
    def count(self) -> int:
        return self.coeffs.shape[0]

    def iter_tensors(self, j: int) -> Iterator[torch.Tensor]:
        u = self.coeffs[j].to(self.basis)
        for block in self.split_flat(self.basis):  # [k, *shape] views
            yield torch.tensordot(u, block, dims=1)



def sample_coefficients(count: int, k: int, distribution: str, generator: torch.Generator) -> torch.Tensor:
    """[count, k] coefficient vectors: N(0, I_k), or uniform on the sphere of radius sqrt(k)."""
    z = torch.randn(count, k, generator=generator, dtype=torch.float64)
    if distribution == "sphere":
        z = z / z.norm(dim=1, keepdim=True) * math.sqrt(k)
    elif distribution != "gaussian":
        raise ValueError(f"unknown coefficient distribution {distribution!r}; choices: gaussian, sphere")
    return z.float()


def orthonormal_basis(grads: torch.Tensor, rel_tol: float = 1e-5) -> torch.Tensor:
    """Orthonormal rows spanning the rows of grads [k, d], for k << d: Gram-Schmidt with
    re-orthogonalisation in float64, i.e. the Q of a QR with positive diagonal, but without
    cuSOLVER's slow QR of a tall d x k matrix. Rows whose remainder is negligible next to their
    own norm (linearly dependent or zero gradients) are dropped, so the result is [rank, d]."""
    rows = grads.double()
    basis: list[torch.Tensor] = []
    for g in rows:
        v = g.clone()
        for _ in range(2):  # twice is enough (Giraud et al. 2005)
            for b in basis:
                v -= (b @ v) * b
        norm, scale = v.norm(), g.norm()
        if scale > 0 and norm > rel_tol * scale:
            basis.append(v / norm)
    if not basis:
        return grads.new_zeros((0, grads.shape[1]))
    return torch.stack(basis).to(grads.dtype).contiguous()


def normalized_rows(grads: torch.Tensor) -> torch.Tensor:
    """Each gradient divided by its norm (PAZO-P'); zero gradients are dropped."""
    norms = grads.norm(dim=1)
    keep = norms > 0
    return (grads[keep] / norms[keep, None]).contiguous()
