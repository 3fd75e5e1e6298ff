"""The tables and figures (pazo.report) on fabricated run directories: the paper's protocol (best test
accuracy over the grid) with '—' when every configuration failed and the paper's values beside
ours, selection on validation accuracy over seeds, runs without a privacy guarantee left out of the
epsilon columns and listed, chance-level marks, the public-only reference, the Table 8 and Table 5
layouts (from benchmark result files), and figures that render. The benchmarks themselves are
tests/bench/test_benchmarks.py; the paper's transcribed values, tests/paper/test_paper_values.py."""
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pazo.report import figures as make_figures
from pazo.report import tables as make_tables
from pazo.run.results import load_runs, paper_values, select_configs


def fake_run(root: Path, setting, method, epsilon, status, accuracy, steps=4, seed=0, val="same", privacy=None,
             failure=None, warnings=(), **method_values):
    """A run directory as pazo.train writes it. `val`: its validation accuracy ("same": the test
    accuracy, None: a summary from before the validation split); `privacy`: changes to the privacy
    facts of a run that met its budget with Poisson sampling."""
    name = ",".join(f"{k}={v}" for k, v in method_values.items()) or "default"
    run_dir = root / setting / method / (f"eps={epsilon}" if epsilon else "nonprivate") / f"{name},seed={seed}"
    run_dir.mkdir(parents=True)
    cfg = {"dataset": {"name": setting}, "method": {"name": method, **method_values}, "seed": seed,
           "privacy": {"epsilon": epsilon}, "train": {"batch_size": 64},
           "logger": {"name": str(run_dir.relative_to(root))}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    facts = {"private": False}
    if epsilon is not None:
        facts = {"private": True, "target_epsilon": epsilon, "epsilon_spent": 0.99 * epsilon, "within_budget": True,
                 "guarantee_holds": True, "sampling": "poisson", "sampling_matches_accountant": True,
                 **(privacy or {})}
    summary = {"status": status, "failure": failure, "final_test_accuracy": accuracy if status == "finished" else None,
               "best_test_accuracy": accuracy, "median_s_per_iter": 0.01 * (1 + len(method)),
               "privacy": facts, "warnings": list(warnings)}
    if val is not None:
        val = accuracy if val == "same" else val
        summary.update(final_val_accuracy=val if status == "finished" else None, best_val_accuracy=val)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    rows = [{"step": s, "test_accuracy": (accuracy or 0.0) * s / steps} for s in range(1, steps + 1)]
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return run_dir


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "table1_cifar10"
    fake_run(root, "cifar10", "dpsgd", 1, "finished", 0.50, lr=0.1, clip=1.0)
    best = fake_run(root, "cifar10", "dpsgd", 1, "finished", 0.60, lr=0.2, clip=1.0)
    fake_run(root, "cifar10", "dpsgd", 1, "failed", None, lr=0.5, clip=1.0)
    fake_run(root, "cifar10", "gep", 1, "failed", None, lr=0.1)
    fake_run(root, "cifar10", "gep", 1, "failed", None, lr=0.2)
    fake_run(root, "cifar10", "sgd", None, "finished", 0.80, lr=0.1)
    fake_run(root, "cifar10", "public_only", None, "finished", 0.41, lr=0.1)
    fake_run(root, "cifar10", "public_only", None, "finished", 0.45, lr=0.2)
    for b, a, acc in [(8, 0.25, 0.70), (8, 0.5, 0.72), (32, 0.25, 0.69), (32, 0.5, 0.71)]:
        fake_run(root, "cifar10", "pazo_m", 1, "finished", acc, lr=0.1, public_batch_size=b, alpha=a)
    fake_run(root, "cifar10", "pazo_m", 1, "finished", 0.30, lr=0.5, public_batch_size=8, alpha=0.5)
    fake_run(root, "cifar10", "dpzero", 1, "finished", 0.48, lr=0.1)
    fake_run(root, "cifar10", "dpzero", 2, "finished", 0.49, lr=0.1)
    (root / "cifar10" / "pazo_s" / "eps=1" / "started").mkdir(parents=True)  # no config yet: ignored
    return root, best


def tables(root, out, *args):
    assert make_tables.main([str(root), "--out", str(out), *args]) == 0
    return (out / f"{root.name}_cifar10.md").read_text(), pd.read_csv(out / f"{root.name}_cifar10.csv",
                                                                       dtype={"column": str})


def cells(md: str) -> dict:
    """The Markdown table's cells by row label."""
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in md.split("\n\n")[1].splitlines()[2:]]
    return {row[0]: row[1:] for row in rows}


def test_selection_on_test_and_failures(sweep):
    root, best_dir = sweep
    runs = load_runs([root])
    assert len(runs) == 15 and set(runs.status) == {"finished", "failed"}
    best = select_configs(runs, selection="test").set_index(["method", "epsilon"])
    assert best.loc[("dpsgd", 1.0), "accuracy"] == 0.60 and best.loc[("dpsgd", 1.0), "best_run"] == str(best_dir)
    assert best.loc[("dpsgd", 1.0), "failed"] == 1 and best.loc[("dpsgd", 1.0), "runs"] == 3
    assert best.loc[("dpsgd", 1.0), "selected"] == "method.lr=0.2" and best.loc[("dpsgd", 1.0), "seeds"] == 1
    assert pd.isna(best.loc[("gep", 1.0), "accuracy"]) and best.loc[("gep", 1.0), "failed"] == 2
    assert best.loc[("pazo_m", 1.0), "accuracy"] == 0.72 and pd.isna(best.loc[("pazo_m", 1.0), "std"])


def test_selection_test_is_the_papers_protocol_and_says_so(sweep, tmp_path):
    root, _ = sweep
    out = tmp_path / "tables"
    md, csv = tables(root, out, "--selection", "test")
    assert "selected on test accuracy, as in the paper: not a private selection" in md.splitlines()[0]
    assert "60.0 (50.8, +9.2)" in md                    # DP-SGD at epsilon 1 vs the paper's 50.8
    assert "— (50.7)" in md                             # GEP: every configuration failed
    assert "80.0 (86.3, -6.3)" in md                    # SGD, non-private column
    assert "not run (70.9)" in md                       # PAZO-M at epsilon 0.1: not in our sweep
    row = csv[(csv.method == "dpzero") & (csv.column == "2")].iloc[0]
    assert row.ours == 49.0 and row.paper == 48.2 and row["diff"] == pytest.approx(0.8) and row.seeds == 1
    assert "\\begin{tabular}" in (out / "table1_cifar10_cifar10.tex").read_text()
    assert "#### Excluded runs\n\nnone" in md and pd.read_csv(out / "excluded.csv").empty


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(setting=st.sampled_from(["cifar10", "imdb", "digits", "blobs"]),
       methods=st.sets(st.sampled_from(["dpzero", "pazo_m", "public_only", "sgd"]), min_size=1),
       selection=st.sampled_from(["val", "test"]))
@example(setting="digits", methods={"dpzero", "pazo_m", "public_only"}, selection="val")   # the demo's table
def test_a_table_mentions_the_papers_values_only_where_its_cells_show_them(tmp_path_factory, setting, methods,
                                                                           selection):
    """A setting (or a choice of methods) the paper has no values for gets no "ours (paper, ...)"
    note and no paper in its cells; one with values gets both (before, digits' table explained cells
    beside the paper's values it did not have)."""
    root = tmp_path_factory.mktemp("sweep") / "demo"
    for method in methods:
        fake_run(root, setting, method, None if method in ("sgd", "public_only") else 1, "finished", 0.5)
    out = tmp_path_factory.mktemp("tables")
    assert make_tables.main([str(root), "--out", str(out), "--selection", selection]) == 0
    md = (out / f"demo_{setting}.md").read_text()
    paper = paper_values()
    has_values = bool(methods & set(paper[paper.setting == setting].method))
    assert ("ours (paper, ours - paper)" in md) == has_values
    assert has_values or "paper" not in md.replace("as in the paper", "")       # (the protocol's name aside)
    beside_paper = [c for label, row in cells(md).items() if label != make_tables.CONTRIBUTION for c in row
                    if c.endswith(")")]                                       # "ours (paper, diff)", "not run (paper)"
    assert bool(beside_paper) == has_values


def test_public_only_is_the_non_private_reference_row(sweep, tmp_path):
    md, csv = tables(sweep[0], tmp_path / "tables", "--selection", "test")
    rows = cells(md)
    assert list(rows)[:3] == ["SGD", "Public only", "DP-SGD"]
    assert rows["Public only"] == [*[""] * 5, "45.0"]       # eps=0.1, ..., 3: empty; non-private: 45.0
    assert "Public only: SGD on the public split alone" in md
    row = csv[csv.method == "public_only"].iloc[0]
    assert row.column == "nonprivate" and row.ours == 45.0 and pd.isna(row.paper)


def test_runs_without_a_guarantee_are_excluded_and_listed(tmp_path):
    root = tmp_path / "table1_cifar10"
    fake_run(root, "cifar10", "dpsgd", 1, "finished", 0.50, lr=0.1)
    over = fake_run(root, "cifar10", "dpsgd", 1, "failed", 0.97, lr=0.2, failure="over_budget: epsilon 1.8 > 1",
                    privacy={"epsilon_spent": 1.8, "within_budget": False, "guarantee_holds": False,
                             "over_budget": True})
    over_finished = fake_run(root, "cifar10", "dpsgd", 1, "finished", 0.96, lr=0.3,   # before the failure rule
                             privacy={"epsilon_spent": 1.5, "within_budget": False, "guarantee_holds": False})
    shuffle = fake_run(root, "cifar10", "dpsgd", 1, "finished", 0.99, lr=0.4,
                       privacy={"sampling": "shuffle", "sampling_matches_accountant": False,
                                "guarantee_holds": False})
    bare = fake_run(root, "cifar10", "dpsgd", 1, "finished", 0.98, lr=0.5, privacy={"guarantee_holds": None})
    out = tmp_path / "tables"
    md, csv = tables(root, out)
    dpsgd = csv[(csv.method == "dpsgd") & (csv.column == "1")].iloc[0]
    assert dpsgd.ours == 50.0 and dpsgd.excluded == 4 and dpsgd.runs == 5 and dpsgd.failed == 0
    assert "50.0 (50.8, -0.8)" in md and "shuffle" not in md.split("#### Excluded runs")[0]
    excluded = pd.read_csv(out / "excluded.csv").set_index("run_dir")
    assert list(excluded.columns[:3]) == ["method", "epsilon", "reason"]
    reasons = excluded.reason.to_dict()
    assert reasons[str(over)] == "over_budget: epsilon spent 1.8 > target 1"
    assert reasons[str(over_finished)] == "over_budget: epsilon spent 1.5 > target 1"
    assert reasons[str(shuffle)].startswith("shuffle_sampling: shuffle sampling")
    assert reasons[str(bare)] == "no_privacy_facts: summary.json lacks privacy.guarantee_holds"
    section = md.split("#### Excluded runs")[1]
    assert all(str(d) in section for d in (over, over_finished, shuffle, bare)) and "over_budget" in section

    md, csv = tables(root, tmp_path / "with_shuffle", "--include-shuffle")
    rows = cells(md)
    assert rows["DP-SGD (shuffle, guarantee void)"][2] == "99.0" and rows["DP-SGD"][2].startswith("50.0 (")
    assert str(shuffle) not in md.split("#### Excluded runs")[1]
    row = csv[(csv.method == "dpsgd") & (csv.variant == "shuffle")].iloc[0]
    assert row.ours == 99.0 and pd.isna(row.paper)


@pytest.fixture
def seeded(tmp_path):
    """PAZO-M at epsilon 1, three seeds a configuration: lr=0.1 is best on validation, lr=0.2 on
    test, lr=0.5 best of all on validation but one of its seeds diverged."""
    root = tmp_path / "table1_cifar10"
    for seed, (val, test) in enumerate([(0.70, 0.60), (0.72, 0.62), (0.71, 0.64)]):
        fake_run(root, "cifar10", "pazo_m", 1, "finished", test, seed=seed, val=val, lr=0.1)
    for seed, (val, test) in enumerate([(0.65, 0.80), (0.66, 0.81), (0.64, 0.79)]):
        fake_run(root, "cifar10", "pazo_m", 1, "finished", test, seed=seed, val=val, lr=0.2)
    fake_run(root, "cifar10", "pazo_m", 1, "finished", 0.90, seed=0, val=0.90, lr=0.5)
    fake_run(root, "cifar10", "pazo_m", 1, "finished", 0.91, seed=1, val=0.91, lr=0.5)
    fake_run(root, "cifar10", "pazo_m", 1, "failed", None, seed=2, failure="diverged at step 3", lr=0.5)
    return root


def test_selection_on_validation_over_seeds(seeded, tmp_path):
    out = tmp_path / "tables"
    md, csv = tables(seeded, out)
    row = csv[(csv.method == "pazo_m") & (csv.column == "1")].iloc[0]
    # lr=0.1: test 0.60, 0.62, 0.64 -> mean 62.0, sample std sqrt((0.02^2 + 0 + 0.02^2) / 2) = 2.0
    assert row.ours == 62.0 and row["std"] == 2.0 and row.seeds == 3 and row.selected == "method.lr=0.1"
    assert row.best_run.endswith("lr=0.1,seed=1") and row.configs == 3 and row.selectable_configs == 2
    assert "62.0 ± 2.0 (71.3, -9.3)" in md
    assert "configuration selected on validation accuracy" in md.splitlines()[0]
    assert "not accounted in epsilon" in md

    md, csv = tables(seeded, tmp_path / "on_test", "--selection", "test")
    row = csv[(csv.method == "pazo_m") & (csv.column == "1")].iloc[0]
    # lr=0.2: 0.80, 0.81, 0.79 -> mean 80.0, std 1.0 (lr=0.5 lost a seed and cannot be chosen)
    assert row.ours == 80.0 and row["std"] == 1.0 and row.selected == "method.lr=0.2"
    assert "80.0 ± 1.0 (71.3, +8.7)" in md and "as in the paper: not a private selection" in md


def test_selection_on_validation_needs_validation_accuracy(sweep, tmp_path, capsys):
    root, _ = sweep
    fake_run(root, "cifar10", "dpzero", 1, "finished", 0.47, val=None, lr=0.2)
    assert make_tables.main([str(root), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pazo: error: 1 of 13 finished runs have no validation accuracy") and err.count("\n") == 1
    assert "--selection test" in err
    assert make_figures.main([str(root), "--out", str(tmp_path / "f")]) == 2


def test_chance_level_cells_are_marked(tmp_path):
    root = tmp_path / "table1_cifar10"
    fake_run(root, "cifar10", "pazo_s", 1, "finished", 0.10, warnings=["chance_level: final accuracy 0.100"], lr=0.1)
    fake_run(root, "cifar10", "pazo_s", 1, "finished", 0.09, warnings=["chance_level: final accuracy 0.090"], lr=0.2)
    fake_run(root, "cifar10", "dpzero", 1, "finished", 0.45, lr=0.1)
    md, csv = tables(root, tmp_path / "tables")
    assert "10.0† (70.2, -60.2)" in md and "45.0 (" in md and "45.0†" not in md
    assert "†: the selected configuration ended at chance-level accuracy" in md
    assert csv[csv.column == "1"].set_index("method").chance_level.to_dict() == {"dpzero": 0, "pazo_s": 1}


def test_table8_and_table5_layouts(tmp_path):
    root = tmp_path / "table8_q"
    fake_run(root, "imdb", "pazo_m", 1, "finished", 0.73, q=1)
    fake_run(root, "imdb", "pazo_m", 1, "finished", 0.74, q=5)
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"device": "test", "command": "x", "results": [
        {"setting": "imdb_lstm", "paper_setting": "imdb", "method": "pazo_m", "impl": "pazo",
         "median_s": 0.02, "p25_s": 0.019, "p75_s": 0.021, "floor_s": 0.01, "floor_ratio": 2.0, "forwards": 2},
        {"setting": "imdb_lstm", "paper_setting": "imdb", "method": "dpsgd", "impl": "pazo", "median_s": 0.06},
        {"setting": "imdb_lstm", "paper_setting": "imdb", "method": "dpsgd", "impl": "opacus-hooks",
         "median_s": 0.01}]}))
    cpu = tmp_path / "cpu.json"  # a second file, a setting without a paper column, two engines
    cpu.write_text(json.dumps({"device": "cpu x2", "command": "y", "threads": 1, "load_average": [1.0, 1.0, 1.0],
                               "results": [
        {"setting": "digits", "method": "forward", "impl": "floor", "median_s": 0.003, "peak_mem_mb": 870.0},
        {"setting": "digits", "method": "dpsgd", "impl": "pazo", "median_s": 0.016},
        {"setting": "digits", "method": "pazo_m", "impl": "pazo", "engine": "vectorised", "median_s": 0.010,
         "forwards": 2, "floor_s": 0.0071, "paired_floor_ratio": 1.43},
        {"setting": "digits", "method": "pazo_m", "impl": "pazo", "engine": "inplace", "median_s": 0.008,
         "forwards": 2, "paired_speedup_over_dpsgd": 1.8, "floor_s": 0.0069, "paired_floor_ratio": 1.155,
         "peak_mem_mb": 887.4, "mem_ratio": 1.02},
        # both engines paired with DP-SGD: the vectorised job's median is lower (the machine drifted
        # between the jobs), but in pairs the in-place step is the faster one
        {"setting": "digits", "method": "dpzero", "impl": "pazo", "engine": "vectorised", "median_s": 0.005,
         "forwards": 2, "paired_speedup_over_dpsgd": 1.9},
        {"setting": "digits", "method": "dpzero", "impl": "pazo", "engine": "inplace", "median_s": 0.006,
         "forwards": 2, "paired_speedup_over_dpsgd": 2.6}]}))
    out = tmp_path / "tables"
    assert make_tables.main([str(root), "--benchmark", str(bench), str(cpu), "--out", str(out)]) == 0
    q = (out / "table8_q.md").read_text()
    assert "73.0 (72.9, +0.1)" in q and "74.0 (73.6, +0.4)" in q
    speed = (out / "table5_speed.md").read_text()
    assert "0.0200 [2.0x floor] (0.019)" in speed and "0.0080 inplace" in speed
    assert "0.0060 inplace" in speed and "0.0050" not in speed   # the engine the speedup table picks
    speedup = pd.read_csv(out / "table5_speedup.csv").set_index(["setting", "method"])
    # ours: our DP-SGD (not Opacus') over the method; the paper's: 0.173 / 0.019 from its Table 5
    assert speedup.loc[("imdb_lstm", "pazo_m"), "speedup_over_dpsgd"] == pytest.approx(3.0)
    assert speedup.loc[("imdb_lstm", "pazo_m"), "paper_speedup_over_dpsgd"] == pytest.approx(0.173 / 0.019)
    # the faster engine's row, and its paired ratio (one process) over the medians' 0.016 / 0.008 = 2.0
    assert speedup.loc[("digits", "pazo_m"), "speedup_over_dpsgd"] == pytest.approx(1.8)
    assert pd.isna(speedup.loc[("digits", "pazo_m"), "paper_speedup_over_dpsgd"])
    # the faster engine by the paired ratios, not by the two jobs' medians
    assert speedup.loc[("digits", "dpzero"), "speedup_over_dpsgd"] == pytest.approx(2.6)
    assert speedup.loc[("digits", "dpzero"), "engine"] == "inplace"
    md = (out / "table5_speedup.md").read_text()
    assert "3.00x (9.1x)" in md and "1.80x" in md and "cpu.json: cpu x2, 1 thread(s)" in md
    # against the floor: each engine's paired ratio, the in-place floor and memory, the forward's row named
    floor = pd.read_csv(out / "table5_floor.csv").set_index(["setting", "method", "engine"])
    assert floor.loc[("digits", "pazo_m", "inplace"), "paired_floor_ratio"] == pytest.approx(1.155)
    assert floor.loc[("imdb_lstm", "pazo_m", "vectorised"), "floor_ratio"] == pytest.approx(2.0)
    md = (out / "table5_floor.md").read_text()
    assert "| digits    | PAZO-M   | 8.0          | 6.9        | 1.155 " in md and "| 10.0            | 1.430 " in md
    assert "887 (1.02)" in md and "digits: one no-grad forward 3.0 ms, peak 870 MB" in md


def test_fastest_ignores_a_paired_speedup_that_is_not_a_number():
    fastest = make_tables.fastest
    rows = [{"setting": "digits", "method": "dpzero", "engine": "vectorised", "median_s": 0.006,
             "paired_speedup_over_dpsgd": float("nan")},
            {"setting": "digits", "method": "dpzero", "engine": "inplace", "median_s": 0.005,
             "paired_speedup_over_dpsgd": 2.0}]
    # a NaN is no paired value: the engines are ranked by their medians (max() kept the NaN row)
    assert fastest(rows, "dpzero", "digits")["engine"] == "inplace"
    rows[0]["paired_speedup_over_dpsgd"] = 1.5
    assert fastest(rows, "dpzero", "digits")["engine"] == "inplace"
    rows[0]["paired_speedup_over_dpsgd"] = 2.5   # both paired: the paired ratio decides, not the medians
    assert fastest(rows, "dpzero", "digits")["engine"] == "vectorised"


def test_a_missing_benchmark_file_is_one_line(tmp_path, capsys):
    assert make_tables.main(["--benchmark", str(tmp_path / "nope.json"), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pazo: error: no benchmark result file") and err.count("\n") == 1
    assert not (tmp_path / "t").exists()


def test_figures_render(sweep, tmp_path, monkeypatch):
    import matplotlib.axes

    lines = []
    axhline = matplotlib.axes.Axes.axhline
    monkeypatch.setattr(matplotlib.axes.Axes, "axhline",
                        lambda ax, y=0, *a, **k: lines.append((y, k.get("label"))) or axhline(ax, y, *a, **k))
    root, _ = sweep
    out = tmp_path / "figs"
    assert make_figures.main([str(root), "--out", str(out), "--epsilon", "1"]) == 0
    for name in ["figure2_accuracy_vs_epsilon", "figure3_best_zo_vs_fo", "figure4_accuracy_vs_steps",
                 "figure5_accuracy_vs_speed", "figure6_robustness"]:
        for ext in ("png", "pdf"):
            assert (out / f"{name}.{ext}").stat().st_size > 1000
    assert lines == [(pytest.approx(45.0), "Public only")]      # Figure 2: the public-only reference


def test_figures_render_a_privately_selected_cell_without_validation_accuracy(sweep, tmp_path):
    """A cell released by a private selection has no validation score (the release withholds it)."""
    root, _ = sweep
    released(root, "dpsgd", 2, 0, 0.55, lr=0.1)
    assert make_figures.main([str(root), "--out", str(tmp_path / "figs"), "--epsilon", "1"]) == 0
    assert (tmp_path / "figs" / "figure3_best_zo_vs_fo.png").stat().st_size > 1000


def test_memory_switches_do_not_split_a_configuration(tmp_path):
    """Seeds of one PAZO-P configuration, one run taking its public gradients one after another
    (`method.public_grads_together=false`, a memory switch) and one from before the key existed,
    are one configuration of the table; a learning rate is another."""
    fake_run(tmp_path / "s", "digits", "pazo_p", 1.0, "finished", 0.8, seed=0, lr=0.1, public_grads_together=True)
    fake_run(tmp_path / "s", "digits", "pazo_p", 1.0, "finished", 0.7, seed=1, lr=0.1, public_grads_together=False)
    fake_run(tmp_path / "s", "digits", "pazo_p", 1.0, "finished", 0.6, seed=2, lr=0.1)
    fake_run(tmp_path / "s", "digits", "pazo_p", 1.0, "finished", 0.5, seed=0, lr=0.2)
    runs = load_runs([tmp_path / "s"])
    assert runs["config"].nunique() == 2
    assert sorted(runs.groupby("config")["seed"].count()) == [1, 3]


def test_a_cell_picked_among_private_configurations_says_its_cost_is_outside_epsilon(sweep):
    """DP-SGD at epsilon 1 is the best of two finished configurations on the same private data (a
    selection whose privacy cost no run's epsilon covers); DPZero has one configuration (no
    selection); SGD is non-private (no cost to select among)."""
    best = select_configs(load_runs([sweep[0]]), selection="val").set_index(["method", "epsilon"], drop=False)
    assert best.loc[("dpsgd", 1.0), "selection_outside_epsilon"]
    assert not best.loc[("dpzero", 1.0), "selection_outside_epsilon"]
    assert not best[best.method == "sgd"].selection_outside_epsilon.any()


def released(root: Path, method, epsilon, seed, accuracy, total=2.5, **method_values):
    """A run released by a private selection: its summary carries the selection's record and, as the
    release withholds it, no validation accuracy."""
    run_dir = fake_run(root, "cifar10", method, epsilon, "finished", accuracy, seed=seed, val=None, **method_values)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["selection"] = {"distribution": "geometric", "mean": 10, "total_epsilon": total / 2, "delta": 1e-5,
                            "seeds": 3, "total_epsilon_all_seeds": total}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


def test_a_privately_selected_cell_carries_its_total_and_no_outside_note(tmp_path):
    """Three seeds' selections chose three configurations: one cell of three seeds, marked with its
    total; the K runs under .private are never read; a grid-selected cell keeps its note."""
    root = tmp_path / "table1_cifar10"
    for seed, (lr, acc) in enumerate([(0.1, 0.60), (0.2, 0.64), (0.5, 0.62)]):
        released(root, "dpsgd", 1, seed, acc, lr=lr)
    fake_run(root / ".private" / "x", "cifar10", "dpsgd", 1, "finished", 0.99, lr=0.3)   # a K run: never read
    fake_run(root, "cifar10", "gep", 1, "finished", 0.5, lr=0.1)
    fake_run(root, "cifar10", "gep", 1, "finished", 0.55, lr=0.2)
    runs = load_runs([root])
    assert ".private" not in "".join(runs.run_dir) and len(runs) == 5
    best = select_configs(runs, selection="val").set_index("method")
    assert best.loc["dpsgd", "seeds"] == 3 and best.loc["dpsgd", "accuracy"] == pytest.approx(0.62)
    assert not best.loc["dpsgd", "selection_outside_epsilon"] and best.loc["dpsgd", "selection_epsilon"] == 2.5
    assert best.loc["gep", "selection_outside_epsilon"]
    assert best.loc["dpsgd", "best_run"].endswith("lr=0.2,seed=1")   # no validation score: the best test accuracy
    md, csv = tables(root, tmp_path / "out")
    assert cells(md)["DP-SGD"][2].startswith("62.0 ± 2.0 [3] ‡ε=2.50 (")   # eps=1: the paper's third column
    assert "‡ε=x" in md and "Privacy of the selection: a private cell without ‡" in md
    assert "the validation examples it reads without noise lie outside it" in md
    row = csv[(csv.method == "dpsgd") & (csv.column == "1")].iloc[0]
    assert row.selection == "private" and row.selection_epsilon == 2.5 and row.selected == "private selection"


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_the_private_datas_contribution_is_the_best_private_minus_public_only(tmp_path_factory, data):
    """Per epsilon column: the best private method's mean minus public only's, ± the root of the sum
    of their variances over seeds; 'within the seeds' spread' exactly when the difference is no larger."""
    root = tmp_path_factory.mktemp("c") / "table1_cifar10"
    accuracy = st.floats(0.05, 0.95)
    seeds = data.draw(st.integers(1, 3))
    values = {m: [data.draw(accuracy) for _ in range(seeds)] for m in ("public_only", "dpsgd", "pazo_m")}
    for method, accs in values.items():
        for seed, acc in enumerate(accs):
            fake_run(root, "cifar10", method, None if method == "public_only" else 1, "finished", acc, seed=seed)
    md, csv = tables(root, tmp_path_factory.mktemp("o"))
    means = {m: float(np.mean(v)) for m, v in values.items()}
    stds = {m: float(np.std(v, ddof=1)) if seeds > 1 else math.nan for m, v in values.items()}
    top = max(("dpsgd", "pazo_m"), key=lambda m: means[m])
    row = csv[csv.method == "contribution"].iloc[0]
    difference = 100 * (means[top] - means["public_only"])
    assert float(row.ours) == pytest.approx(difference, abs=0.051) and row.selected == top
    cell = cells(md)[make_tables.CONTRIBUTION][2]   # eps=1: the paper's third column
    assert cell.startswith(f"{difference:+.1f}")
    if seeds == 1:
        assert "±" not in cell and pd.isna(row["std"])
    else:
        spread = 100 * math.hypot(stds[top], stds["public_only"])
        assert float(row["std"]) == pytest.approx(spread, abs=0.051)
        assert ("within the seeds' spread" in cell) == (abs(difference) <= spread + 1e-9)
@pytest.mark.parametrize("attempts", [1, 3])
def test_archived_attempts_are_part_of_their_run_not_runs_of_their_own(tmp_path, attempts):
    """A relaunch keeps an earlier attempt's files in `<run dir>/attempts/<n>/` (pazo.run.attempts): a
    failed one read as a run of its own would make its configuration look failed."""
    run_dir = fake_run(tmp_path / "s", "digits", "dpzero", 1.0, "finished", 0.8, lr=0.1)
    for n in range(1, attempts + 1):
        archived = run_dir / "attempts" / str(n)
        archived.mkdir(parents=True)
        shutil.copy(run_dir / "config.yaml", archived / "config.yaml")
        (archived / "summary.json").write_text(json.dumps({"status": "failed", "privacy": {"private": True}}))
    runs = load_runs([tmp_path / "s"])
    assert len(runs) == 1 and list(runs["status"]) == ["finished"]
    assert list(runs["run_dir"]) == [str(run_dir)]


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(others=st.lists(st.sampled_from(["finished", "failed", "interrupted"]), max_size=4))
def test_a_tables_note_counts_its_runs_in_words(tmp_path_factory, others):
    """The note under a sweep's table counts its run directories in words (`Runs: 2 finished, 1
    failed`), each status once, adding up to the runs; was a Python dict (`Runs: {'finished': 2}`)."""
    root = tmp_path_factory.mktemp("sweep") / "demo"
    statuses = ["finished", *others]
    for seed, status in enumerate(statuses):
        fake_run(root, "digits", "dpzero", 1, status, 0.5 if status == "finished" else None, seed=seed)
    out = tmp_path_factory.mktemp("tables")
    assert make_tables.main([str(root), "--out", str(out)]) == 0
    [note] = [line for line in (out / "demo_digits.md").read_text().splitlines() if "Runs: " in line]
    said = note.split("Runs: ")[1].split(";")[0]
    counts = dict(reversed(part.split(" ")) for part in said.split(", "))
    assert {status: int(n) for status, n in counts.items()} == {s: statuses.count(s) for s in set(statuses)}
