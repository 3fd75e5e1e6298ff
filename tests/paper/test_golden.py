"""Refactors keep the numbers: each short digits run of `tests/paper/golden/cases.py` gives, for the same
seed, the metrics recorded in `tests/paper/golden/digits_runs.json`. The runs are in float64
(`record.run_case` says why), where the CPU's kernels move them by under 1e-12 (relative): a
difference over 1e-9 is a change of the arithmetic, on whatever machine the test runs."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import run_cache
from golden.cases import CASES        # tests/paper/golden is a package under pytest's default (prepend) import mode
from golden.record import run_case

GOLDEN = Path(__file__).resolve().parent / "golden"

RECORDED = json.loads((GOLDEN / "digits_runs.json").read_text())
#: the logged epsilon's schedule is not part of a method's arithmetic (the final one is compared)
NOT_COMPARED = {"epsilon"}


def close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_seed_same_numbers_as_recorded(name, tmp_path, monkeypatch):
    # the session's sigma cache: its entries are this code's own calibrations (a changed calibration
    # still changes the recorded sigma), computed once for the cases that share an account
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    got, want = run_case(name, CASES[name], tmp_path), RECORDED[name]
    assert [r["step"] for r in got["rows"]] == [r["step"] for r in want["rows"]]
    for g, w in zip(got["rows"], want["rows"]):
        for key, value in w.items():
            if key not in NOT_COMPARED:
                assert close(g.get(key), value), f"{name} step {w['step']} {key}: {g.get(key)} != {value}"
    for key in ("epsilon_spent", "sigma", "final_test_accuracy"):
        assert close(got[key], want[key]), f"{name} {key}: {got[key]} != {want[key]}"
