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
def test_gaussian_release_is_the_exact_clipped_sum_plus_scaled_float64_noise_over_b(queries):
    """Each released scalar is (the exactly rounded sum of the values clipped to [-C, C] + sigma-scaled
    float64 noise) / b in float64, rounded once to the values' dtype."""
    spec = NoiseSpec(sigma=1.7, clip=0.3, expected_batch_size=37)
    values = torch.randn(queries, 50, generator=torch.Generator().manual_seed(2))
    priv = ScalarPrivatizer(spec, queries=queries, generator=torch.Generator().manual_seed(5))
    got = priv(values)
    noise = torch.randn(queries, generator=torch.Generator().manual_seed(5), dtype=torch.float64).tolist()
    sums = [math.fsum(min(max(v, -0.3), 0.3) for v in row) for row in values.tolist()]
    expected = torch.tensor([(s + priv.noise_scale * z) / 37 for s, z in zip(sums, noise)], dtype=torch.float32)
    assert got.dtype == torch.float32 and torch.equal(got, expected)


@pytest.mark.parametrize("sigma", [1.7, None])
def test_release_does_not_depend_on_the_order_of_the_examples(sigma):
    """The sum is exact, so any order of the same examples releases the same numbers for the same
    noise draws (a float32 or plain float64 sum would not: these values cancel badly)."""
    spec = NoiseSpec(sigma=sigma and 1e-30, clip=1e17, expected_batch_size=4)   # nothing clipped, noise ~1e-13
    rows = [[1e16, 1.0, -1e16, 3.0, 0.5, 1e-8]]
    releases = set()
    for order in ([0, 1, 2, 3, 4, 5], [1, 3, 0, 4, 2, 5], [5, 4, 3, 2, 1, 0]):
        priv = ScalarPrivatizer(spec, queries=1, generator=torch.Generator().manual_seed(5))
        releases.add(priv.release([[rows[0][i] for i in order]])[0])
    assert len(releases) == 1
    assert sum(rows[0]) != sum(rows[0][i] for i in [1, 3, 0, 4, 2, 5])   # the case an exact sum is needed for


def test_release_of_non_finite_scalars_is_nan_or_infinite_not_an_exception():
    """inf - inf, as two diverged losses give, makes a non-private mean NaN (as a tensor sum would),
    not a traceback out of math.fsum; in a private release a NaN or infinite value contributes zero
    (`tests/privacy/test_nonfinite.py` has the rule over random batches)."""
    inf = float("inf")
    public = ScalarPrivatizer(NoiseSpec(sigma=None, clip=1.0, expected_batch_size=2), 1, None)
    assert math.isnan(public.release([[inf, -inf]])[0]) and public.release([[inf, 1.0]])[0] == inf

    def private():
        return ScalarPrivatizer(NoiseSpec(sigma=1.0, clip=1.0, expected_batch_size=2), 1,
                                torch.Generator().manual_seed(0))
    assert private().release([[inf, -inf]]) == private().release([[]])
    assert private().release([[float("nan"), 1.0]]) == private().release([[1.0]])


def test_step_statistics_are_the_exact_mean_loss_and_mean_absolute_scalar():
    """A two-point step's `loss` is the exactly summed mean of all its per-example losses (an
    infinite loss gives inf, not an exception) and `projected_grad` the mean |s_j|."""
    from pazo.methods.base import host_stats
    from pazo.methods.two_point import DeviceEstimate, Estimate
    losses = [[1e16, 1.0, 1.0], [-1e16, 0.5, 0.25]]   # summed in order in float64: 0.75, not 2.75
    s = [0.5, -1.25, 3.0]
    stats = Estimate(s, losses, torch.float32, torch.device("cpu")).stats()
    assert stats == {"loss": 2.75 / 6, "projected_grad": 4.75 / 3, "nonfinite_examples": None}
    plain = [[1.5, 1.0, 1.0], [-0.25, 0.5, 0.25]]    # the device's float64 means: exact for these
    on_device = host_stats(DeviceEstimate(torch.tensor(s), torch.tensor(plain, dtype=torch.float64)).stats())
    assert on_device == {"loss": 4.0 / 6, "projected_grad": 4.75 / 3, "nonfinite_examples": None}
    diverged = Estimate([1.0], [[math.inf, 1.0], [2.0, 3.0]], torch.float32, torch.device("cpu")).stats()
    assert diverged["loss"] == math.inf
    assert host_stats(DeviceEstimate(torch.tensor([1.0]), torch.tensor([[math.inf, 1.0], [2.0, 3.0]])).stats()) \
        == diverged


@pytest.mark.parametrize("mechanism,sigma", [("gaussian", 1.7), ("laplace", 1.7), ("gaussian", None)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_privatised_means_are_the_mechanism_rounded_to_the_values_dtype(mechanism, sigma, dtype):
    """`means` and the tensor call (PAZO-S's) release (exact sum of the clipped values + the
    mechanism's noise, by inverse CDF for Laplace) / b, or the plain mean without privacy, rounded to
    the values' dtype, one noise draw per query from the generator, call after call."""
    spec = NoiseSpec(sigma=sigma, clip=0.3, expected_batch_size=37, mechanism=mechanism)
    values = torch.randn(4, 50, generator=torch.Generator().manual_seed(2)).to(dtype)
    priv = ScalarPrivatizer(spec, queries=4, generator=torch.Generator().manual_seed(5))
    replica = torch.Generator().manual_seed(5)
    rows = values.tolist()
    for call in range(3):
        if sigma is None:
            expected = [math.fsum(row) / len(row) for row in rows]
        else:
            if mechanism == "laplace":
                u = [v - 0.5 for v in torch.rand(4, generator=replica, dtype=torch.float64).tolist()]
                noise = [-priv.noise_scale * math.copysign(1.0, v) * math.log1p(-2 * abs(v)) for v in u]
            else:
                noise = [priv.noise_scale * z for z in torch.randn(4, generator=replica, dtype=torch.float64).tolist()]
            sums = [math.fsum(min(max(v, -0.3), 0.3) for v in row) for row in rows]
            expected = [(s + z) / 37 for s, z in zip(sums, noise)]
        rounded = torch.tensor(expected, dtype=dtype)
        got = priv.means(values) if call % 2 == 0 else priv(values).tolist()
        if dtype == torch.float64:   # libm's log1p and torch's may differ in float64's last bit
            assert torch.allclose(torch.tensor(got, dtype=torch.float64), rounded, rtol=1e-12, atol=0)
        else:
            assert got == rounded.tolist()
    assert torch.equal(priv.generator.get_state(), replica.get_state())


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
        got = mean_coefficients(finite, count, dtype, torch.device("cpu"))
        assert got == (torch.tensor(finite, dtype=dtype) / (count if count > 1 else 1)).tolist()
