"""Clipping, noise scale, Poisson sampling and the independence of the random streams."""
import math

import numpy as np
import pytest
import torch

from pazo.privacy.mechanisms import NoiseSpec, ScalarPrivatizer
from pazo.privacy.sampling import PoissonSampler, ShuffleSampler
from pazo.rng import RandomStreams


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
