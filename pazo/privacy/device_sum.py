"""Sums of float64 rows on the tensor's own device that do not depend on the order of the values,
within one ulp of `math.fsum` (the correctly rounded sum), with no copy to the host.

The host path (`mechanisms.exact_sum`) reads each value to Python; on an accelerator that read waits
for the device, once a step. Here each value is instead split, exactly, into 32-bit pieces on one
grid that covers every float64 (units of 2^-1074, the smallest subnormal), and the pieces are added
as 64-bit integers: an integer sum is the same in any order, on any device. Two carry passes leave
signed digits of at most 2^31 units of their limb, so the limbs below the top two are worth under a
2^-32 part of the total; the top two are added without rounding (two-sum) and the rest, summed in
any order, only decides the last bit in a near-tie:

    sum = round(F_h + F_{h-1} + sum_{k < h-1} F_k),   F_k = d_k 2^(32 k - 1074), h the top non-zero digit

The result differs from `fsum` only where the exact sum lies within about 2^-25 ulp of the midpoint
between two floats (then by one ulp). A row with a NaN or infinite value, or whose exact sum lies
within 2^1005 of overflowing (its top digit's term overflows, over 99.9998% of the largest float),
gets the plain sum, as `exact_sum` gives it (which also falls back where fsum's partial sums
overflow and the exact sum does not: below that margin, here that sum is exact). Rows of fewer
than 2^31 values.
"""
from __future__ import annotations

import functools
import math

import torch

LIMB_BITS = 32
LIMBS = 69               # 2^-1074 .. 2^1024 (2098 bits) and 31 bits of carries, in 32-bit limbs, plus one spare
_LOW = (1 << LIMB_BITS) - 1
_HALF = 1 << (LIMB_BITS - 1)


def exact_row_sums(values: torch.Tensor) -> torch.Tensor:
    """values [..., B] float64 -> [...] the sums of the last dimension (see the module)."""
    if values.dtype != torch.float64:
        raise TypeError(f"exact_row_sums takes float64, got {values.dtype}")
    if values.shape[-1] >= 2**31:
        raise ValueError("exact_row_sums adds at most 2^31 values a row")
    lead = values.shape[:-1]
    rows = values.reshape(math.prod(lead), values.shape[-1])
    finite = torch.isfinite(rows)
    exact = _rounded(_balanced_digits(_limbs(rows.where(finite, 0.0))))
    usable = finite.all(dim=-1) & torch.isfinite(exact)
    return exact.where(usable, rows.sum(dim=-1)).reshape(lead)


def _limbs(rows: torch.Tensor) -> torch.Tensor:
    """[R, B] finite float64 -> [R, LIMBS] int64 limbs whose value sum_k limb_k 2^(32 k - 1074) is
    the exact sum of each row (each limb under B 2^32 in magnitude)."""
    bits = rows.contiguous().view(torch.int64)
    exponent = (bits >> 52) & 0x7FF
    mantissa = bits & ((1 << 52) - 1)
    integer = mantissa.where(exponent == 0, mantissa | (1 << 52))   # value = +-integer * 2^(position - 1074)
    position = exponent.clamp(min=1) - 1
    limb, shift = position >> 5, position & (LIMB_BITS - 1)
    spill = integer >> (LIMB_BITS - shift)
    low = (integer & ((1 << (LIMB_BITS - shift)) - 1)) << shift
    pieces = torch.stack([low, spill & _LOW, spill >> LIMB_BITS], dim=-1)   # each under 2^32: limbs k, k+1, k+2
    signed = pieces * (1 - 2 * (bits < 0)).unsqueeze(-1)
    limbs = torch.zeros(rows.shape[0], LIMBS, dtype=torch.int64, device=rows.device)
    index = limb.unsqueeze(-1) + torch.arange(3, device=rows.device)
    return limbs.scatter_add_(1, index.flatten(1), signed.flatten(1))


def _carried(digits: torch.Tensor, carry: torch.Tensor) -> torch.Tensor:
    """digits with each limb's carry added to the limb above it (the top limb's carry is zero)."""
    return digits + torch.nn.functional.pad(carry[:, :-1], (1, 0))


def _balanced_digits(limbs: torch.Tensor) -> torch.Tensor:
    """The same value as signed digits in [-2^31, 2^31]: a floor carry, then a rounding one."""
    digits = _carried(limbs & _LOW, limbs >> LIMB_BITS)              # in [-2^31, 2^32 + 2^31)
    carry = (digits + _HALF) >> LIMB_BITS                           # 0 or 1
    return _carried(digits - (carry << LIMB_BITS), carry)


@functools.cache
def _limb_scales(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """2^(32 k - 1074) per limb as two float64 factors, each finite (a term overflows only for a sum
    within 2^1005 of overflowing)."""
    exponents = [LIMB_BITS * k - 1074 for k in range(LIMBS)]
    first = [min(e, 960) for e in exponents]
    scales = to_device(torch.tensor([[2.0 ** e for e in first], [2.0 ** (e - f) for e, f in zip(exponents, first)]],
                                    dtype=torch.float64), device)
    return scales[0], scales[1]


def _rounded(digits: torch.Tensor) -> torch.Tensor:
    """[R, LIMBS] balanced digits -> [R] their value rounded to float64 (see the module)."""
    first, second = _limb_scales(digits.device)
    terms = digits.to(torch.float64) * first * second              # exact, or +-inf on overflow
    index = torch.arange(LIMBS, device=digits.device)
    top = index.where(digits != 0, -1).amax(dim=1, keepdim=True)   # -1: every digit is zero
    high, below = terms.gather(1, (top - torch.arange(2, device=digits.device)).clamp(min=0)).unbind(1)
    below = below.where(top.squeeze(1) >= 1, 0.0)                  # no limb under the top one
    rest = terms.where(index < top - 1, 0.0).sum(dim=1)
    total = high + below                                           # two-sum: high + below = total + error exactly
    back = total - high
    error = (high - (total - back)) + (below - back)
    return total + (error + rest)


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device`; on CUDA through pinned memory, so the copy does not wait for the
    device's queue (a plain copy from pageable memory does)."""
    if device.type == "cpu":
        return host
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


def exact_limbs(rows: torch.Tensor) -> torch.Tensor:
    """[R, B] finite float64 -> [R, LIMBS] int64 limbs whose value sum_k limb_k 2^(32 k - 1074) is
    each row's exact sum. Limbs of disjoint parts of a row add, as integers, to the limbs of the
    whole row (under 2^31 values in all): the sum a data-parallel run all-reduces."""
    if rows.dtype != torch.float64:
        raise TypeError(f"exact_limbs takes float64, got {rows.dtype}")
    return _limbs(rows)


def correctly_rounded(limbs: torch.Tensor) -> list[float]:
    """[R, LIMBS] int64 limbs -> each row's value rounded once to float64, as `math.fsum` rounds the
    values they came from (Python's integer division is correctly rounded); +-inf beyond the range."""
    results = []
    for row in limbs.tolist():
        units = sum(limb << (LIMB_BITS * k) for k, limb in enumerate(row))   # in units of 2^-1074
        try:
            results.append(units / (1 << 1074))
        except OverflowError:
            results.append(math.inf if units > 0 else -math.inf)
    return results
