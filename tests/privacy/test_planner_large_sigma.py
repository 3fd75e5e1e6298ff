"""`pazo-privacy epsilon` at large noise (pazo.privacy.planner.epsilon_of without a run's accuracy):
more noise than a run would use spends a tiny epsilon, and 1% of it as PRV's accuracy asked for a
grid beyond the memory limit, so sigma=100 was refused with advice (a run's key, more noise) the
command could not follow. The accuracy is now no finer than a grid that fits: every sigma from
where runs live up to far beyond is answered, and the answer is an interval that overlaps PLD's,
as one true epsilon bounded by two accountants must. (The tests set a grid limit smaller than the
package's, so that each account is cheap, but one at which every account of their domain fits at a
run's coarsest accuracy, 0.01: the accuracy is never coarser than that, so a limit below it would
refuse there, as a run would.)"""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo.privacy import accountants
from pazo.privacy.cli import main
from pazo.privacy.planner import epsilon_of

CHEAP_GRID = 500_000   # (sigma 20, q 0.5, T 2000, delta 1e-10 at accuracy 0.01: 434k points)


@pytest.fixture(autouse=True)
def cheap_prv_grid(monkeypatch):
    monkeypatch.setattr(accountants, "PRV_GRID_MAX", CHEAP_GRID)


@settings(max_examples=3, deadline=None)
@given(sigma=st.floats(20.0, 1e6), q=st.floats(1e-3, 0.5), steps=st.integers(1, 2000),
       delta=st.sampled_from([1e-10, 1e-5, 1e-3]))
@example(sigma=100.0, q=0.01, steps=1000, delta=1e-5)   # the walk's refused case (issue #59)
@example(sigma=1e6, q=0.01, steps=10, delta=1e-5)
@example(sigma=20.0, q=0.5, steps=353, delta=1e-10)   # found in the default suite: a run's accuracy fits
@example(sigma=20.0, q=0.5, steps=42, delta=1e-10)    # PRV's upper bound 0.0100 above PLD's
def test_any_large_sigma_has_an_epsilon_within_what_pld_bounds(sigma, q, steps, delta):
    prv, pld = epsilon_of(sigma, q, steps, delta, "prv"), epsilon_of(sigma, q, steps, delta, "pld")
    assert 0 <= prv.lower <= prv.upper <= pld.upper + 2 * 0.01   # its interval: at most twice a run's coarsest accuracy
    assert max(prv.lower, pld.lower) <= min(prv.upper, pld.upper) + 2e-3


def test_the_reported_command_prints_an_epsilon(capsys):
    argv = ["epsilon", "--sigma", "100", "--delta", "1e-5", "--sample-rate", "0.01", "--steps", "1000"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith("epsilon = ") and "at sigma 100" in out and not err
