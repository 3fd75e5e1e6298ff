"""First-order baselines: per-example gradients, clipping bounds, noise, GEP, DPMD's schedule."""
import math

import pytest
import torch
from torch import nn

from conftest import quadratic_model
from pazo.data.base import TensorSplit
from pazo.methods.first_order import allocate_bases, parameter_groups
from pazo.methods.per_example import chunk_size_for, clipped_sum, per_example_grads
from pazo.models import FunctionalModel
from pazo.models.small_cnn import SmallCNN

DPSGD_CFG = {"lr": 0.1, "clip": 1.0, "grad_memory_mb": 64, "per_example_chunk": 3}
FO = {**DPSGD_CFG, "public_batch_size": 4}  # the methods with public data
GEP_CFG = {**FO, "clip": 0.3, "clip0": 0.7, "num_bases": 6, "num_groups": 2, "power_iters": 2}


def cnn():
    torch.manual_seed(0)
    return FunctionalModel(SmallCNN(1, 10, 8, width=4))


def data(n=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


def test_per_example_grads_equal_a_loop_in_chunks():
    model = cnn()
    x, y = data()
    fast = per_example_grads(model, x, y, chunk=3)
    for i in range(len(x)):
        assert torch.allclose(fast[i], model.mean_loss_grad(x[i:i + 1], y[i:i + 1]), atol=1e-6)
    assert chunk_size_for(model, memory_mb=1) >= 1
    assert chunk_size_for(model, memory_mb=1000) > chunk_size_for(model, memory_mb=10)


def test_clipped_sum_moves_by_at_most_c_per_example():
    model = cnn()
    x, y = data(9)
    full, loss_sum, nonfinite = clipped_sum(model, x, y, chunk=4, bound=0.05)
    assert int(nonfinite) == 0
    assert loss_sum.item() == pytest.approx(model.current_losses(x, y).sum().item(), rel=1e-5)
    for i in range(9):
        rest, _, _ = clipped_sum(model, torch.cat([x[:i], x[i + 1:]]), torch.cat([y[:i], y[i + 1:]]), 4, 0.05)
        assert (full - rest).norm() <= 0.05 + 1e-6
    assert (full - per_example_grads(model, x, y, 9).sum(0)).norm() > 1e-3  # clipping was active


def make_fo(name, make_method, cfg=FO, sigma=0.0, b=8, public=None, seed=0):
    model = cnn()
    if public is None:
        public = TensorSplit(*data(12, seed=5))
    return make_method(name, model, cfg, sigma=sigma, b=b, public=public, seed=seed, total_steps=10), model


@pytest.mark.parametrize("name,cfg,bound", [("dpsgd", DPSGD_CFG, 1.0), ("dope_sgd", FO, 1.0),
                                            ("gep", GEP_CFG, 0.3 + 0.7)])
def test_one_example_moves_the_update_by_at_most_its_clip(name, cfg, bound, make_method):
    """With sigma = 0, adding one example changes the step by at most lr * bound / b (for GEP
    C0 + C1: V is orthonormal, so ||V w|| = ||w||)."""
    x, y = data(7)
    updates = []
    for xs, ys in ((x, y), (x[:-1], y[:-1])):
        method, model = make_fo(name, make_method, cfg)
        before = model.flat_params().clone()
        method.step(xs, ys, 1)
        updates.append(before - model.flat_params())
    diff = (updates[0] - updates[1]).norm().item()
    assert 0 < diff <= cfg["lr"] * bound / 8 + 1e-6


def test_dp_sgd_noise_std_matches_c_sigma_over_b(make_method):
    method, model = make_fo("dpsgd", make_method, DPSGD_CFG, sigma=2.0, b=16)
    empty = (torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.long))
    g = torch.cat([method.private_grad(*empty)[0] for _ in range(20)])
    assert g.std().item() == pytest.approx(1.0 * 2.0 / 16, rel=0.02)
    assert abs(g.mean().item()) < 0.01 * 2.0 / 16 * 5


def test_gep_noise_has_both_parts(make_method):
    """Empty batch: the release is (V n0 + n1) / b, so E||g||^2 = sigma^2 (C0^2 k + C1^2 d) / b^2."""
    method, model = make_fo("gep", make_method, GEP_CFG, sigma=1.5, b=4)
    before = model.flat_params().clone()
    method.step(torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.long), 1)
    g = (before - model.flat_params()) / GEP_CFG["lr"]
    k, d = sum(method.bases), model.dim
    expected = 1.5 ** 2 * (0.7 ** 2 * k + 0.3 ** 2 * d) / 16
    assert g.pow(2).sum().item() == pytest.approx(expected, rel=0.1)


def test_gep_without_clipping_reproduces_the_true_gradient(make_method):
    x, y = data(6)
    cfg = {**GEP_CFG, "num_bases": 12, "public_batch_size": 6, "num_groups": 1}
    # public data = the private batch itself: the anchor subspace spans every private gradient
    method, model = make_fo("gep", make_method, cfg, sigma=None, public=TensorSplit(x, y))
    true = model.mean_loss_grad(x, y)
    before = model.flat_params().clone()
    stats = method.step(x, y, 1)
    assert torch.allclose((before - model.flat_params()) / cfg["lr"], true, atol=1e-5)
    assert stats["residual_share"] < 1e-3  # the gradient lives in the anchor subspace


def test_gep_groups_and_bases():
    groups = parameter_groups([100, 10, 400, 20], 2)
    assert groups[0][0] == 0 and groups[-1][1] == 530
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:]))  # contiguous, no gaps
    assert allocate_bases([100, 400], 30, cap=100) == [10, 20]  # proportional to sqrt(size)
    assert allocate_bases([4, 10000], 30, cap=8) == [1, 8]  # 30*2/102 rounds to 1; 29 capped at b'


def test_dpmd_schedule_goes_from_private_to_public(make_method):
    method, _ = make_fo("dpmd", make_method)
    alphas = [method.alpha(t) for t in range(1, 12)]
    assert alphas[0] == 1.0 and alphas[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a > b for a, b in zip(alphas, alphas[1:]))
    assert method.alpha(6) == pytest.approx(math.cos(math.pi * 5 / 20))


def test_dope_sgd_adds_back_the_public_gradient_unscaled(make_method):
    """With a tiny clip, the private part vanishes and the step is -lr * g_pub whatever the batch."""
    cfg = {**FO, "clip": 1e-12}
    method, model = make_fo("dope_sgd", make_method, cfg, sigma=0.0)
    g_pub_batch = TensorSplit(*data(4, seed=9))
    method.public.sample = lambda: g_pub_batch.batch(torch.arange(4))
    expected = model.flat_params() - FO["lr"] * model.mean_loss_grad(*g_pub_batch.batch(torch.arange(4)))
    method.step(*data(3), 1)
    assert torch.allclose(model.flat_params(), expected, atol=1e-6)


def test_batchnorm_is_refused_under_a_private_method(hydra_cfg, tmp_path, monkeypatch):
    from pazo import models
    from pazo.errors import ConfigError
    from pazo.train import run

    class WithBN(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.BatchNorm1d(8), nn.Linear(8, 10))

        def forward(self, x):
            return self.net(x)

    from pazo.catalog import ModelInfo
    from pazo.models.small_cnn import SmallCnnSchema

    monkeypatch.setitem(models.MODELS._items, "bn_test",
                        ModelInfo("bn_test", lambda cfg, shape, k: WithBN(), SmallCnnSchema, ("image",)))
    with pytest.raises(ConfigError, match="BatchNorm"):
        run(hydra_cfg("method=dpsgd", "model.name=bn_test"), tmp_path)
    summary = run(hydra_cfg("method=sgd", "privacy=none", "model.name=bn_test"), tmp_path / "np")
    assert summary["status"] == "finished"  # non-private training may use it


def test_quadratic_dp_sgd_step_is_the_clipped_mean(make_method):
    model = quadratic_model(d=3)
    cfg = {"lr": 1.0, "clip": 1e6, "grad_memory_mb": 1, "per_example_chunk": 2}
    x = torch.randn(4, 3, dtype=torch.float64)
    w0 = model.flat_params().clone()
    make_method("dpsgd", model, cfg, sigma=0.0, b=4).step(x, torch.zeros(4), 1)
    expected = w0 - model.module.a * (w0 - x.mean(0))
    assert torch.allclose(model.flat_params(), expected)
