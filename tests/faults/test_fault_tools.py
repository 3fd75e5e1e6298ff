"""Family 7 of the bad-input catalogue: sweeps, tables, figures and benchmarks. A garbage sweep
spec, grid or launcher file and a bad launcher setting are one line (on a dry run too); the reports
over a folder with corrupt run directories skip and name them, and say so in one line when nothing
is usable; a corrupt benchmark results file is refused in one line; the benchmarks refuse an
unknown method, setting, device or override before any job."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fault_inputs_helpers import assert_one_error, error_lines, run_entry

from pazo import bench, report
from pazo.sweep import command as sweep, spec as sweep_spec

# --- sweeps ------------------------------------------------------------------------------------------

HEAD = "name: x\nsettings: [digits]\nmethods: [dpzero]\nepsilons: [1]\n"
SPECS = {
    "not YAML": "name: x\n settings: [\n",
    "binary": b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe",
    "a list": "- a\n- b\n",
    "a scalar": "just words\n",
    "empty": "",
    "settings not a list": "name: x\nsettings: digits\nmethods: [dpzero]\nepsilons: [1]\n",
    "an epsilon that is not a number": "name: x\nsettings: [digits]\nmethods: [dpzero]\nepsilons: [abc]\n",
    "a negative epsilon": "name: x\nsettings: [digits]\nmethods: [dpzero]\nepsilons: [-1]\n",
    "no methods": "name: x\nsettings: [digits]\nmethods: []\nepsilons: [1]\n",
    "a fractional seed": "name: x\nsettings: [digits]\nmethods: [dpzero]\nepsilons: [1]\nseeds: [0.5]\n",
    "extra values not a list": HEAD + "extra: {train.epochs: 3}\n",
    "unknown key": "name: x\nsettings: [digits]\nmethods: [dpzero]\nepsilons: [1]\nseed: [0]\n",
    "nonprivate not among methods": HEAD + "nonprivate: [sgd]\n",
}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_a_garbage_sweep_spec_is_one_line(case, tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    text = SPECS[case]
    spec.write_bytes(text if isinstance(text, bytes) else text.encode())
    code = sweep.main([str(spec), "--dry-run", "--out", str(tmp_path / "out")])
    assert_one_error(code, capsys.readouterr().err, "spec.yaml" if case in ("not YAML", "binary", "a list", "a scalar",
                                                                             "empty") else "sweep")
    assert not (tmp_path / "out").exists()


LAUNCHER_SETS = [
    ("joblib", "jobs=abc", "jobs"), ("joblib", "jobs=0", "jobs"), ("joblib", "threads_per_job=-1", "threads_per_job"),
    ("joblib", "jobs=1.5", "jobs"), ("slurm", "timeout_min=soon", "timeout_min"), ("slurm", "mem_gb=0", "mem_gb"),
    ("slurm", "cluster=pbs", "cluster"), ("slurm", "gpus_per_node=-1", "gpus_per_node"),
    ("slurm", "setup=module load cuda", "setup"), ("slurm", "wait=maybe", "wait"), ("slurm", "colour=red", "colour"),
    ("sequential", "launcher=pbs", "pbs"), ("sequential", "jobs=2", "jobs"),
]


@pytest.mark.parametrize("launcher,setting,word", LAUNCHER_SETS, ids=[f"{a}:{b}" for a, b, _ in LAUNCHER_SETS])
def test_a_bad_launcher_setting_fails_a_dry_run_too(launcher, setting, word, tmp_path, capsys):
    code = sweep.main(["demo", "--dry-run", "--launcher", launcher, "--set", setting, "--out", str(tmp_path)])
    assert_one_error(code, capsys.readouterr().err, word)


@pytest.mark.parametrize("text", ["launcher: [\n", "- joblib\n", "launcher: joblib\njobs: many\n"])
def test_a_garbage_launcher_file_is_one_line(text, tmp_path, capsys):
    path = tmp_path / "launcher.yaml"
    path.write_text(text)
    code = sweep.main(["demo", "--dry-run", "--launcher", str(path), "--out", str(tmp_path)])
    assert_one_error(code, capsys.readouterr().err, "launcher")


@pytest.mark.parametrize("grid", ["methods: [\n", "- dpzero\n", "methods: [dpzero]\n", "experiment: null\n",
                                  "methods:\n  dpzero: {method.lr: 0.1}\n"])
def test_a_garbage_grid_file_is_one_line(grid, tmp_path, monkeypatch, capsys):
    (tmp_path / "grids").mkdir()
    (tmp_path / "grids" / "digits.yaml").write_text(grid)
    (tmp_path / "spec.yaml").write_text("name: x\nsettings: [digits]\nmethods: [dpzero]\nepsilons: [1]\n")
    monkeypatch.setattr(sweep_spec, "SWEEPS", tmp_path)
    code = sweep.main([str(tmp_path / "spec.yaml"), "--dry-run", "--out", str(tmp_path / "out")])
    assert_one_error(code, capsys.readouterr().err, "grid")


def test_a_good_launcher_setting_still_passes(tmp_path, capsys):
    assert sweep.main(["demo", "--dry-run", "--methods", "dpzero", "--launcher", "joblib", "--set", "jobs=3",
                       "--out", str(tmp_path)]) == 0
    assert not error_lines(capsys.readouterr().err)


# --- reports over corrupt run directories --------------------------------------------------------------

def good_run(root: Path, name: str = "good", accuracy: float = 0.5) -> Path:
    """A finished private run directory as pazo.train writes it (the fields the reports read)."""
    run_dir = root / "digits" / "dpzero" / "eps=1" / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"dataset": {"name": "digits"}, "seed": 0,
                                                         "method": {"name": "dpzero", "lr": 0.1},
                                                         "privacy": {"epsilon": 1.0}, "train": {"batch_size": 64}}))
    (run_dir / "summary.json").write_text(json.dumps({
        "status": "finished", "final_test_accuracy": accuracy, "best_test_accuracy": accuracy,
        "final_val_accuracy": accuracy, "best_val_accuracy": accuracy, "median_s_per_iter": 0.01,
        "privacy": {"private": True, "target_epsilon": 1.0, "epsilon_spent": 0.99, "within_budget": True,
                    "guarantee_holds": True, "sampling": "poisson", "sampling_matches_accountant": True}}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "test_accuracy": accuracy * s / 4}) + "\n"
                                                   for s in range(1, 5)))
    return run_dir


CORRUPT = {
    "summary not JSON": {"summary.json": '{"status": "fini'},
    "summary a list": {"summary.json": "[1, 2]"},
    "summary binary": {"summary.json": b"\xff\xfe\x00garbage"},
    "accuracy a string": {"summary.json": json.dumps({"status": "finished", "final_test_accuracy": "high"})},
    "privacy block a string": {"summary.json": json.dumps({"status": "finished", "privacy": "yes"})},
    "config not YAML": {"config.yaml": ": : :\n  - ["},
    "config a list": {"config.yaml": "- 1\n"},
    "config without method": {"config.yaml": "dataset: {name: digits}\n"},
    "epsilon not a number": {"config.yaml": "dataset: {name: digits}\nmethod: {name: dpzero}\n"
                                            "privacy: {epsilon: lots}\n"},
}


def corrupt_run(root: Path, case: str) -> Path:
    run_dir = root / "digits" / "dpzero" / "eps=1" / case.replace(" ", "_")
    run_dir.mkdir(parents=True)
    files = {"config.yaml": "dataset: {name: digits}\nmethod: {name: dpzero}\nprivacy: {epsilon: 1.0}\nseed: 0\n",
             **CORRUPT[case]}
    for name, text in files.items():
        (run_dir / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return run_dir


@pytest.mark.parametrize("command", ["tables", "figures", "llm-table"])
def test_reports_skip_and_name_a_corrupt_run_directory(command, tmp_path, capsys):
    """Every kind of corruption (`CORRUPT`) in one folder beside a good run, in one report: each
    corrupt directory is skipped and named, none stops the others being read, and the good run still
    makes its table or figure (one report a command: `figures` draws for seconds a call)."""
    root = tmp_path / "table1_demo"
    good_run(root)
    bad = {case: corrupt_run(root, case) for case in sorted(CORRUPT)}
    code, _, err = run_entry(report.main, [command, str(root), *(["--out", str(tmp_path / "out")]
                                                                 if command != "llm-table" else [])], capsys)
    assert "Traceback" not in err
    assert [case for case, run_dir in bad.items() if f"pazo: skipped {run_dir}:" not in err] == [], err
    assert code == 0, err   # the good run still makes its table or figure


@pytest.mark.parametrize("command", ["tables", "figures", "llm-table"])
def test_a_folder_with_nothing_usable_says_so_and_fails(command, tmp_path, capsys):
    root = tmp_path / "sweep"
    for case in ("summary not JSON", "config not YAML"):
        corrupt_run(root, case)
    code, _, err = run_entry(report.main, [command, str(root), *(["--out", str(tmp_path / "out")]
                                                                 if command != "llm-table" else [])], capsys)
    assert_one_error(code, err, str(root))


def test_the_llm_table_over_unfinished_runs_says_so(tmp_path, capsys):
    root = tmp_path / "sweep"
    run_dir = good_run(root)
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "status": "failed"}))
    code, _, err = run_entry(report.main, ["llm-table", str(root)], capsys)
    assert_one_error(code, err, "nothing to tabulate", "1 failed")


@pytest.mark.parametrize("command", ["tables", "figures", "llm-table", "audit-table"])
def test_a_missing_folder_is_one_line(command, tmp_path, capsys):
    code, _, err = run_entry(report.main, [command, str(tmp_path / "nonexistent")], capsys)
    assert_one_error(code, err, "nonexistent")


@pytest.mark.parametrize("command", ["run", "figures"])
@pytest.mark.parametrize("damage", ["torn last row", "row 3 cut short"])
def test_every_report_reads_metrics_by_one_rule(command, damage, tmp_path, capsys):
    """A torn last row (a run killed mid-write) is left out, and said once, by every report; a bad
    row before it is corruption, named by the file's line: the run's curve is refused (`pazo-report
    run`: its one error line; `figures`: the run's curve is left out, the rest drawn). Before, `run`
    said "line 1 column 29" (a place in the row) and `figures` counted the bad rows and drew the rest."""
    root = tmp_path / "table1_demo"
    run_dir = good_run(root)
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    if damage == "torn last row":
        lines.append('{"step": 5, "test_acc')
    else:
        lines[2] = lines[2][:20] + "\n"
    metrics.write_text("".join(lines))
    argv = [command, str(run_dir)] if command == "run" else [command, str(root), "--out", str(tmp_path / "out")]
    code, _, err = run_entry(report.main, argv, capsys)
    assert "Traceback" not in err
    if damage == "torn last row":
        assert code == 0 and err.splitlines() == [f"pazo: {metrics}: its last line is not a whole row (cut short by a "
                                                  "run killed while writing it, or still being written): left out"]
    elif command == "run":
        assert_one_error(code, err, f"{metrics} line 3 is not a metrics row (not JSON")
    else:
        assert code == 0 and err.splitlines() == [f"pazo: left out the curve of {run_dir}: {metrics} line 3 is not a "
                                                  "metrics row (not JSON: Unterminated string starting at column 13): "
                                                  "the file is corrupt (only its last line may be cut short, as a "
                                                  "killed run leaves it)"]


AUDIT_FIELDS = {"threat": "white_box", "debug_break": None, "target_epsilon": 1.0, "printed_epsilon": 0.99,
                "printed_delta": 1e-5, "epsilon_at_audit_delta": 0.99, "audit_delta": 1e-5,
                "epsilon_lower_bound": 0.1, "confidence": 0.95, "correct": 10, "guesses": 12, "ceiling": 2.0,
                "canaries": 100, "steps": 10, "exceeds_printed": False}


@pytest.mark.parametrize("bad", ["not JSON", "audit a string", "lower bound missing", "threat unknown",
                                 "correct a string"])
def test_the_audit_table_skips_and_names_a_corrupt_audit(bad, tmp_path, capsys):
    root = tmp_path / "audits"
    good = root / "good"
    good.mkdir(parents=True)
    (good / "summary.json").write_text(json.dumps({"kind": "audit", "method": "dpzero", "seed": 0,
                                                   "audit": AUDIT_FIELDS}))
    broken = root / "broken"
    broken.mkdir()
    audit = dict(AUDIT_FIELDS)
    text = {"not JSON": '{"kind": "aud',
            "audit a string": json.dumps({"kind": "audit", "method": "dpzero", "seed": 0, "audit": "x"})}.get(bad)
    if text is None:
        if bad == "lower bound missing":
            del audit["epsilon_lower_bound"]
        else:
            audit.update({"threat unknown": {"threat": "grey_box"}, "correct a string": {"correct": "ten"}}[bad])
        text = json.dumps({"kind": "audit", "method": "dpzero", "seed": 0, "audit": audit})
    (broken / "summary.json").write_text(text)
    code, out, err = run_entry(report.main, ["audit-table", str(root)], capsys)
    assert code == 0 and "Traceback" not in err and f"pazo: skipped {broken}:" in err
    assert out.count("| DPZero |") == 1


# --- benchmark result files read by a table ---------------------------------------------------------

GOOD_ROW = {"setting": "digits", "method": "dpzero", "impl": "pazo", "median_s": 0.01, "p25_s": 0.009, "p75_s": 0.011}
BENCH_FILES = {
    "not JSON": '{"results": [',
    "binary": b"\x00\xff\xfe",
    "a list": "[1, 2]",
    "no results": json.dumps({"device": "cpu"}),
    "results not a list": json.dumps({"results": {"a": 1}}),
    "empty results": json.dumps({"results": []}),
    "a row without method": json.dumps({"results": [{"setting": "digits", "median_s": 0.1}]}),
    "a median that is a string": json.dumps({"results": [{**GOOD_ROW, "median_s": "fast"}]}),
    "a median of zero": json.dumps({"results": [{**GOOD_ROW, "median_s": 0}]}),
    "a floor ratio that is a string": json.dumps({"results": [{**GOOD_ROW, "floor_ratio": "n/a"}]}),
}


@pytest.mark.parametrize("case", sorted(BENCH_FILES))
def test_a_corrupt_benchmark_file_is_one_line_before_any_table(case, tmp_path, capsys):
    path = tmp_path / "methods_cpu.json"
    text = BENCH_FILES[case]
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "tables"
    code, _, err = run_entry(report.main, ["tables", "--benchmark", str(path), "--out", str(out)], capsys)
    assert_one_error(code, err, "methods_cpu.json")
    assert not out.exists()


def test_a_good_benchmark_file_still_makes_its_table(tmp_path, capsys):
    path = tmp_path / "methods_cpu.json"
    rows = [{**GOOD_ROW, "method": m, "median_s": t} for m, t in (("dpsgd", 0.02), ("dpzero", 0.01))]
    path.write_text(json.dumps({"device": "cpu", "command": "x", "results": rows}))
    code, _, err = run_entry(report.main, ["tables", "--benchmark", str(path), "--out", str(tmp_path / "t")], capsys)
    assert code == 0 and not error_lines(err) and (tmp_path / "t" / "table5_speed.md").exists()


# --- the benchmarks ------------------------------------------------------------------------------------

BENCH_MISTAKES = [
    (["methods", "--methods", "bogus"], "bogus"),
    (["methods", "--methods", ","], "no method given"),
    (["methods", "--settings", "nope"], "nope"),
    (["methods", "--device", "tpu"], "tpu"),
    (["methods", "--iters", "0"], "--iters"),
    (["methods", "--warmup", "x"], "--warmup"),
    (["methods", "--methods", "dpzero", "--settings", "digits", "--override", "method.bogus=1"], "method.bogus"),
    (["methods", "--methods", "dpzero", "--settings", "digits", "--override", "bogus=1"], "bogus"),
    (["methods", "--methods", "dpzero", "--settings", "digits", "--override", "train.eval_batch_size=0"],
     "train.eval_batch_size"),
    (["methods", "--methods", "dpzero", "--settings", "digits", "--override", "method.q=abc"], "method.q"),
    (["methods", "--frobnicate"], "frobnicate"),
    (["defaults", "--methods", "bogus"], "bogus"),
    (["defaults", "--jobs", "0"], "--jobs"),
    (["defaults", "--seed", "-1"], "--seed"),
    (["defaults", "--frobnicate"], "frobnicate"),
    (["nosuchbenchmark"], "nosuchbenchmark"),
]


@pytest.mark.parametrize("argv,word", BENCH_MISTAKES, ids=[" ".join(a) for a, _ in BENCH_MISTAKES])
def test_a_benchmark_mistake_is_one_line_before_any_job(argv, word, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a job was started"))
    code, _, err = run_entry(bench.main, [*argv, "--out", str(tmp_path / "r.json")] if argv[0] != "nosuchbenchmark"
                             else argv, capsys)
    assert_one_error(code, err, word)
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow   # a subprocess that imports the report stack (about 25 s on 2 loaded cores); in the quick suite
# the same command in-process: test_a_missing_folder_is_one_line
def test_pazo_report_tables_on_a_missing_folder_as_a_user_runs_it(tmp_path):
    """One subprocess: `python -m pazo.report tables /nonexistent`."""
    done = subprocess.run([sys.executable, "-m", "pazo.report", "tables", str(tmp_path / "nonexistent")],
                          capture_output=True, text=True, timeout=300)
    assert_one_error(done.returncode, done.stderr, "nonexistent")
