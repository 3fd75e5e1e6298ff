"""DP-ZO (Gaussian and Laplace), orthogonal directions and hybrid-noise DP-ZOGD. DP-ZO's own tables are
tests/paper/test_dp_zo_tables.py."""
import math

import pytest
import torch

from conftest import finite_difference_estimates, quadratic_model, true_grad
from pazo.models import FunctionalModel
from pazo.models.small_cnn import SmallCNN
from pazo.privacy.accountants import LaplaceAccountant, laplace_pure_epsilon
from pazo.privacy.calibration import calibrate_sigma, laplace_sigma_for_pure_epsilon
from pazo.privacy.mechanisms import NoiseSpec, ScalarPrivatizer
from pazo.zo.directions import orthogonal_directions


def test_delta_account_of_laplace_is_no_larger_than_pure_composition():
    for sigma, q, steps in [(2.0, 0.05, 200), (8.0, 0.01, 3000)]:
        up = LaplaceAccountant(sigma, q, steps, 1e-5).epsilon(steps).upper
        assert up < laplace_pure_epsilon(sigma, q, steps)


def test_laplace_calibration_round_trips():
    q, steps = 0.02, 2000
    sigma = calibrate_sigma(4.0, 0.0, q, steps, mechanism="laplace")
    assert sigma == pytest.approx(laplace_sigma_for_pure_epsilon(4.0, q, steps))
    assert laplace_pure_epsilon(sigma, q, steps) <= 4.0
    assert laplace_pure_epsilon(sigma * 0.999, q, steps) > 4.0
    approx = calibrate_sigma(1.0, 1e-5, q, 1000, mechanism="laplace")
    assert LaplaceAccountant(approx, q, 1000, 1e-5).epsilon(1000).upper <= 1.0
    assert approx < laplace_sigma_for_pure_epsilon(1.0, q, 1000)  # delta > 0 buys less noise


@pytest.mark.parametrize("queries", [1, 3])
def test_laplace_noise_scale_grows_with_queries(queries):
    spec = NoiseSpec(sigma=2.0, clip=0.5, expected_batch_size=10, mechanism="laplace")
    priv = ScalarPrivatizer(spec, queries=queries, generator=torch.Generator().manual_seed(0))
    draws = torch.stack([priv(torch.zeros(queries, 4)) for _ in range(20000)]).flatten() * 10
    scale = queries * 0.5 * 2.0
    assert draws.abs().mean().item() == pytest.approx(scale, rel=0.03)  # E|Laplace(b)| = b
    assert draws.std().item() == pytest.approx(math.sqrt(2) * scale, rel=0.05)


def _cnn():
    torch.manual_seed(0)
    return FunctionalModel(SmallCNN(1, 10, 8, width=4))


def _run(name, cfg, make_method, sigma=1.5, steps=3, b=6):
    model = _cnn()
    method = make_method(name, model, cfg, sigma=sigma, b=b, seed=4)
    gen = torch.Generator().manual_seed(2)
    for t in range(steps):
        method.step(torch.rand(b, 1, 8, 8, generator=gen), torch.randint(0, 10, (b,), generator=gen), t + 1)
    return model.flat_params()


BASE = {"lr": 0.1, "q": 2, "smoothing": 1e-2, "direction": "gaussian", "radius": "sqrt_d"}


def test_dp_zo_gaussian_is_dpzero_with_clip_over_2_lambda(make_method):
    dpzo = _run("dp_zo", {**BASE, "clip": 0.004, "noise": "gaussian"}, make_method)
    dpzero = _run("dpzero", {**BASE, "clip": 0.2}, make_method)  # 0.004 / (2 * 0.01)
    assert torch.allclose(dpzo, dpzero, atol=1e-6)
    other = _run("dpzero", {**BASE, "clip": 0.004}, make_method)
    assert not torch.allclose(dpzo, other, atol=1e-4)


@pytest.mark.parametrize("name", ["dp_zogd", "dpzero"])
def test_more_orthogonal_directions_than_parameters_is_refused_when_the_method_is_built(make_method, name):
    """q orthogonal directions need q <= d: one ConfigError at set-up, not a ValueError at the first step."""
    from pazo.errors import ConfigError
    model = quadratic_model(d=6)
    cfg = {"lr": 0.1, "clip": 1.0, "q": 7, "direction": "orthogonal", "radius": 1.0}
    with pytest.raises(ConfigError, match=r"method.q=7 orthogonal directions .* 6 parameters"):
        make_method(name, model, cfg)
    assert make_method(name, model, {**cfg, "q": 6}).cfg.q == 6


def test_orthogonal_directions_are_orthonormal_and_unbiased():
    model = quadratic_model(d=6)
    dirs = orthogonal_directions(6, seed=3, count=4, radius=1.0, split_flat=model.split_flat,
                                dtype=torch.float64)
    assert torch.allclose(dirs.rows @ dirs.rows.T, torch.eye(4, dtype=torch.float64), atol=1e-12)
    with pytest.raises(ValueError):
        orthogonal_directions(6, seed=3, count=7, radius=1.0, split_flat=model.split_flat)
    x = torch.randn(8, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    g = true_grad(model, x)
    blocks = [orthogonal_directions(6, seed=s, count=3, radius=math.sqrt(6), split_flat=model.split_flat,
                                   dtype=torch.float64) for s in range(4000)]
    est = torch.cat([finite_difference_estimates(model, x, b) for b in blocks]).mean(dim=0)
    assert torch.norm(est - g) < 5 * math.sqrt(3 * 6 / 12000) * torch.norm(g)


HYBRID = {"lr": 50.0, "clip": 1.0, "q": 3, "smoothing": 1e-2, "direction": "orthogonal", "radius": 1.0,
          "projection_radius": None}


def test_hybrid_with_beta_one_is_the_directional_update(make_method):
    hybrid = _run("dp_zogd", {**HYBRID, "beta": 1.0}, make_method)
    directional = _run("dpzero", {k: v for k, v in HYBRID.items() if k != "projection_radius"}, make_method)
    assert torch.allclose(hybrid, directional, atol=1e-6)


def test_hybrid_isotropic_noise_has_the_paper_scale(make_method):
    beta, sigma, b, steps = 0.36, 1.5, 6, 1
    hybrid = _run("dp_zogd", {**HYBRID, "beta": beta}, make_method, sigma=sigma, steps=steps)
    directional = _run("dpzero", {k: v for k, v in HYBRID.items() if k != "projection_radius"}, make_method,
                       sigma=sigma, steps=steps)
    iso = hybrid - directional
    d = iso.numel()
    s = 1.0 * sigma / (b * math.sqrt(beta))
    expected = HYBRID["lr"] * math.sqrt(1 - beta) * s / math.sqrt(d)
    assert iso.std().item() == pytest.approx(expected, rel=0.05)


def test_hybrid_projection_onto_the_ball(make_method):
    params = _run("dp_zogd", {**HYBRID, "beta": 0.5, "projection_radius": 1.0}, make_method)
    assert params.norm().item() <= 1.0 + 1e-5
