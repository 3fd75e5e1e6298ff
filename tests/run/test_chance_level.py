"""A run whose final test accuracy is at chance level says so: `summary["warnings"]` holds a
`chance_level: ...` entry (also in summary.json and in the printed summary); a run that learned
has no warning."""
from __future__ import annotations

import json
import math


from pazo.run.summary import chance_level_warning
from pazo.train import run

DIGITS_TEST = [36, 36, 35, 37, 36, 36, 36, 36, 35, 36]   # the digits test split: 359 images, majority 37


def test_balanced_test_set_threshold_is_majority_rate_plus_two_standard_errors():
    p0 = 37 / 359
    edge = p0 + 2 * math.sqrt(p0 * (1 - p0) / 359)          # 0.1352
    assert chance_level_warning(0.10, DIGITS_TEST).startswith("chance_level: final test accuracy 0.100 ")
    assert chance_level_warning(0.05, DIGITS_TEST) is not None   # worse than a constant guess: chance too
    assert chance_level_warning(edge - 1e-9, DIGITS_TEST) is not None
    assert chance_level_warning(edge + 1e-9, DIGITS_TEST) is None
    assert chance_level_warning(0.9, DIGITS_TEST) is None
    assert "majority-class rate 0.103 (n_test 359)" in chance_level_warning(0.12, DIGITS_TEST)


def test_imbalanced_test_set_compares_with_the_majority_class_not_one_over_classes():
    hist = [900, 100]                                        # a constant guess scores 0.9
    assert chance_level_warning(0.5, hist) is not None       # far above 1/2, still below the constant guess
    assert chance_level_warning(0.91, hist) is not None      # margin 2 sqrt(0.09 / 1000) = 0.019
    assert chance_level_warning(0.93, hist) is None


def test_no_accuracy_or_no_test_set_gives_no_warning():
    assert chance_level_warning(None, DIGITS_TEST) is None   # a failed run has no final accuracy
    assert chance_level_warning(0.1, [0, 0]) is None


def test_run_forced_to_chance_warns_in_summary_file_and_console(hydra_cfg, tmp_path, caplog):
    summary = run(hydra_cfg("method=dpzero", "method.lr=1e-9"), tmp_path)
    assert summary["status"] == "finished"
    assert summary["final_test_accuracy"] < 0.135
    [warning] = summary["warnings"]
    assert warning.startswith("chance_level: final test accuracy ")
    assert json.loads((tmp_path / "summary.json").read_text())["warnings"] == [warning]
    printed = [r for r in caplog.records if r.levelname == "WARNING"]  # the console shows these on stderr
    assert any(f"warning: {warning}" in r.getMessage() for r in printed)


def test_run_that_learns_has_no_warning(hydra_cfg, tmp_path, caplog):
    summary = run(hydra_cfg("method=sgd", "privacy=none", "method.lr=0.2", "train.steps=60"), tmp_path)
    assert summary["status"] == "finished" and summary["final_test_accuracy"] > 0.5
    assert summary["warnings"] == []
    assert json.loads((tmp_path / "summary.json").read_text())["warnings"] == []
    assert not any("warning:" in r.getMessage() for r in caplog.records)
