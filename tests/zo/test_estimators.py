"""Zeroth-order estimators on a quadratic, where every expectation is known in closed form."""
import math

import torch

from conftest import finite_difference_estimates, quadratic_model, true_grad
from pazo.data.base import TensorSplit
from pazo.zo import bases
from pazo.zo.bases import orthonormal_basis
from pazo.zo.directions import SeededDirections, SubspaceDirections, sample_coefficients


def test_two_point_estimate_is_unbiased_for_gaussian_and_sphere():
    torch.manual_seed(0)
    model = quadratic_model(d=6)
    x = torch.randn(16, 6, dtype=torch.float64)
    g = true_grad(model, x)
    q = 20000
    for dist, radius in (("gaussian", None), ("sphere", math.sqrt(6))):
        dirs = SeededDirections(model.shapes, range(q), dist, radius, dtype=torch.float64)
        mean = finite_difference_estimates(model, x, dirs).mean(dim=0)
        # std of the mean is about sqrt(3/q) * |g| per coordinate: 5 sigma tolerance
        assert torch.norm(mean - g) < 5 * math.sqrt(3 * 6 / q) * torch.norm(g), dist


def test_method_update_is_minus_lr_times_mean_estimate(make_method):
    """DPZero's whole step (non-private) moves the parameters by -lr * E[g] on a quadratic."""
    model = quadratic_model(d=5)
    x = torch.randn(8, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    g = true_grad(model, x)
    cfg = {"lr": 1.0, "q": 20000, "smoothing": 1e-3, "direction": "gaussian", "radius": "sqrt_d", "clip": 1.0}
    before = model.flat_params().clone()
    make_method("dpzero", model, cfg).step(x, torch.zeros(8), 1)
    step = before - model.flat_params()
    assert torch.norm(step - g) < 5 * math.sqrt(3 * 5 / 20000) * torch.norm(g)


def test_pazo_m_radius_aligns_the_squared_norm():
    """Appendix A.1: with u on the sphere of radius d^(1/4), E||g_lambda||^2 ~ ||grad||^2."""
    model = quadratic_model(d=40)
    x = torch.randn(4, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    g = true_grad(model, x)
    dirs = SeededDirections(model.shapes, range(4000), "sphere", 40 ** 0.25, dtype=torch.float64)
    sq = finite_difference_estimates(model, x, dirs).pow(2).sum(dim=1).mean()
    assert 0.9 < float(sq / g.pow(2).sum()) < 1.1
    # the usual radius sqrt(d) would inflate it by a factor d
    dirs_big = SeededDirections(model.shapes, range(4000), "sphere", math.sqrt(40), dtype=torch.float64)
    big = finite_difference_estimates(model, x, dirs_big).pow(2).sum(dim=1).mean()
    assert 0.9 * 40 < float(big / g.pow(2).sum()) < 1.1 * 40


def test_pazo_p_estimate_is_the_projection_onto_the_public_span():
    model = quadratic_model(d=8)
    x = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    g = true_grad(model, x)
    G = torch.randn(3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    G[2] = G[0] + G[1]  # rank deficient: the guard must drop one direction
    basis = orthonormal_basis(G)
    assert basis.shape == (2, 8)
    assert torch.allclose(basis @ basis.T, torch.eye(2, dtype=torch.float64), atol=1e-10)
    coeffs = sample_coefficients(20000, 2, "sphere", torch.Generator().manual_seed(5)).double()
    assert torch.allclose(coeffs.norm(dim=1), torch.full((20000,), math.sqrt(2), dtype=torch.float64),
                          atol=1e-5)
    dirs = SubspaceDirections(basis, coeffs, model.split_flat)
    mean = finite_difference_estimates(model, x, dirs).mean(dim=0)
    projection = basis.T @ (basis @ g)
    assert torch.norm(mean - projection) < 0.05 * torch.norm(projection)
    assert torch.norm(mean - g) > 0.1 * torch.norm(g)  # it is not the full gradient


def test_orthonormal_basis_is_the_q_of_a_qr_with_positive_diagonal():
    """Gram-Schmidt on the Gram matrix, twice, gives QR's Q: also for nearly dependent gradients
    (remainders about 3e-5 of their norm, three times the tolerance), where one pass on the Gram matrix
    would lose orthogonality."""
    gen = torch.Generator().manual_seed(7)
    for spread in (1.0, 3e-5):
        G = torch.randn(5, 300, dtype=torch.float64, generator=gen)
        G[1:] = G[0] + spread * G[1:]          # every row close to the first
        q, r = torch.linalg.qr(G.T)
        expected = (q * torch.sign(torch.diagonal(r))).T
        basis = orthonormal_basis(G)
        assert basis.shape == (5, 300)
        assert (basis @ basis.T - torch.eye(5, dtype=torch.float64)).abs().max() < 1e-13
        assert (basis - expected).abs().max() < 1e-9
        assert torch.allclose(basis[:1], G[:1] / G[0].norm(), rtol=0, atol=1e-15)   # Q's first row: g_1 / |g_1|


def test_gram_schmidt_on_python_floats_and_on_numpy_agree(monkeypatch):
    """A handful of vectors run on Python floats, more on numpy: the same coefficients, the same
    dropped vector, and for k above the switch the Q of a QR all the same."""
    gen = torch.Generator().manual_seed(9)
    G = torch.randn(12, 80, dtype=torch.float64, generator=gen)
    G[5] = G[0] - 3 * G[2]                            # dependent: dropped on both paths
    gram = (G @ G.T).tolist()
    assert len(gram) > bases.PYTHON_GRAM_SCHMIDT  # numpy
    on_numpy = bases.gram_schmidt_coefficients(gram, 1e-5)
    monkeypatch.setattr(bases, "PYTHON_GRAM_SCHMIDT", 100)
    on_floats = bases.gram_schmidt_coefficients(gram, 1e-5)
    assert len(on_floats) == len(on_numpy) == 11
    assert torch.allclose(torch.tensor(on_floats), torch.tensor(on_numpy), rtol=0, atol=1e-12)
    monkeypatch.undo()
    kept = G[[i for i in range(12) if i != 5]]
    q, r = torch.linalg.qr(kept.T)
    assert torch.allclose(orthonormal_basis(G), (q * torch.sign(torch.diagonal(r))).T, rtol=0, atol=1e-12)


def test_a_wide_basis_is_combined_in_place_block_by_block(monkeypatch):
    """Past `COMBINE_COLUMNS` columns the basis is written over its own float64 copy a block of
    columns at a time (no second [k, d] matrix): the same Q as one product to float64 rounding,
    also when a dependent row is dropped, and the caller's gradients untouched (a float64 input too,
    which `.double()` would not have copied)."""
    gen = torch.Generator().manual_seed(11)
    G = torch.randn(5, 1000, dtype=torch.float64, generator=gen)
    G[3] = G[0] - 2 * G[4]
    before = G.clone()
    whole = orthonormal_basis(G)
    monkeypatch.setattr(bases, "COMBINE_COLUMNS", 64)
    made = []
    combine = bases.combine_rows
    monkeypatch.setattr(bases, "combine_rows", lambda c, rows: made.append(rows.data_ptr()) or combine(c, rows))
    blocks = orthonormal_basis(G)
    assert torch.equal(G, before)                          # the caller's tensor is not the one overwritten
    assert blocks.shape == whole.shape == (4, 1000)
    assert torch.allclose(blocks, whole, rtol=0, atol=1e-14)
    assert made[0] == made[1] != G.data_ptr()              # both products in one buffer, not in G
    rows = torch.randn(6, 200, dtype=torch.float64, generator=gen)
    c = torch.randn(4, 6, dtype=torch.float64, generator=gen)
    expected = c @ rows
    out = combine(c.tolist(), rows)
    assert out.data_ptr() == rows.data_ptr() and torch.allclose(out, expected, rtol=0, atol=1e-13)


def test_orthonormal_basis_drops_zero_dependent_and_non_finite_gradients_and_keeps_the_rest():
    gen = torch.Generator().manual_seed(8)
    G = torch.randn(6, 50, dtype=torch.float64, generator=gen)
    G[1] = 0.0                                   # zero
    noise = torch.randn(50, dtype=torch.float64, generator=gen)
    G[3] = 2 * G[0] - G[2] + 1e-7 * noise        # dependent up to a relative 1e-7 (under the 1e-5 tolerance)
    G[4, 7] = float("inf")                       # a diverged gradient
    basis = orthonormal_basis(G)
    kept = G[[0, 2, 5]]
    q, r = torch.linalg.qr(kept.T)
    assert torch.allclose(basis, (q * torch.sign(torch.diagonal(r))).T, rtol=0, atol=1e-12)
    G[3] = 2 * G[0] - G[2] + 1e-3 * noise        # independent enough: kept
    assert orthonormal_basis(G).shape == (4, 50)
    assert orthonormal_basis(torch.zeros(3, 50)).shape == (0, 50)


def test_pazo_s_picks_the_truly_best_public_step_without_noise(make_method):
    model = quadratic_model(d=4)
    x = torch.ones(8, 4, dtype=torch.float64)  # private optimum: w = 1
    w0 = model.flat_params().clone()
    # three public batches; the one centred on the private optimum gives the best step
    centres = [torch.full((4,), -3.0), torch.ones(4), torch.full((4,), 5.0)]
    batches = [(c.double().expand(4, 4).clone(), torch.zeros(4)) for c in centres]
    cfg = {"lr": 0.5, "clip": 1e6, "k": 3, "public_batch_size": 4, "perturbation": 0.0, "noisy_candidate": False}
    public = TensorSplit(torch.zeros(4, 4, dtype=torch.float64), torch.zeros(4))
    method = make_method("pazo_s", model, cfg, sigma=0.0, b=8, public=public)
    order = iter([1, 0, 2])  # shuffle which draw holds the good batch
    method.public.sample = lambda: batches[next(order)]
    stats = method.step(x, torch.zeros(8), 1)
    # draws were batches 1, 0, 2: the good batch (index 1) came first
    assert stats["chosen_public_index"] == 0
    expected = w0 - 0.5 * model.module.a * (w0 - torch.ones(4, dtype=torch.float64))
    assert torch.allclose(model.flat_params(), expected)


def test_pazo_m_update_is_algorithm_1_line_13(make_method):
    """x1 = x0 - lr (alpha g_pub(x0) + (1 - alpha) (grad(x0).u) u), both parts taken at x0."""
    from pazo.rng import RandomStreams

    model = quadratic_model(d=4)
    w0 = model.flat_params().clone()
    public = TensorSplit(torch.full((4, 4), 2.0, dtype=torch.float64), torch.zeros(4))
    cfg = {"lr": 0.1, "clip": 1.0, "q": 1, "smoothing": 1e-3, "alpha": 0.25, "public_batch_size": 4}
    x = torch.zeros(8, 4, dtype=torch.float64)
    make_method("pazo_m", model, cfg, public=public).step(x, torch.zeros(8), 1)
    seed = RandomStreams(0).draw_seeds("directions", 1)  # the direction the step used
    u = SeededDirections(model.shapes, seed, "sphere", 4 ** 0.25, dtype=torch.float64).tensors(0)[0]
    a = model.module.a
    g_pub, g_priv = a * (w0 - 2.0), a * w0
    expected = w0 - 0.1 * (0.25 * g_pub + 0.75 * (g_priv @ u) * u)
    assert torch.allclose(model.flat_params(), expected, atol=1e-8)
