"""DP-ZO's (Tang et al. 2024) Laplace tables: the pure epsilon of Table 12 and the pure-DP PRV column of
Table 13, from our Laplace accountant (split from tests/methods/test_other_zo.py)."""
import pytest

from pazo.privacy.accountants import LaplaceAccountant, laplace_pure_epsilon


@pytest.mark.parametrize("sigma,n,epsilon", [(10.5, 1000, 4), (4.5, 1000, 10), (3.2, 1000, 15), (2.5, 5000, 4)])
def test_dp_zo_table_12_pure_epsilon(sigma, n, epsilon):
    """Tang et al. 2024, Table 12 (batch 20, 2000 steps): the listed sigma meets the listed epsilon."""
    spent = laplace_pure_epsilon(sigma, 20 / n, 2000)
    assert spent <= epsilon and spent == pytest.approx(epsilon, rel=0.03)


@pytest.mark.parametrize("sigma,expected", [(30.8, 0.51), (16.3, 1.04),
                                            pytest.param(4.6, 4.70, marks=pytest.mark.slow)])
def test_dp_zo_table_13_pure_dp_prv_column(sigma, expected):
    """Table 13 (|D| = 1000, batch 16, 75000 steps, delta 1e-5), 'by pure-DP PRV' column."""
    acc = LaplaceAccountant(sigma, 16 / 1000, 75000, 1e-5)
    bounds = acc.epsilon(75000)
    # our account is the exact optimal composition: at most the paper's two-decimal PRV upper bound
    # (up to its rounding) and within that bound's accuracy (2 x eps_error = 0.02) of it
    assert expected - 0.025 <= bounds.upper <= expected + 0.005
    assert bounds.lower == bounds.upper
    assert bounds.upper < acc.pure_epsilon(75000) / 10  # far below the pure composition
