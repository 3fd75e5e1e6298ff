"""A sweep's private selection (pazo.selection, `pazo-sweep --selection private`): the draw is kept
0600 and reused, a failed, over-budget or unscored run counts with the lowest score, only the chosen
run is released (without K), the dry run prints each cell's cost and launches nothing, a user's
mistake is one line, and on digits a small sweep releases one run per cell whose printed total
agrees with the independent Theorem 2 computation of tests/privacy/test_private_selection.py."""
import json
import logging
import math
import re
import stat
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import pazo.selection as sel
import pazo.sweep as sweep
from pazo.errors import ConfigError
from pazo.privacy.selection import DISTRIBUTIONS, MAX_MEAN, KDistribution
from tests.privacy.test_private_selection import theorem2_epsilon


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_draw_is_private_reused_and_tied_to_its_grid(tmp_path):
    state = tmp_path / "sweep" / sel.PRIVATE / "digits" / "dpsgd" / "eps=1" / "seed=0" / "selection.json"
    k, grid = KDistribution("geometric", 5), ["a", "b", "c"]
    drawn = sel.load_or_draw(state, k, grid)
    assert mode(state) == 0o600
    assert all(mode(p) == 0o700 for p in [state.parent, *state.parents[:4]])
    assert drawn["k"] == len(drawn["draws"]) >= 1
    assert all(0 <= d["configuration"] < len(grid) for d in drawn["draws"])
    assert len({d["name"] for d in drawn["draws"]}) == drawn["k"]    # folder names tell nothing of K
    assert sel.load_or_draw(state, k, grid) == drawn                 # a relaunch reuses it
    with pytest.raises(ConfigError, match="another grid"):
        sel.load_or_draw(state, k, ["a", "b"])
    with pytest.raises(ConfigError, match="another grid"):
        sel.load_or_draw(state, KDistribution("geometric", 6), grid)


OUTCOMES = st.sampled_from(["finished", "failed", "over_budget", "no_val", "no_summary", "broken"])


def fake_selection_run(folder: Path, outcome: str, val: float) -> Path:
    folder.mkdir(parents=True)
    if outcome == "no_summary":
        return folder
    if outcome == "broken":
        (folder / "summary.json").write_text("{not json")
        return folder
    privacy = {"private": True, "target_epsilon": 1.0, "epsilon_spent": 0.99, "within_budget": True,
               "guarantee_holds": True, "sampling": "poisson", "sampling_matches_accountant": True}
    if outcome == "over_budget":
        privacy.update(epsilon_spent=1.5, within_budget=False)
    summary = {"status": "failed" if outcome == "failed" else "finished", "privacy": privacy,
               "final_val_accuracy": None if outcome == "no_val" else val}
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


@settings(max_examples=40, deadline=None)
@given(runs=st.lists(st.tuples(OUTCOMES, st.floats(0, 1)), max_size=8))
def test_the_best_scored_run_is_chosen_and_the_others_score_lowest(tmp_path_factory, runs):
    root = tmp_path_factory.mktemp("runs")
    dirs = [fake_selection_run(root / f"run-{i}", outcome, val) for i, (outcome, val) in enumerate(runs)]
    scores = [val if outcome == "finished" else -math.inf for outcome, val in runs]
    chosen = sel.choose(dirs)
    if not scores or max(scores) == -math.inf:
        assert chosen is None
    else:
        assert chosen == scores.index(max(scores))


def test_the_release_carries_the_total_and_not_k(tmp_path):
    run = fake_selection_run(tmp_path / ".private" / "run-x", "finished", 0.5)
    (run / "config.yaml").write_text("seed: 3\n")
    (run / "wandb").mkdir()
    summary = json.loads((run / "summary.json").read_text())
    summary["privacy"]["assumptions"] = {"no_selection": "...", "seed_secret": "..."}
    (run / "summary.json").write_text(json.dumps(summary))
    record = {"distribution": "geometric", "mean": 10, "total_epsilon": 2.5, "delta": 1e-5, "seeds": 2,
              "total_epsilon_all_seeds": 3.4}
    public = tmp_path / "digits" / "dpsgd" / "eps=1" / "selected,seed=0"
    public.parent.mkdir(parents=True)
    sel.release(run, public, record)
    released = json.loads((public / "summary.json").read_text())
    assert released["selection"] == record and released["run_dir"] == str(public)
    assert "no_selection" not in released["privacy"]["assumptions"]
    assert "3.4" in released["privacy"]["assumptions"]["private_selection"]
    assert not (public / "wandb").exists() and (public / "config.yaml").exists()
    assert mode(public) == 0o755 and mode(public / "summary.json") == 0o644


def mini(tmp_path, methods="[dpsgd]", extra="{train.steps: [2]}", more=""):
    path = tmp_path / "mini.yaml"
    path.write_text(f"name: mini\nsettings: [digits]\nmethods: {methods}\nepsilons: [1]\nextra: {extra}\n{more}")
    return str(path)


def test_the_dry_run_prints_each_cells_cost_and_launches_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pazo.sweep")
    out = tmp_path / "out"
    assert sweep.main([mini(tmp_path), "--dry-run", "--selection", "private", "--k-mean", "4", "--out", str(out)]) == 0
    line = next(r.getMessage() for r in caplog.records if "digits/dpsgd/eps=1" in r.getMessage())
    assert "K ~ geometric (mean 4)" in line and "E[K] 4" in line and "each run epsilon 1" in line
    assert float(re.search(r"total epsilon ([0-9.]+)", line).group(1)) > 1
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--k", "poisson", "--k-shape", "2"], "takes no shape"),
    (["--k", "binomial"], "unknown distribution"),
    (["--k-mean", "0.5"], "above 1"),
])
def test_a_bad_selection_setting_is_one_line(tmp_path, capsys, args, message):
    assert sweep.main([mini(tmp_path), "--dry-run", "--selection", "private", *args,
                       "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pazo: error:") and message in err[0]


def test_a_spec_with_an_unknown_selection_is_refused(tmp_path, capsys):
    assert sweep.main([mini(tmp_path, more="selection: best\n"), "--dry-run", "--out", str(tmp_path / "o")]) == 2
    assert "unknown selection 'best'" in capsys.readouterr().err


@pytest.mark.slow
def test_digits_releases_one_run_per_cell_with_the_total_the_tests_compute(tmp_path, caplog):
    """A spec asking for private selection: one cell (DP-SGD at epsilon 1 over two learning rates),
    E[K] 1.5; the released run's own account gives the printed total by Theorem 2; a relaunch runs
    nothing and keeps the draw."""
    caplog.set_level(logging.INFO, logger="pazo.sweep")
    spec = mini(tmp_path, more="selection: private\nk: {distribution: geometric, mean: 1.5}\n")
    out = tmp_path / "out"
    assert sweep.main([spec, "--out", str(out), "logger.mode=offline"]) == 0
    sweep_dir = out / "mini"
    released = [p.parent for p in sweep_dir.rglob("config.yaml") if sel.PRIVATE not in p.parts
                and ".hydra" not in p.parts]
    assert [p.relative_to(sweep_dir).as_posix() for p in released] == ["digits/dpsgd/eps=1/selected,seed=0"]
    summary = json.loads((released[0] / "summary.json").read_text())
    privacy, record = summary["privacy"], summary["selection"]
    assert "k" not in record and not (released[0] / "wandb").exists()
    assert mode(sweep_dir / sel.PRIVATE) == 0o700
    state = next((sweep_dir / sel.PRIVATE).rglob("selection.json"))
    assert mode(state) == 0o600
    for run in state.parent.glob("run-*"):      # the K runs logged nothing to W&B and stay private
        assert "mode: disabled" in (run / "config.yaml").read_text() and mode(run / "config.yaml") == 0o600
    printed = next(r.getMessage() for r in caplog.records if "digits/dpsgd/eps=1" in r.getMessage())
    total = float(re.search(r"total epsilon ([0-9.]+)", printed).group(1))
    independent = theorem2_epsilon(privacy["sample_rate"], privacy["sigma"], privacy["steps"], 1.5, 1.0,
                                   privacy["delta"])
    assert total == pytest.approx(record["total_epsilon"], abs=5e-4)
    assert independent * 0.9 <= total <= independent * (1 + 1e-6) + 5e-4
    before = state.read_text()
    caplog.clear()
    assert sweep.main([spec, "--out", str(out)]) == 0
    assert state.read_text() == before
    assert not any(r.getMessage().startswith("[") for r in caplog.records)   # no run line: nothing ran


def test_a_laplace_cell_is_refused_before_any_run(tmp_path, capsys):
    """DP-ZO with Laplace noise: no RDP account of its selection here; the dry run names the cell,
    a launch is one error line, exit 2, and nothing is drawn or run."""
    spec = tmp_path / "lap.yaml"
    spec.write_text("name: lap\nsettings: [digits]\nmethods: [dp_zo]\nepsilons: [1]\ngrid: false\n"
                    "extra: {method.noise: [laplace], train.steps: [2]}\n")
    out = tmp_path / "out"
    assert sweep.main([str(spec), "--selection", "private", "--out", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pazo: error:")]
    assert len(err) == 1 and "Gaussian runs only" in err[0] and "digits/dp_zo/eps=1" in err[0]
    assert not out.exists()


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["geometric", "logarithmic", "truncated_negative_binomial", "poisson", "binomial", "tnb"]),
       mean=st.one_of(st.floats(allow_nan=True), st.integers(-5, 5_000)),
       shape=st.one_of(st.none(), st.floats(-1, 10)))
@example(name="geometric", mean=1e9, shape=None)
def test_a_bad_distribution_of_k_names_the_choices_only_for_a_bad_name(name, mean, shape):
    """A ConfigError of one line, which names the distributions where the name is wrong and only there;
    a mean above the maximum says the maximum and why."""
    try:
        sel.k_distribution(name, mean, shape)
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message
        assert ("choices:" in message) == (name not in DISTRIBUTIONS)
        if name in DISTRIBUTIONS and isinstance(mean, (int, float)) and MAX_MEAN < mean < math.inf:
            assert f"at most {MAX_MEAN}" in message and "whole training run" in message


def test_an_expected_k_of_a_billion_is_one_line_before_anything_is_drawn(tmp_path, capsys, monkeypatch):
    """The reported case: `--k-mean 1e9` drew a list of 693 million runs (3 GB) before anything ran."""
    monkeypatch.setattr(KDistribution, "draw", lambda *a, **k: pytest.fail("K was drawn"))
    out = tmp_path / "out"
    for dry in ([], ["--dry-run"]):
        assert sweep.main([mini(tmp_path), "--selection", "private", "--k-mean", "1e9", "--out", str(out), *dry]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("pazo: error: the mean of K is at most 1000, got 1e+09")
        assert "choices" not in err[0]
    assert not out.exists()
