"""The tables and figures (pazo.report) on fabricated run directories: the paper's protocol (best test
accuracy over the grid) with '—' when every configuration failed and the paper's values beside
ours, selection on validation accuracy over seeds, runs without a privacy guarantee left out of the
epsilon columns and listed, chance-level marks, the public-only reference, the Table 8 and Table 5
layouts, figures that render, and the benchmarks' (pazo.bench) counts checked before any job, their
Ctrl-C and their result files."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from conftest import ROOT
from pazo.bench import common as bench_common
from pazo.bench import engines as bench_engines
from pazo.bench import methods as bench_methods
from pazo.bench import settings as bench_settings
from pazo.bench import step_ops
from pazo.report import figures as make_figures
from pazo.report import tables as make_tables
from pazo.results import load_runs, paper_values, select_configs



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


def test_paper_values_match_the_paper_text():
    paper = paper_values()
    cell = paper.set_index(["table", "setting", "method", "column"]).value
    assert cell[("1", "cifar10", "pazo_m", "0.1")] == 70.9 and cell[("1", "cifar10", "sgd", "nonprivate")] == 86.3
    assert cell[("3", "imdb", "pazo_s", "0.1")] == 74.6 and pd.isna(cell[("4", "mnli", "gep", "1")])
    assert cell[("5", "cifar10", "pazo_m", "s_per_iter")] == pytest.approx(0.051)
    assert cell[("8", "mnli", "dpzero", "q=5")] == 62.6
    assert len(paper[paper.table == "2"]) == 9 * 4 + 2      # no epsilon 3 for Tiny-ImageNet


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


def test_the_step_profile_pairs_three_steps_with_their_floor_and_traces_ours(tmp_path):
    """`profile_zo_step.py` on digits: our step (packed, unpacked) and the minimal one, each with a
    paired floor ratio, the minimal step's operations, and our step's operators under the profiler;
    `--device cuda` without CUDA is one line."""
    out = tmp_path / "profile.json"
    command = [sys.executable, "-m", "pazo.bench.profile_step", "--pairs", "3", "--warmup", "1",
               "--trace-steps", "2", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert set(result["steps"]) == {"ours", "ours_unpacked", "minimal"} and result["pairs"] == 3
    assert all(r["paired_floor_ratio"] > 0.5 and r["median_floor_ms"] > 0 for r in result["steps"].values())
    assert set(result["minimal_step_op_us"]) >= {"draw", "perturb", "forward+", "update"}
    ops = {row["op"]: row for row in result["ours_profiled_ops"]}
    assert ops["aten::normal_"]["calls_per_step"] >= 1 and "aten::convolution" in ops
    if not torch.cuda.is_available():
        done = subprocess.run(command[:3] + ["--device", "cuda", "--out", str(tmp_path / "no.json")],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 1 and done.stderr.strip() == \
            "profile_zo_step: --device cuda, but torch sees no CUDA device"


def test_step_ops_count_what_a_step_does_besides_its_floor(tmp_path):
    """count_step_ops.py: DPZero's in-place step on digits issues its floor's two forwards plus a
    few operations (perturb, move, restore and update: four adds on the packed buffer, the draw);
    PAZO-M's floor holds its public gradient too. An unknown method is argparse's one line."""
    saved = dict(bench_settings.SETTINGS)             # shared with other tests
    bench_settings.set_batch_size(step_ops.BATCH)
    try:
        row = step_ops.step_ops("digits", "dpzero", "inplace")
        pazo_m = step_ops.step_ops("digits", "pazo_m", "inplace")
    finally:
        bench_settings.SETTINGS.update(saved)
    assert row["step_ops"] == row["floor_ops"] + row["extra_ops"] and 0 < row["extra_ops"] < 30
    assert row["extra_by_op"]["add_"] == 4 and row["extra_by_op"]["normal_"] >= 1
    assert "convolution" not in row["extra_by_op"]                   # the forwards are the floor's
    assert pazo_m["floor_ops"] > row["floor_ops"] and "convolution_backward" not in pazo_m["extra_by_op"]
    done = subprocess.run([sys.executable, "-m", "pazo.bench.step_ops", "--methods", "mezo,sgd",
                           "--out", str(tmp_path / "o.json")], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.splitlines()[-1].endswith(
        "error: unknown method 'sgd'; choices: mezo, dpzero, pazo_m, pazo_p, pazo_p_prime, pazo_s")
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("asked,together", [((), False), (("method.public_grads_together=true",), True)])
def test_the_floor_takes_the_public_passes_as_the_method_does(asked, together, monkeypatch):
    """benchmark_methods.py's bare passes of PAZO-P take its k public gradients the way the method
    does (`public_grads_batched`): one by one under the CPU's default, together when forced."""
    from pazo.models.functional import FunctionalModel
    bm = bench_settings
    method, config, model = bm.build_benchmark_method("pazo_p", "digits", torch.device("cpu"), extra=asked)
    x, y = bm.synthetic_inputs("digits", 4, torch.device("cpu"))
    ways, original = [], FunctionalModel.mean_loss_grads

    def spy(self, batches, batched=None):
        ways.append(self.grads_together(batches, batched))
        return original(self, batches, batched)
    monkeypatch.setattr(FunctionalModel, "mean_loss_grads", spy)
    bm.bare_passes("digits", torch.device("cpu"), "pazo_p", config, model, x, y)()
    method.step(x, y, 1)
    assert ways == [together, together]


def test_public_gradients_benchmark_alternates_the_two_ways_on_the_methods_batches(monkeypatch):
    """benchmark_engines.py --public-grads: PAZO-P's k batches of b' examples (digits: 3 of 16),
    taken together and one by one in turn, each way timed once a round, and the model's own default
    recorded beside the paired ratio."""
    from pazo.models.functional import FunctionalModel
    engines = bench_engines
    calls, original = [], FunctionalModel.mean_loss_grads

    def spy(self, batches, batched=None):
        calls.append((batched, len(batches), tuple(batches[0][0].shape)))
        return original(self, batches, batched)

    monkeypatch.setattr(FunctionalModel, "mean_loss_grads", spy)
    row = engines.compare_public_grads("digits", torch.device("cpu"), warmup=1, iters=2)
    assert calls == [(True, 3, (16, 1, 8, 8)), (False, 3, (16, 1, 8, 8))] * 3
    assert (row["batches"], row["public_batch_size"], row["iters"], row["model_default"]) == (3, 16, 2, "one_by_one")
    assert row["together_median_s"] > 0 and row["one_by_one_median_s"] > 0
    assert row["paired_together_over_one_by_one"] > 0


@pytest.mark.parametrize("name,argument", [("methods", "--iters=0"), ("engines", "--warmup=-1"),
                                           ("profile_step", "--pairs=0")])
def test_benchmark_counts_are_checked_before_any_job(name, argument, tmp_path):
    """A count below its least value is argparse's one line and exit 2, before any job runs or any
    result file is written."""
    out = tmp_path / "result.json"
    done = subprocess.run([sys.executable, "-m", f"pazo.bench.{name}", argument, "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1].endswith(f"error: argument {argument.split('=')[0]}: must be an integer >= "
                                                 f"{1 if name != 'engines' else 0}, got "
                                                 f"{argument.split('=')[1]}")
    assert not out.exists()


def test_an_interrupted_benchmark_is_one_line_and_keeps_the_earlier_result(tmp_path, capsys, monkeypatch):
    """Ctrl-C in a benchmark: one line, exit 130; a result file interrupted while being written
    leaves the earlier one as it was (written to a temporary file, then renamed) and no leftover."""
    bench = bench_common

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as done:
        bench.run_main("benchmark_methods", interrupted)
    assert done.value.code == 130
    assert capsys.readouterr().err == ("benchmark_methods: interrupted; nothing written (an earlier result file "
                                       "is as it was)\n")
    out = tmp_path / "result.json"
    out.write_text('{"earlier": 1}')
    write_text = Path.write_text

    def half_then_interrupted(path, text):
        write_text(path, text[: len(text) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", half_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        bench.write_result(out, {"results": list(range(100))})
    monkeypatch.undo()
    assert out.read_text() == '{"earlier": 1}' and [p.name for p in tmp_path.iterdir()] == ["result.json"]
    bench.write_result(out, {"results": [1]})
    assert json.loads(out.read_text()) == {"results": [1]} and [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_a_terminated_benchmark_is_one_line_and_kills_its_running_job(tmp_path):
    """SIGTERM to a benchmark while a job subprocess runs: one line, exit 143, and the job is
    killed with it (before, the parent died and the job ran on to its end)."""
    pid_file = tmp_path / "job.pid"
    job = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    parent = (f"import subprocess, sys; from pazo.bench import common as b; "
              f"b.run_main('benchmark_methods', lambda: subprocess.run([sys.executable, '-c', {job!r}]))")
    proc = subprocess.Popen([sys.executable, "-c", parent], stderr=subprocess.PIPE, text=True)
    job_pid = None
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        job_pid = int(pid_file.read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
        err = proc.stderr.read()
        assert err.splitlines()[-1] == ("benchmark_methods: terminated; nothing written (an earlier result file is "
                                        "as it was)") and "Traceback" not in err
        with pytest.raises(ProcessLookupError):
            os.kill(job_pid, 0)
        job_pid = None
    finally:   # nothing this test started is left running when it fails
        proc.kill()
        proc.wait()
        if job_pid is not None:
            try:
                os.kill(job_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


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


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["cifar10_nf224", "tiny_imagenet_vit", "imdb_lstm", "mnli_roberta"])
def test_the_gpu_benchmark_settings_run_on_cpu_at_a_tiny_batch(setting, tmp_path):
    """`make bench-gpu`'s four paper settings, run through the same script on CPU with two examples
    per private batch (`--batch-size 2`): a first-order method, a zeroth-order one and one with k
    public batches (PAZO-S: its k = 3 public batches of MNLI fit this machine's memory; PAZO-P's
    k = 6, one by one, peak near 15 GB), each engine, build and step on the setting's real model;
    every row has its floor (private forwards and public passes) and peak memory, and no job fails."""
    out = tmp_path / "methods.json"
    done = subprocess.run([sys.executable, "-m", "pazo.bench.methods", "--device", "cpu",
                           "--settings", setting, "--methods", "dpsgd,dpzero,pazo_s", "--iters", "1",
                           "--warmup", "0", "--batch-size", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["results"]
    assert [(r["method"], r.get("engine")) for r in rows] == [
        ("forward", None), ("dpsgd", None), ("dpzero", "vectorised"), ("dpzero", "inplace"),
        ("pazo_s", "vectorised"), ("pazo_s", "inplace")]
    assert all("error" not in r for r in rows), [r["error"] for r in rows if "error" in r]
    assert {r["batch_size"] for r in rows} == {2}   # as each job reports it: --batch-size reached the jobs
    for r in rows:
        assert r["median_s"] > 0 and r["peak_mem_mb"] > 0
        if r["method"] != "forward":
            assert r["dim"] > 10**5 and r["mem_ratio"] > 0
        if r["method"] in ("dpzero", "pazo_s"):
            assert r["forward_s"] > 0 and r["paired_floor_ratio"] > 0 and r["paired_speedup_over_dpsgd"] > 0
            assert r["floor_s"] == pytest.approx(r["forwards"] * r["forward_s"] + r["public_s"])
        if r["method"] == "dpzero":
            assert r["forwards"] == 2 and r["public_passes"] == 0
        if r["method"] == "pazo_s":
            assert r["forwards"] >= 3 and r["public_passes"] >= 2 and r["public_s"] > 0


@pytest.mark.parametrize("returncode,stderr,expected", [
    (-9, "", "killed by SIGKILL (out of memory?)"),
    (-11, "half a line\n", "killed by SIGSEGV: half a line"),
    (1, "Traceback ...\nRuntimeError: CUDA out of memory\n", "RuntimeError: CUDA out of memory"),
    (0, "", "exit 0 and no output"),
])
def test_a_failed_benchmark_job_says_how_it_ended(returncode, stderr, expected):
    """A job that wrote no row is reported by its last stderr line or, killed by a signal (the
    out-of-memory killer's SIGKILL writes nothing), by the signal: before, "no output"."""
    assert bench_methods.job_failure(returncode, stderr) == expected


def test_the_gpu_benchmark_script_runs_the_share_it_is_given(tmp_path):
    """`SETTINGS` and `PARTS` select a share of `make bench-gpu` (the whole does not fit one lease):
    only the named settings' benchmarks, the engines without the LSTM, Table 5 from the files there
    are; an unknown part is one line before anything runs. A stand-in interpreter logs each call."""
    log = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\n")
    fake.chmod(0o755)

    def run(**env):
        log.unlink(missing_ok=True)
        done = subprocess.run(["bash", str(ROOT / "scripts" / "run_gpu_benchmarks.sh")], capture_output=True,
                              text=True, env={**os.environ, "PYTHON": str(fake), **env})
        return done, (log.read_text().splitlines() if log.exists() else [])

    done, calls = run(SETTINGS="imdb_lstm mnli_roberta", PARTS="methods engines")
    assert done.returncode == 0, done.stderr
    scripts = [c.split()[0] for c in calls[1:]]   # after the CUDA check
    assert scripts == ["scripts/benchmark_methods.py"] * 2 + ["scripts/benchmark_engines.py"]
    assert "--settings imdb_lstm " in calls[1] and "methods_cuda_mnli_roberta.json" in calls[2]
    assert "--settings mnli_roberta " in calls[3]   # the LSTM always runs in place: no engine comparison

    done, calls = run(SETTINGS="imdb_lstm mnli_roberta", PARTS="public")
    assert done.returncode == 0, done.stderr
    assert len(calls) == 2 and calls[1].startswith("scripts/benchmark_engines.py --public-grads ")
    assert "--settings imdb_lstm,mnli_roberta " in calls[1] and "public_grads_cuda.json" in calls[1]

    done, calls = run(SETTINGS="imdb_lstm", PARTS="engines memory")
    assert done.returncode == 0, done.stderr
    assert [c.split()[0] for c in calls[1:]] == ["scripts/benchmark_memory.py"] * 4

    done, calls = run(SETTINGS="tiny_imagenet_vit", PARTS="profile")
    assert done.returncode == 0, done.stderr
    assert len(calls) == 2
    assert calls[1].startswith("scripts/profile_zo_step.py --device cuda --setting tiny_imagenet_vit ")
    assert calls[1].endswith("--out scripts/results/zo_step_profile_cuda_tiny_imagenet_vit.json")

    done, calls = run(PARTS="methods tabels")
    assert done.returncode == 2 and calls == []
    assert done.stderr.strip() == \
        "run_gpu_benchmarks: unknown part 'tabels' (profile, methods, engines, public, tables, memory)"
