"""Clipping, noise scale, Poisson sampling and the independence of the random streams."""
import math

import numpy as np
import pytest
import torch

from pazo.methods.two_point import mean_coefficients
from pazo.privacy.mechanisms import NoiseSpec, ScalarPrivatizer, rounded_to
from pazo.privacy.sampling import PoissonSampler, ShuffleSampler
from pazo.rng import RandomStreams, bounded_draws


def test_one_example_moves_the_clipped_sum_by_at_most_c():
    spec = NoiseSpec(sigma=0.0, clip=0.7, expected_batch_size=10)
    priv = ScalarPrivatizer(spec, queries=3, generator=torch.Generator().manual_seed(0))
    values = torch.randn(3, 10) * 100
    with_all = priv(values) * 10
    for i in range(10):
        without = priv(torch.cat([values[:, :i], values[:, i + 1:]], dim=1)) * 10
        assert (with_all - without).abs().max() <= 0.7 + 1e-6
        changed = values.clone()
        changed[:, i] = -changed[:, i] * 1e6
        assert (priv(changed) * 10 - with_all).abs().max() <= 2 * 0.7 + 1e-5


@pytest.mark.parametrize("queries,adjacency,factor", [(1, "add_remove", 1), (4, "add_remove", 1),
                                                       (3, "replace_one", 2)])
def test_noise_std_matches_sqrt_releases_c_sigma_over_b(queries, adjacency, factor):
    spec = NoiseSpec(sigma=1.5, clip=0.5, expected_batch_size=32, adjacency=adjacency)
    priv = ScalarPrivatizer(spec, queries=queries, generator=torch.Generator().manual_seed(1))
    draws = torch.stack([priv(torch.zeros(queries, 5)) for _ in range(4000)]).flatten()
    expected = math.sqrt(queries) * factor * 0.5 * 1.5 / 32
    assert draws.std().item() == pytest.approx(expected, rel=0.05)
    assert abs(draws.mean().item()) < 4 * expected / math.sqrt(draws.numel())


def test_normalised_by_expected_not_realised_batch_size():
    spec = NoiseSpec(sigma=0.0, clip=10.0, expected_batch_size=50)
    priv = ScalarPrivatizer(spec, queries=1, generator=None)
    assert priv(torch.ones(1, 7)).item() == pytest.approx(7 / 50)


def test_non_private_is_a_plain_mean_without_clipping():
    priv = ScalarPrivatizer(NoiseSpec(sigma=None, clip=0.1, expected_batch_size=50), 1, None)
    assert priv(torch.tensor([[1.0, 3.0]])).item() == pytest.approx(2.0)
    assert priv.noise_scale == 0


def test_poisson_inclusion_rate_matches_q():
    sampler = PoissonSampler(200, 20, np.random.default_rng(0))
    counts = np.zeros(200)
    sizes = []
    for _ in range(3000):
        batch = sampler.sample()
        counts[batch] += 1
        sizes.append(len(batch))
    rate = counts / 3000
    assert rate.mean() == pytest.approx(0.1, rel=0.02)
    assert np.abs(rate - 0.1).max() < 5 * math.sqrt(0.1 * 0.9 / 3000)  # every example, not only on average
    assert np.var(sizes) == pytest.approx(200 * 0.1 * 0.9, rel=0.15)  # binomial, not fixed-size


def test_shuffle_sampler_is_flagged_and_fixed_size():
    sampler = ShuffleSampler(100, 32, np.random.default_rng(0))
    assert not sampler.matches_accountant and PoissonSampler.matches_accountant
    assert {len(sampler.sample()) for _ in range(10)} == {32}


def test_streams_are_independent_and_reproducible():
    a, b = RandomStreams(0), RandomStreams(0)
    assert a.seeds == b.seeds
    assert len(set(a.seeds.values())) == len(a.seeds)
    assert a.draw_seeds("directions", 3) == b.draw_seeds("directions", 3)
    noise_a = torch.randn(5, generator=a.torch_generator("noise"))
    dirs_a = torch.randn(5, generator=a.torch_generator("directions"))
    assert not torch.allclose(noise_a, dirs_a)
    secure = RandomStreams(0, secure=True)
    assert secure.seeds["noise"] != a.seeds["noise"] and secure.seeds["data"] != a.seeds["data"]
    assert secure.seeds["noise"] != RandomStreams(0, secure=True).seeds["noise"]  # not from the seed
    for name in ("directions", "public", "init", "split"):  # the rest stays reproducible
        assert secure.seeds[name] == a.seeds[name]


@pytest.mark.parametrize("bound", [2**63 - 1, 2**63 + 1, 2**33 + 1])
def test_seed_draws_are_numpys_integers(bound):
    """`bounded_draws` (the direction seeds) gives numpy's `integers(0, bound)` numbers and leaves the
    generator where numpy would: one at a time and in arrays; 2^63 + 1 rejects about half its words,
    so the redraw branch runs too."""
    ours, numpys = np.random.default_rng(3), np.random.default_rng(3)
    dtype = np.int64 if bound < 2**63 else np.uint64   # int64, numpy's default, as the seeds were drawn
    for count in [1, 4, 1, 0, 1, 7] * 50:
        expected = [int(v) for v in numpys.integers(0, bound, size=count, dtype=dtype)] if count != 1 \
            else [int(numpys.integers(0, bound, dtype=dtype))]
        assert bounded_draws(ours.bit_generator, bound, count) == expected
    assert ours.bit_generator.state == numpys.bit_generator.state
    with pytest.raises(ValueError, match="bound"):
        bounded_draws(ours.bit_generator, 2**32, 1)


@pytest.mark.parametrize("queries", [1, 3, 64])
def test_gaussian_scalars_are_the_tensor_formula_bit_for_bit(queries):
    """The Gaussian privatiser's arithmetic on the q sums, done as Python floats, gives exactly
    (clip-sum in float32, + sigma-scaled float64 noise, / b, to float32) as tensor operations."""
    spec = NoiseSpec(sigma=1.7, clip=0.3, expected_batch_size=37)
    values = torch.randn(queries, 50, generator=torch.Generator().manual_seed(2))
    priv = ScalarPrivatizer(spec, queries=queries, generator=torch.Generator().manual_seed(5))
    got = priv(values)
    gen = torch.Generator().manual_seed(5)
    sums = values.clamp(-spec.clip, spec.clip).sum(dim=1)
    expected = ((sums.double() + priv.noise_scale * torch.randn(queries, generator=gen, dtype=torch.float64))
                / spec.expected_batch_size).float()
    assert got.dtype == torch.float32 and torch.equal(got, expected)


@pytest.mark.parametrize("mechanism,sigma", [("gaussian", 1.7), ("laplace", 1.7), ("gaussian", None)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_privatised_means_as_floats_are_the_tensors_numbers(mechanism, sigma, dtype):
    """`means` (what the zeroth-order step reads) is `priv(values).tolist()` draw for draw, in every
    dtype, with the generator left at the same place."""
    spec = NoiseSpec(sigma=sigma, clip=0.3, expected_batch_size=37, mechanism=mechanism)
    values = torch.randn(4, 50, generator=torch.Generator().manual_seed(2)).to(dtype)
    as_tensor = ScalarPrivatizer(spec, queries=4, generator=torch.Generator().manual_seed(5))
    as_floats = ScalarPrivatizer(spec, queries=4, generator=torch.Generator().manual_seed(5))
    for _ in range(3):
        assert as_floats.means(values) == as_tensor(values).tolist()
    assert torch.equal(as_floats.generator.get_state(), as_tensor.generator.get_state())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_rounding_and_mean_coefficients_match_tensor_arithmetic(dtype):
    """Python floats rounded to a dtype, and s_j / q from them, are the numbers of CPU tensors: ties,
    subnormals, overflow to infinity and NaN included (on CUDA, which divides by multiplying with
    the reciprocal, `mean_coefficients` lets the device divide)."""
    mantissas = torch.randn(2000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    numbers = mantissas * 10.0 ** torch.randint(-50, 45, (2000,), generator=torch.Generator().manual_seed(1))
    numbers = numbers.tolist() + [1 + 2**-24, 1 + 3 * 2**-24, 2**-150, 3.5e38, -1e300, float("inf"), float("nan")]
    rounded = rounded_to(numbers, dtype)
    expected = torch.tensor(numbers, dtype=dtype).tolist()
    assert [a == b or (a != a and b != b) for a, b in zip(rounded, expected)] == [True] * len(numbers)
    finite = [v for v in expected if math.isfinite(v)]
    for count in (1, 3, 7):
        got = mean_coefficients(finite, count, torch.zeros(2, 3, dtype=dtype))
        assert got == (torch.tensor(finite, dtype=dtype) / (count if count > 1 else 1)).tolist()
