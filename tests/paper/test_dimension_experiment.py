"""DPZero's dimension experiment: the quadratic's construction and the script end to end."""
import math

import pytest
import torch

from pazo.synthetic.quadratic import Quadratic, effective_rank, eigenvalues, run_method


@pytest.mark.parametrize("d", [10, 1000])
def test_effective_rank_matches_its_construction(d):
    assert eigenvalues(d, "small").max() == 1 and eigenvalues(d, "medium").max() == 1
    assert effective_rank(eigenvalues(d, "small")) == pytest.approx(sum(1 / i**2 for i in range(1, d + 1)))
    assert effective_rank(eigenvalues(d, "small")) < math.pi**2 / 6
    assert effective_rank(eigenvalues(d, "medium")) == pytest.approx(
        sum(1 / math.sqrt(i) for i in range(1, d + 1)))
    assert effective_rank(eigenvalues(d, "large")) == d


def test_quadratic_gradient_and_loss():
    p = Quadratic.generate(5, "medium", n=20, n_test=10, seed=0)
    x = torch.randn(5, dtype=torch.float64)
    x.requires_grad_(True)
    loss = p.per_example_losses(x, p.train).mean()
    loss.backward()
    assert p.grad_norm(x.detach(), p.train) == pytest.approx(x.grad.norm().item())
    assert p.train.shape == (20, 5) and p.test.shape == (10, 5)


def test_without_noise_all_methods_descend():
    p = Quadratic.generate(20, "small", n=50, n_test=50, seed=1)
    start = p.loss(torch.zeros(20, dtype=torch.float64), p.train)
    for method in ("dpgd", "dpzero", "dpgd_0th"):
        out = run_method(p, method, lr=0.3, steps=200, sigma=0.0, clip=1e6, smoothing=1e-4, seed=0)
        assert out["best_train_loss"] < 0.7 * start, method


def test_script_writes_figures_and_data(tmp_path):
    from pazo.bench import dimension as dpzero_dimension

    dpzero_dimension.main(["--dims", "5,20", "--steps", "10", "--n", "30", "--n-test", "30",
                           "--lrs", "0.1,0.5", "--seeds", "1", "--out", str(tmp_path)])
    for name in ("runs.csv", "best.csv", "figure1_grad_norm.png", "figure1_grad_norm.pdf",
                 "figure2_best_loss.png", "figure2_best_loss.pdf", "settings.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    import pandas as pd

    best = pd.read_csv(tmp_path / "best.csv")
    assert len(best) == 3 * 2 * 3  # modes x dims x methods
    assert len(pd.read_csv(tmp_path / "runs.csv")) == 3 * 2 * 3 * 2  # ... x lrs
