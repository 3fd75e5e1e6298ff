"""A real step of DPZero, MeZO and PAZO-M, through both engines, gives the parameters of the plain
reference step (`pazo.zo.reference`) fed the same directions (materialised from the method's own
direction set) and the same noise draw (the run's noise stream), in float64."""
import pytest
import torch
from torch import nn
from torch.func import grad

from pazo.data.base import TensorSplit
from pazo.models.functional import FunctionalModel, cross_entropy_per_example
from pazo.rng import RandomStreams
from pazo.zo import reference

SEED, LR, LAM, CLIP, SIGMA, B = 3, 0.2, 1e-3, 1.5, 0.7, 8
ATOL = 1e-12   # float64: the method and the reference differ by summation order only


def mlp() -> FunctionalModel:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3)).double()
    return FunctionalModel(module, loss_fn=cross_entropy_per_example)


def batch(n=6, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, 5, generator=gen, dtype=torch.float64), torch.randint(0, 3, (n,), generator=gen)


def flat(model: FunctionalModel) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.params]).clone()


def loss_at(model: FunctionalModel, x, y):
    return lambda theta: reference.losses_at(model.module, model.loss_fn, model.names, model.shapes, theta, x, y)


def run_step(make_method, name, cfg, engine, sigma, public=None):
    """One step of the method; returns (x before, x after, its directions as [d] vectors, the
    public batch it drew, the method's model)."""
    model = mlp()
    method = make_method(name, model, {"lr": LR, "smoothing": LAM, **cfg}, sigma=sigma, b=B, engine=engine,
                         seed=SEED, public=public)
    seen = {}
    draw = method.random_directions
    method.random_directions = lambda: seen.setdefault("u", draw())
    if hasattr(method, "public"):
        sample = method.public.sample
        method.public.sample = lambda: seen.setdefault("public", sample())
    before = flat(model)
    method.step(*batch(), 0)
    u = seen["u"]
    return before, flat(model), [u.vector(j).clone() for j in range(u.count)], seen.get("public"), model


def noise(q):
    return reference.gaussian_noise(q, CLIP, SIGMA, RandomStreams(SEED).torch_generator("noise"))


@pytest.mark.parametrize("engine", ["vectorised", "inplace"])
@pytest.mark.parametrize("direction", ["gaussian", "sphere"])
def test_dpzero_step_is_the_reference_step(make_method, engine, direction):
    q = 3
    before, after, u, _, model = run_step(make_method, "dpzero", {"clip": CLIP, "q": q, "direction": direction},
                                          engine, SIGMA)
    f = loss_at(model, *batch())
    expected = reference.two_point_step(f, before, u, LR, LAM, CLIP, noise(q), B)
    assert torch.allclose(after, expected, rtol=0, atol=ATOL)
    # the check has power: the setting clips some finite differences and not others, and a step
    # without the clip, with the opposite sign, without noise or divided by the realised batch
    # size is far from the method's
    fd = torch.cat([(f(before + LAM * v) - f(before - LAM * v)) / (2 * LAM) for v in u]).abs()
    assert (fd > CLIP).any() and (fd < CLIP).any()
    wrong = [reference.two_point_step(f, before, u, LR, LAM, float("inf"), noise(q), B),
             reference.two_point_step(f, before, u, -LR, LAM, CLIP, noise(q), B),
             reference.two_point_step(f, before, u, LR, LAM, CLIP, torch.zeros(q), B),
             reference.two_point_step(f, before, u, LR, LAM, CLIP, noise(q), len(batch()[1]))]
    for step in wrong:
        assert (step - after).abs().max() > 1e3 * ATOL


@pytest.mark.parametrize("engine", ["vectorised", "inplace"])
def test_mezo_step_is_the_reference_step_without_clip_or_noise(make_method, engine):
    q = 2
    before, after, u, _, model = run_step(make_method, "mezo", {"q": q, "clip": CLIP}, engine, None)
    f = loss_at(model, *batch())
    assert torch.allclose(after, reference.two_point_step(f, before, u, LR, LAM), rtol=0, atol=ATOL)
    assert (reference.two_point_step(f, before, u, -LR, LAM) - after).abs().max() > 1e3 * ATOL


@pytest.mark.parametrize("engine", ["vectorised", "inplace"])
def test_pazo_m_step_is_the_reference_step_mixed_with_the_public_gradient(make_method, engine):
    q, alpha = 2, 0.3
    public = TensorSplit(*batch(n=10, seed=5))
    before, after, u, (xp, yp), model = run_step(
        make_method, "pazo_m", {"clip": CLIP, "q": q, "alpha": alpha, "public_batch_size": 4}, engine, SIGMA, public)
    f = loss_at(model, *batch())
    g_pub = grad(lambda theta: loss_at(model, xp, yp)(theta).mean())(before)
    expected = reference.two_point_step(f, before, u, LR, LAM, CLIP, noise(q), B, weight=1 - alpha) - LR * alpha * g_pub
    assert torch.allclose(after, expected, rtol=0, atol=ATOL)
    without_public = reference.two_point_step(f, before, u, LR, LAM, CLIP, noise(q), B, weight=1 - alpha)
    assert (without_public - after).abs().max() > 1e3 * ATOL
