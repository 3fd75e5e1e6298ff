"""Argument forms of the bench commands (round two): `--cases`, `--dims`, `--lrs`, `--methods`,
`--batch`... are argparse types, so a malformed one (a missing colon, an empty or zero step count, a
negative epsilon, a third field, an empty element) is one argparse-style `pazo: error:` line and
exit 2 before anything is measured or written; `pazo-bench memory` on a device that is not there
says so in one line instead of relaying its child's traceback."""
from __future__ import annotations

import argparse
import subprocess

import pytest
from fault_inputs_helpers import assert_one_error, run_entry
from hypothesis import given
from hypothesis import strategies as st

from pazo import bench
from pazo.bench import calibration
from pazo.bench.calibration import epsilon_steps
from pazo.bench.common import comma_separated

CASES = ["1", "1:", ":100", "1:0", "0:100", "1:-5", "=-1:100", "1:100:3", "", "1:100,,2:50", "1:100,", "abc:100",
         "1:ten", "1e9:100", "nan:100", "inf:100", "1:1.5"]


@pytest.mark.parametrize("cases", CASES)
def test_a_malformed_calibration_case_is_one_argparse_line(cases, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(calibration, "calibrate_sigma", lambda *a, **k: pytest.fail("a case was timed"))
    option = ["--cases" + cases] if cases.startswith("=") else ["--cases", cases]
    code, _, err = run_entry(bench.main, ["calibration", *option, "--out", str(tmp_path / "c.json")], capsys)
    assert code == 2
    assert_one_error(code, err, "argument --cases")
    assert not (tmp_path / "c.json").exists()


field = st.one_of(st.integers(-5, 200).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                  st.text("0123456789.:-ex", max_size=6))


@given(cases=st.lists(st.lists(field, min_size=0, max_size=4).map(":".join), min_size=0, max_size=4).map(",".join))
def test_cases_parse_exactly_when_every_case_is_a_good_epsilon_and_step_count(cases):
    """The rule: a case list is accepted if and only if each case is two fields, an epsilon in the
    accountant's range and an integer step count >= 1; accepted cases are returned whole, in order."""
    def good(case: str) -> bool:
        parts = case.split(":")
        if len(parts) != 2:
            return False
        try:
            epsilon, steps = float(parts[0]), int(parts[1])
        except ValueError:
            return False
        return 1e-3 <= epsilon <= 50 and steps >= 1

    expected_ok = bool(cases.strip()) and all(good(c.strip()) for c in cases.split(","))
    try:
        parsed = comma_separated(epsilon_steps)(cases)
    except argparse.ArgumentTypeError:
        assert not expected_ok, cases
        return
    assert expected_ok, cases
    assert parsed == [(float(c.split(":")[0]), int(c.split(":")[1])) for c in cases.split(",")]


BENCH_ARGS = [
    (["dimension", "--dims", "10,x"], "--dims"), (["dimension", "--dims", "10,,30"], "--dims"),
    (["dimension", "--lrs", "0.1,-1"], "--lrs"), (["dimension", "--modes", "huge"], "--modes"),
    (["dimension", "--steps", "0"], "--steps"), (["dimension", "--epsilon", "-2"], "--epsilon"),
    (["memory", "--batch", "0"], "--batch"), (["memory", "--methods", "mezo,bogus"], "bogus"),
    (["memory", "--methods", "dpsgd"], "dpsgd"), (["memory", "--length", "x"], "--length"),
    (["engines", "--iters", "zero"], "--iters"), (["profile", "--pairs", "0"], "--pairs"),
]


@pytest.mark.parametrize("argv,word", BENCH_ARGS, ids=[" ".join(a) for a, _ in BENCH_ARGS])
def test_a_bad_benchmark_argument_is_one_line_before_any_job(argv, word, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a job was started"))
    code, _, err = run_entry(bench.main, [*argv, "--out", str(tmp_path / "r")], capsys)
    assert code == 2
    assert_one_error(code, err, word)
    assert not (tmp_path / "r").exists()


def test_memory_on_a_cuda_that_is_not_there_is_one_line_before_any_child(tmp_path, capsys, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a measuring child was started"))
    code, _, err = run_entry(bench.main, ["memory", "--device", "cuda", "--out", str(tmp_path / "m.json")], capsys)
    assert code == 2
    assert_one_error(code, err, "cuda", "not available")


def test_a_failed_measuring_child_is_one_line(tmp_path, capsys, monkeypatch):
    failed = subprocess.CompletedProcess([], 1, "", "Traceback (most recent call last):\n  ...\n" * 12
                                         + "RuntimeError: out of memory\n")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: failed)
    code, _, err = run_entry(bench.main, ["memory", "--out", str(tmp_path / "m.json")], capsys)
    assert_one_error(code, err, "forward", "out of memory")
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "m.json").exists()
