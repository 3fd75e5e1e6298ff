"""The release kept on the device: `exact_row_sums` is `math.fsum` within one ulp and the same in any
order, and the privatisers' `release_tensor` is their host `release` (the same noise draws, the
same clip, sums within one ulp), over random rows with non-finite values, every mechanism and the
debug breaks."""
from __future__ import annotations

import math

import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo.privacy.device_sum import exact_row_sums
from pazo.privacy.mechanisms import (JointClipPrivatizer, NoiseSpec, ScalarPrivatizer, ScalarRelease, debug_break,
                                     exact_sum)

FINITE = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300)
#: every binade of float64, subnormals included
SCALED = st.builds(lambda m, e: math.ldexp(m, e), st.floats(-1, 1, allow_nan=False), st.integers(-1074, 990))


def _cancelling(draw_values):
    """Values and their negations (but the last few), so the exact sum is small beside the terms."""
    return st.tuples(st.lists(draw_values, max_size=20), st.lists(draw_values, max_size=3)).map(
        lambda pair: [*pair[0], *(-v for v in pair[0]), *pair[1]])


ROWS = st.one_of(st.lists(FINITE, max_size=40), st.lists(SCALED, max_size=40), _cancelling(FINITE),
                 _cancelling(SCALED))


def _ulps_apart(a: float, b: float) -> float:
    return 0.0 if a == b else abs(a - b) / math.ulp(max(abs(a), abs(b)))


@settings(max_examples=300, deadline=None)
@given(ROWS, st.randoms(use_true_random=False))
@example([1.0, 2.0 ** -53], None)                          # an exact tie: to even, as fsum
@example([1.0, -1.0, 1e-300], None)                        # the tiny survivor of a cancellation
@example([5e-324] * 7 + [-1e300, 1e300], None)             # subnormals beside the largest values
@example([1e300] * 40, None)                               # the carries of the top limbs
def test_device_sums_are_fsum_within_one_ulp_whatever_the_order(values, rnd):
    got = exact_row_sums(torch.tensor([values], dtype=torch.float64)).item()
    assert _ulps_apart(got, math.fsum(values)) <= 1
    if rnd is not None:
        shuffled = list(values)
        rnd.shuffle(shuffled)
        assert exact_row_sums(torch.tensor(shuffled, dtype=torch.float64)).item() == got   # bit for bit


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.one_of(FINITE, st.sampled_from([math.inf, -math.inf, math.nan])), min_size=3, max_size=3),
                min_size=1, max_size=4))
def test_a_row_with_a_non_finite_value_gets_the_plain_sum_as_on_the_host(columns):
    """Rows of a [Q, B] block at once, each as `exact_sum` gives it (NaN, or the infinity's sign)."""
    rows = [list(row) for row in zip(*columns)]
    got = exact_row_sums(torch.tensor(rows, dtype=torch.float64)).tolist()
    for row, value in zip(rows, got):
        want = exact_sum(row)
        assert (math.isnan(value) and math.isnan(want)) or _ulps_apart(value, want) <= 1


def test_sums_keep_the_leading_shape_and_an_empty_row_is_zero():
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    assert exact_row_sums(x).shape == (2, 3)
    assert exact_row_sums(torch.zeros(4, 0, dtype=torch.float64)).tolist() == [0.0] * 4


ENTRY = st.one_of(st.floats(-3, 3, allow_nan=False), st.sampled_from([math.inf, -math.inf, math.nan]),
                  st.floats(-1e-30, 1e-30), st.floats(-1e300, 1e300))


def blocks(entry=ENTRY):
    """[Q, B] rows of per-example values, Q in 1..4, B in 0..12."""
    return st.integers(1, 4).flatmap(lambda q: st.integers(0, 12).flatmap(
        lambda b: st.lists(st.lists(entry, min_size=b, max_size=b), min_size=q, max_size=q)))


def _same_release(got: list[float], want: list[float], rows, spec: NoiseSpec, clipped: bool, ulps: int) -> None:
    """Each value the host's, to the rounding of sums of terms no larger than the clip (or the
    rows' finite values, unclipped), the noise or the result (a non-finite value: the same one)."""
    finite = [abs(v) for row in rows for v in row if math.isfinite(v)]
    term = spec.clip if clipped else max([*finite, 1.0])
    terms, b = term * max(len(rows[0]), 1), spec.expected_batch_size
    for g, w in zip(got, want):
        if not math.isfinite(w):
            assert (math.isnan(g) and math.isnan(w)) or g == w, (got, want)
        else:
            assert abs(g - w) <= ulps * math.ulp(terms + abs(w) * b), (got, want)


@settings(max_examples=150, deadline=None)
@given(blocks(), st.sampled_from(["gaussian", "laplace"]), st.sampled_from([0.7, None]),
       st.sampled_from(["add_remove", "replace_one"]), st.sampled_from([None, "no_clip", "noise_div_batch"]))
def test_the_scalar_release_on_the_device_is_the_host_release(rows, mechanism, sigma, adjacency, breaks):
    spec = NoiseSpec(sigma=sigma, clip=0.5, expected_batch_size=7, adjacency=adjacency, mechanism=mechanism)
    host, device = (ScalarPrivatizer(spec, len(rows), torch.Generator().manual_seed(3)) for _ in range(2))
    with debug_break(breaks):
        want = host.release(rows)
        got = device.release_tensor(torch.tensor(rows, dtype=torch.float64)).tolist()
    _same_release(got, want, rows, spec, clipped=sigma is not None and breaks != "no_clip", ulps=4)
    assert torch.equal(host.generator.get_state(), device.generator.get_state())   # the same draws


@settings(max_examples=150, deadline=None)
@given(blocks(), st.sampled_from([0.7, None]), st.sampled_from([None, "no_clip", "noise_div_batch"]))
@example([[1e200, 0.1], [1.0, 0.2]], 0.7, None)          # a norm whose squares overflow: clipped, not dropped
def test_the_jointly_clipped_release_on_the_device_is_the_host_release(rows, sigma, breaks):
    """Norms are torch's on the device, math.hypot's on the host: the sums agree to a few ulps of
    their terms."""
    spec = NoiseSpec(sigma=sigma, clip=0.5, expected_batch_size=7)
    host, device = (JointClipPrivatizer(spec, torch.Generator().manual_seed(3)) for _ in range(2))
    with debug_break(breaks):
        want = host.release(rows)
        got = device.release_tensor(torch.tensor(rows, dtype=torch.float64)).tolist()
    _same_release(got, want, rows, spec, clipped=sigma is not None and breaks != "no_clip", ulps=64)
    assert torch.equal(host.generator.get_state(), device.generator.get_state())


def test_the_wrappers_release_on_the_device_through_their_own_host_release():
    """An object that only defines `release` (the audit's canaries and noise probe) is asked
    through it, so it sees every row."""
    class Seen(ScalarRelease):
        rows = None

        def release(self, rows):
            self.rows = rows
            return [sum(row) for row in rows]

    seen = Seen()
    assert seen.release_tensor(torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)).tolist() == [3.0, 7.0]
    assert seen.rows == [[1.0, 2.0], [3.0, 4.0]]
