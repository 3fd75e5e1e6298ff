"""The loggers of `logger.report_to` (`pazo.run.loggers`) over random runs: each receives what the one
gate (`pazo.run.outlets`) releases and nothing else, TensorBoard's files read back with TensorBoard's
own reader hold the values of metrics.jsonl's released keys, a kill and a relaunch leave no step
twice in any logger, and what the loggers' files show released is counted by the next launch's
epsilon when metrics.jsonl (and every other outlet but them) is gone.

Runs are in this process (`pazo.train.run`, tiny digits runs, W&B disabled), stopped as
tests/killed_launch.py stops them: a SIGKILL is an exception that skips every write the killed
process could not have made (the loggers' files are left unclosed, as a kill leaves them), and a
dead pid."""
from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import composed_copy, run_cache
from killed_launch import launch
from pazo.run import outlets
from pazo.config_schema import LOGGERS
from pazo.errors import ConfigError
from pazo.run.loggers import CSV_FILE, TENSORBOARD_DIR, WRITERS, event_files, read_csv, tensorboard_scalars
from pazo.run.metrics_file import read_metric_rows

BASE = ["train.steps=4", "train.log_every=1", "device=cpu", "logger.mode=disabled"]
KILLS = (None, "SIGTERM", "SIGKILL", "crash")


def compose_cfg(overrides: list[str], cache: Path):
    return composed_copy(f"privacy.cache_dir={cache / 'sigma'}", *overrides)


def released_rows(run_dir: Path, private_diagnostics: bool) -> dict[int, dict]:
    """metrics.jsonl's rows by step, as the gate releases them."""
    rows = read_metric_rows(run_dir / "metrics.jsonl").rows
    return {row["step"]: outlets.released_row("metrics", row, private_diagnostics) for row in rows}


def csv_rows(run_dir: Path) -> list[dict]:
    return read_csv(run_dir / CSV_FILE)[1] if (run_dir / CSV_FILE).exists() else []


def tensorboard_points(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run's TensorBoard folder (all its event files), by tag."""
    points: dict[str, list[tuple[int, float]]] = {}
    for events in event_files(run_dir / TENSORBOARD_DIR):
        for tag, series in tensorboard_scalars(events).items():
            points.setdefault(tag, []).extend(series)
    return points


def allowed(key: str, private_diagnostics: bool) -> bool:
    kept = {outlets.RELEASED, outlets.PUBLIC, outlets.OUTSIDE} | ({outlets.PRIVATE} if private_diagnostics else set())
    return outlets.status("metrics", key) in kept


def check_loggers(run_dir: Path, report_to: list[str], private_diagnostics: bool) -> None:
    """The rule: each logger holds the released rows of metrics.jsonl, every step once, no other key."""
    released = released_rows(run_dir, private_diagnostics)
    if "csv" in report_to:
        rows = csv_rows(run_dir)
        header = read_csv(run_dir / CSV_FILE)[0] if rows else []   # (no row yet: no file)
        assert all(allowed(key, private_diagnostics) for key in header), header
        steps = [int(row["step"]) for row in rows]
        assert len(steps) == len(set(steps)), f"a step twice in metrics.csv: {steps}"
        assert steps == sorted(released), (steps, sorted(released))
        for row in rows:
            cells = {k: float(v) for k, v in row.items() if v != ""}
            assert cells == {k: float(v) for k, v in released[int(row["step"])].items()}
    if "tensorboard" in report_to:
        points = tensorboard_points(run_dir)
        assert all(allowed(tag, private_diagnostics) for tag in points), sorted(points)
        by_step: dict[int, dict] = {}
        for tag, series in points.items():
            for step, value in series:
                assert tag not in by_step.setdefault(step, {}), f"step {step} of {tag} twice in TensorBoard's files"
                by_step[step][tag] = value
        assert sorted(by_step) == sorted(released)
        for step, values in by_step.items():
            expected = {k: np.float32(v) for k, v in released[step].items() if k != "step"}
            assert {k: np.float32(v) for k, v in values.items()} == expected, step
    for name in set(WRITERS) - set(report_to):
        assert not (run_dir / {"csv": CSV_FILE, "tensorboard": TENSORBOARD_DIR}[name]).exists()


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return run_cache(tmp_path_factory.mktemp("logger-cache"))


RANDOM_RUNS = dict(
    report_to=st.lists(st.sampled_from(["tensorboard", "csv"]), min_size=1, max_size=2, unique=True),
    private_diagnostics=st.booleans(), method=st.sampled_from(["dpzero", "pazo_m", "dpsgd"]),
    kill=st.sampled_from(KILLS), after=st.integers(1, 3), checkpoint_every=st.sampled_from([1, 100]))


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**RANDOM_RUNS)
@example(report_to=["tensorboard", "csv"], private_diagnostics=True, method="dpzero", kill="SIGKILL", after=3,
         checkpoint_every=1)
def test_each_logger_holds_the_released_rows_once_through_a_kill_and_a_relaunch(
        tmp_path_factory, cache, monkeypatch, report_to, private_diagnostics, method, kill, after, checkpoint_every):
    logger_walk(tmp_path_factory, cache, monkeypatch, report_to, private_diagnostics, method, kill, after,
                checkpoint_every)


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**RANDOM_RUNS)
def test_each_logger_holds_the_released_rows_once_on_more_runs(
        tmp_path_factory, cache, monkeypatch, report_to, private_diagnostics, method, kill, after, checkpoint_every):
    logger_walk(tmp_path_factory, cache, monkeypatch, report_to, private_diagnostics, method, kill, after,
                checkpoint_every)


def logger_walk(tmp_path_factory, cache, monkeypatch, report_to, private_diagnostics, method, kill, after,
                checkpoint_every) -> None:
    """A run with `report_to`, killed after `after` steps by `kill` (None: to its end), relaunched
    to its end: the loggers' rule holds after each launch."""
    run_dir = tmp_path_factory.mktemp("run") / "run"
    overrides = [*BASE, f"method={method}", f"logger.report_to=[{','.join(report_to)}]",
                 f"logger.private_diagnostics={str(private_diagnostics).lower()}",
                 f"train.checkpoint_every={checkpoint_every}"]
    launch(compose_cfg(overrides, cache), run_dir, kill, after, monkeypatch)
    check_loggers(run_dir, report_to, private_diagnostics)
    if kill is not None:
        assert launch(compose_cfg(overrides, cache), run_dir, None, 0, monkeypatch) == "ran"
        check_loggers(run_dir, report_to, private_diagnostics)
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"


#: the killed launch both cases below relaunch from: 5 steps, no checkpoint, both loggers
KILLED_OVERRIDES = [*BASE, "train.steps=5", "method=dpzero", "logger.report_to=[csv,tensorboard]",
                    "train.checkpoint_every=100"]


@pytest.fixture(scope="module")
def killed_in_step_4(tmp_path_factory, cache) -> Path:
    """A run killed in its 4th step (3 rows out), launched once for the module: each case relaunches
    a copy of it."""
    run_dir = tmp_path_factory.mktemp("killed") / "run"
    with pytest.MonkeyPatch.context() as patch:
        assert launch(compose_cfg(KILLED_OVERRIDES, cache), run_dir, "SIGKILL", 4, patch) == "SIGKILL"
    return run_dir


@pytest.mark.parametrize("logger", ["csv", "tensorboard"])
def test_a_relaunch_counts_the_rows_a_logger_released_when_metrics_jsonl_is_gone(tmp_path, cache, monkeypatch,
                                                                                 killed_in_step_4, logger, caplog):
    """Killed in its 4th step (3 rows out) without a checkpoint, metrics.jsonl, train.log and the
    other logger's files deleted: `logger`'s files alone show those rows, and the relaunch (a replay,
    stopped after 1 step) prints an epsilon that covers them."""
    run_dir = tmp_path / "run"
    shutil.copytree(killed_in_step_4, run_dir, symlinks=True)
    shown = {int(row["step"]): float(row["epsilon"]) for row in csv_rows(run_dir)} if logger == "csv" else \
        dict(tensorboard_points(run_dir)["epsilon"])
    assert max(shown) == 3
    for name in ("metrics.jsonl", "train.log"):
        (run_dir / name).unlink(missing_ok=True)
    other = run_dir / (TENSORBOARD_DIR if logger == "csv" else CSV_FILE)
    shutil.rmtree(other) if other.is_dir() else other.unlink()
    with caplog.at_level(logging.INFO, logger="pazo"):
        launch(compose_cfg(KILLED_OVERRIDES, cache), run_dir, "SIGTERM", 1, monkeypatch)   # (stops as interrupted)
    privacy = json.loads((run_dir / "summary.json").read_text())["privacy"]
    assert privacy["steps_done"] == 1 and privacy["steps_released"] == 3
    assert np.float32(privacy["epsilon_spent"]) >= np.float32(shown[3])   # (TensorBoard keeps float32)
    assert "1 steps, 3 released by earlier attempts" in caplog.text


def test_the_default_is_wandb_alone_and_the_names_are_the_schemas():
    """Today's behaviour by default (W&B alone, as `logger.mode` says), and every name the schema
    takes has a writer (W&B's is the recorder's own)."""
    cfg = compose_cfg(["device=cpu"], Path("/nonexistent"))
    assert list(cfg.logger.report_to) == ["wandb"]
    assert set(LOGGERS) == {"wandb", *WRITERS}


@settings(max_examples=30, deadline=None)
@given(names=st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12), max_size=4))
@example(names=["tb"])
@example(names=["csv", "csv"])
def test_a_bad_logger_list_is_one_line_before_any_compute(names):
    from pazo.run.validate import validate_config

    cfg = compose_cfg([f"logger.report_to=[{','.join(names)}]"], Path("/nonexistent"))
    bad = [n for n in names if n not in LOGGERS] or len(set(names)) < len(names)
    if not bad:
        validate_config(cfg)
        return
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert "\n" not in str(err.value) and "logger.report_to" in str(err.value)


def test_a_csv_cut_short_by_a_kill_is_continued_after_its_last_whole_row(tmp_path):
    """A line a kill cut short is dropped, and the next row follows the whole ones."""
    from pazo.run.loggers import CsvLogger

    first = CsvLogger(tmp_path)
    for step in (1, 2):
        first.write({"step": step, "epsilon": step / 10})
    first.close()
    path = tmp_path / CSV_FILE
    path.write_bytes(path.read_bytes() + b"3,0.3")     # a row the kill cut before its newline
    second = CsvLogger(tmp_path)
    for step in (2, 3, 4):
        second.write({"step": step, "epsilon": step / 10, "test_accuracy": 0.5})
    second.close()
    header, rows = read_csv(path)
    assert header == ["step", "epsilon", "test_accuracy"]
    assert [(int(r["step"]), math.isclose(float(r["epsilon"]), int(r["step"]) / 10)) for r in rows] == \
        [(1, True), (2, True), (3, True), (4, True)]


@settings(max_examples=40, deadline=None)
@given(keys=st.lists(st.sampled_from(sorted(set(outlets.METRICS) - {"step"})), unique=True),
       values=st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=3))
def test_a_private_selection_releases_only_the_released_and_public_columns_of_metrics_csv(tmp_path_factory, keys,
                                                                                        values):
    """`outlets.RELEASE["metrics.csv"]`: outside and private keys stay in the private workspace."""
    from pazo.run.loggers import CsvLogger
    from pazo.sweep.selection import released_csv

    folder = tmp_path_factory.mktemp("csv")
    writer = CsvLogger(folder)
    for step, value in enumerate(values, 1):
        writer.write({"step": step, **{k.rstrip("*") + ("accuracy" if k.endswith("*") else ""): value for k in keys}})
    writer.close()
    (folder / "out.csv").write_bytes(released_csv(folder / CSV_FILE))
    header, rows = read_csv(folder / "out.csv")
    assert all(outlets.status("metrics", key) in outlets.RELEASE_STATUSES for key in header), header
    assert [row["step"] for row in rows] == [str(t) for t in range(1, len(values) + 1)]
