"""`pazo-train ... --plan`: the run's privacy plan printed without training, exit 0, and nothing
written under the output root; a bad override is the same one line as a run's."""
from __future__ import annotations

import pytest
from conftest import run_cache

from pazo.train import plan_only


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A working directory outside the checkout (the output root, outputs/, is relative to it)."""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.mark.parametrize("overrides, says", [
    (["train.epochs=2"], "accountant: prv (privacy.accountant); cross-check, epsilon after 36 steps"),
    (["train.steps=20", "privacy.accountant=rdp"], "accountant: rdp (privacy.accountant)"),
    (["privacy=none", "method=mezo"], "note: non-private run"),
])
def test_the_plan_is_printed_and_nothing_is_written(overrides, says, elsewhere, capsys):
    run_dir = elsewhere / "run"
    assert plan_only([*overrides, f"hydra.run.dir={run_dir}"]) == 0
    out, err = capsys.readouterr()
    assert says in out and "n = 1165 private examples" in out and "no model read any example" in out
    assert out.rstrip().endswith("nothing was trained and no run directory was written") and not err
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("overrides, says", [
    (["privacy.accountant=xx"], "unknown privacy.accountant 'xx'; choices: pld, prv, rdp"),
    (["train.batch_size=5000"], "train.batch_size=5000 exceeds the 1165 private training examples"),
    (["-m", "method=sgd,dpsgd"], "--plan plans one run"),
])
def test_a_bad_command_line_is_one_line_and_exit_2(overrides, says, elsewhere, capsys):
    assert plan_only(overrides) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and err.startswith("pazo: error: ") and says in err
    assert list(elsewhere.iterdir()) == []
