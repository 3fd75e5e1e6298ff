"""DP-AggZO: K = 1 is DPZero step for step, each example's K-vector is clipped to C in L2 norm, the
noise and the epsilon match independent computations, and a digits run trains above chance."""
import math

import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from conftest import quadratic_model
from pazo.methods import method_config
from pazo.models import FunctionalModel
from pazo.models.small_cnn import SmallCNN
from pazo.privacy.mechanisms import (JointClipPrivatizer, NoiseSpec, Release, ScalarPrivatizer, debug_break,
                                     rounded_to)
from pazo.train import run


def _cnn():
    torch.manual_seed(0)
    return FunctionalModel(SmallCNN(1, 10, 8, width=4))


def _batches(steps, b=6, seed=2):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.rand(b, 1, 8, 8, generator=gen), torch.randint(0, 10, (b,), generator=gen)) for _ in range(steps)]


@pytest.mark.parametrize("engine", ["vectorised", "inplace"])
def test_one_direction_is_dpzero_step_for_step(make_method, engine):
    """Two methods built on equal models with equal random streams (same seed): with K = 1 every
    step's parameters and statistics are DPZero's, bit for bit; K = 2 leaves DPZero's path."""
    cfg = {"lr": 0.1, "clip": 0.5, "q": 1, "smoothing": 1e-2}
    models = {name: _cnn() for name in ("dp_aggzo", "dpzero")}
    methods = {name: make_method(name, model, cfg, sigma=1.3, b=6, seed=4, engine=engine)
               for name, model in models.items()}
    for t, (x, y) in enumerate(_batches(4), start=1):
        stats = {name: m.step(x, y, t) for name, m in methods.items()}
        assert stats["dp_aggzo"] == stats["dpzero"]
        assert torch.equal(models["dp_aggzo"].flat_params(), models["dpzero"].flat_params())
    assert not torch.equal(models["dpzero"].flat_params(), _cnn().flat_params())   # it moved
    two = _cnn()
    method = make_method("dp_aggzo", two, {**cfg, "q": 2}, sigma=1.3, b=6, seed=4, engine=engine)
    for t, (x, y) in enumerate(_batches(4), start=1):
        method.step(x, y, t)
    assert not torch.allclose(two.flat_params(), models["dpzero"].flat_params())


def test_one_query_releases_what_the_scalar_privatiser_does():
    """The joint clip of one value is the clamp to [-C, C], and the draws are the same, also for
    values beyond C, infinities and NaN (which contribute zero)."""
    spec = NoiseSpec(sigma=0.8, clip=0.3, expected_batch_size=5)
    row = [0.1, -0.29, 0.31, -4.0, 7.5, math.inf, -math.inf, 0.0, math.nan]
    joint = JointClipPrivatizer(spec, torch.Generator().manual_seed(1))
    scalar = ScalarPrivatizer(spec, 1, torch.Generator().manual_seed(1))
    assert joint.clipped([row]) == [scalar.clipped(row)] == [[0.1, -0.29, 0.3, -0.3, 0.3, 0.0, 0.0, 0.0, 0.0]]
    for _ in range(3):
        assert joint.release([row]) == scalar.release([row])
    nan, big, inf = joint.clipped([[math.nan, 3.0, math.inf], [4.0, 4.0, 2.0], [math.nan, 0.0, -math.inf]])
    assert nan[0] == big[0] == inf[0] == 0.0 and nan[2] == big[2] == inf[2] == 0.0  # a non-finite column is 0
    assert big[1] == 0.3 * 0.8 and nan[1] == 0.3 * 0.6 and inf[1] == 0.0


def test_each_examples_vector_is_clipped_to_c_in_l2_norm():
    """Columns (examples) above C are scaled onto the sphere of radius C in their own direction;
    columns inside it are untouched; a row-wise clamp would not bound the norm."""
    gen = torch.Generator().manual_seed(0)
    k, b, c = 5, 40, 1.0
    scales = torch.logspace(-2, 1, b, dtype=torch.float64)              # norms from 0.01 to 10 times C
    rows = (torch.randn(k, b, generator=gen, dtype=torch.float64) * scales).tolist()
    priv = JointClipPrivatizer(NoiseSpec(sigma=1.0, clip=c, expected_batch_size=b), gen)
    clipped = torch.tensor(priv.clipped(rows), dtype=torch.float64)
    original = torch.tensor(rows, dtype=torch.float64)
    norms, before = clipped.norm(dim=0), original.norm(dim=0)
    assert (norms <= c * (1 + 1e-12)).all()
    assert (before > c).sum() > 5 and (before < c).sum() > 5
    inside = before <= c
    assert torch.equal(clipped[:, inside], original[:, inside])
    assert torch.allclose(norms[~inside], torch.full_like(norms[~inside], c), rtol=1e-12)
    assert torch.allclose(clipped[:, ~inside] * before[~inside] / c, original[:, ~inside], rtol=1e-12)
    assert (original.clamp(-c, c).norm(dim=0) > c).any()   # clipping each value alone would not bound it
    with debug_break("no_clip"):
        assert torch.equal(torch.tensor(priv.clipped(rows), dtype=torch.float64), original)


def test_the_method_clips_each_examples_k_derivatives_over_k(make_method):
    """On a quadratic the finite differences are exact: example i's vector is (1/K) [grad f_i . u_k]_k,
    and with (almost) no noise the released s is the sum of those vectors clipped to C, over b."""
    k, b, c, lam = 4, 5, 0.05, 1e-3
    model = quadratic_model(d=6)
    method = make_method("dp_aggzo", model, {"lr": 0.1, "clip": c, "q": k, "smoothing": lam}, sigma=1e-12, b=b)
    x = torch.randn(b, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    seen = {}
    draw = method.random_directions
    method.random_directions = lambda: seen.setdefault("u", draw())
    release = method.privatizer.release
    method.privatizer.release = lambda rows: seen.setdefault("s", release(seen.setdefault("rows", rows)))
    w0 = model.flat_params().clone()
    method.step(x, torch.zeros(b), 1)
    u = torch.stack([seen["u"].vector(j) for j in range(k)])                         # [K, d]
    per_example = model.module.a * (w0 - x)                                          # [b, d] gradients of f_i
    expected = (u @ per_example.T) / k                                               # [K, b]
    assert torch.allclose(torch.tensor(seen["rows"], dtype=torch.float64), expected, rtol=1e-6, atol=1e-9)
    norms = expected.norm(dim=0)
    assert (norms > c).any()
    clipped = expected * (c / norms).clamp(max=1.0)
    assert torch.allclose(torch.tensor(seen["s"], dtype=torch.float64), clipped.sum(dim=1) / b, atol=1e-9)
    s = torch.tensor(rounded_to(seen["s"], torch.float64), dtype=torch.float64)
    assert torch.allclose(model.flat_params(), w0 - 0.1 * (s @ u), atol=1e-12)        # x - lr sum_k s_k u_k


@pytest.mark.parametrize("k", [1, 8])
def test_noise_is_c_sigma_per_coordinate_whatever_k(k):
    """Independently of K (DPZero's split noise would be sqrt(K) C sigma): std C sigma on each sum,
    coordinates uncorrelated; replace-one doubles it."""
    sigma, c, b, n = 1.7, 0.4, 10, 6000
    zeros = [[0.0] * 3 for _ in range(k)]
    for adjacency, factor in (("add_remove", 1.0), ("replace_one", 2.0)):
        priv = JointClipPrivatizer(NoiseSpec(sigma=sigma, clip=c, expected_batch_size=b, adjacency=adjacency),
                                   torch.Generator().manual_seed(k))
        draws = torch.tensor([priv.release(zeros) for _ in range(n)], dtype=torch.float64) * b   # [n, K]
        expected = factor * c * sigma
        assert priv.noise_scale == pytest.approx(expected)
        assert draws.std().item() == pytest.approx(expected, rel=0.03)
        if k > 1:
            corr = torch.corrcoef(draws.T)
            assert (corr - torch.eye(k, dtype=torch.float64)).abs().max() < 0.06
    with debug_break("noise_div10"):
        assert priv.noise_scale == pytest.approx(0.1 * 2.0 * c * sigma)


def test_release_is_one_gaussian_mechanism_whatever_k():
    for k in (1, 16, 64):
        release = method_config({"name": "dp_aggzo", "lr": 0.1, "clip": 1.0, "q": k}).release()
        assert release == Release(queries=k, mechanisms=1, noise="gaussian", joint_clip=True)


def _pld_epsilon(sigma, q, steps, delta):
    """dp-accounting's PLD account of a Poisson-subsampled Gaussian of multiplier sigma: the oracle."""
    account = pld_privacy_accountant.PLDAccountant()
    account.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    return account.get_epsilon(delta)


@pytest.mark.usefixtures("cheap_pld")   # (its oracle is dp-accounting's own PLD, on its own grid)
def test_a_digits_run_spends_the_epsilon_of_its_gaussian_mechanism_and_trains_above_chance(hydra_cfg, tmp_path):
    """Defaults (K = 16) on digits for 120 steps: the printed epsilon is the PLD account of one
    Gaussian mechanism of the run's sigma per step, within the target, and the model beats chance."""
    s = run(hydra_cfg("method=dp_aggzo", "train.steps=120", "train.log_every=40"), tmp_path)
    p = s["privacy"]
    assert s["status"] == "finished" and p["within_budget"] and p["queries"] == 16 and p["mechanisms"] == 1
    n = s["data"]["n_private"]
    oracle = _pld_epsilon(p["sigma"], 64 / n, 120, p["delta"])
    assert p["epsilon_spent"] == pytest.approx(oracle, abs=0.02) and p["epsilon_spent"] <= p["target_epsilon"]
    assert p["target_epsilon"] - 0.05 <= oracle
    assert any("dp_aggzo: each example's K directional derivatives" in note for note in p["notes"])
    assert any("Laplace-noised n" in note for note in s["method_departures"])
    assert s["final_test_accuracy"] > 0.3   # chance is 0.1
