"""A private selection's K is checked before the sweep composes its runs (issue #60, round three's
catalogue: `pazo-sweep demo_private_selection --k-mean 1e9 --dry-run` said its one line after 30 to
50 s of composing every run on a loaded machine): a bad --k, --k-mean or --k-shape is one line,
exit 2, and no run is composed."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pazo.sweep.command as sweep

BAD_MEANS = st.one_of(st.floats(max_value=1.0, allow_nan=False), st.floats(min_value=1000.5),
                      st.just(math.nan), st.just(math.inf))


@st.composite
def bad_k(draw) -> list[str]:
    """Options that make a bad distribution of K: an unknown name, a mean out of range, or the
    truncated negative binomial with a shape that is not above 0."""
    kind = draw(st.sampled_from(["name", "mean", "shape"]))
    if kind == "name":
        return ["--k", draw(st.text("abcxyz_", min_size=1, max_size=10))]
    if kind == "mean":
        return [f"--k-mean={draw(BAD_MEANS)!r}"]   # (=: a negative number is not taken for an option)
    return ["--k", "truncated_negative_binomial", f"--k-shape={draw(st.floats(max_value=0.0))!r}"]


#: capsys and monkeypatch hold across examples (each reads its own lines)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(options=bad_k())
@example(options=["--k-mean", "1e9"])   # the catalogue's case
def test_a_bad_k_is_one_line_before_any_run_is_composed(options, tmp_path, monkeypatch, capsys):
    def composed(*args, **kwargs):
        raise AssertionError("the runs were composed")

    monkeypatch.setattr(sweep, "check", composed)
    code = sweep.main(["demo_private_selection", "--dry-run", "--out", str(tmp_path / "out"), *options])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("pazo: error: "), err
    assert "K" in err[0] or "eta" in err[0]
    assert not (tmp_path / "out").exists()


class Composed(Exception):
    """The sweep went on to compose its runs."""


def test_a_good_k_goes_on_to_the_runs(tmp_path, monkeypatch):
    def composed(*args, **kwargs):
        raise Composed

    monkeypatch.setattr(sweep, "check", composed)
    with pytest.raises(Composed):
        sweep.main(["demo_private_selection", "--dry-run", "--out", str(tmp_path / "out"), "--k-mean", "3"])
