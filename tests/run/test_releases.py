"""What earlier attempts released (`pazo.run.releases.earlier_releases`): the highest step any outlet of
a run directory shows, so that deleting, cutting short or editing one file hides no release that
another outlet still shows."""
from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from pazo.config_schema import LoggerSchema
from pazo.errors import ConfigError
from pazo.run.loop import Progress
from pazo.run.recorder import Recorder
from pazo.run.releases import console_step, earlier_releases
from pazo.run.summary import print_summary, resumed_line
from outlet_damage import DAMAGE, damage
from wandb_log import wandb_log_bytes

CHECKS = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
STAMP = "[2026-01-01 00:00:00,000][pazo.train][INFO] - "
#: each outlet a run writes, as (the file in the run directory, what writes it showing `k` steps)
OUTLETS = ("metrics.jsonl", "summary.json", "wandb/offline-run-20260101_000000-abc/run-abc.wandb",
           "wandb/run-20260101_000000-abc/files/wandb-summary.json",
           "wandb/offline-run-20260101_000000-abc/files/output.log", "train.log", "stdout.log",
           "attempts/1/metrics.jsonl", "attempts/1/summary.json", "metrics.csv",
           "tensorboard/events.out.tfevents.1.host.1.0", "attempts/1/tensorboard/events.out.tfevents.1.host.1.0",
           "private/released_steps")


def rows(k: int) -> bytes:
    return b"".join(json.dumps({"step": t, "epoch": t / 7, "s_per_iter": 0.01, "sigma": 1.3, "epsilon": t / 100,
                                "train_loss": 2.3}).encode() + b"\n" for t in range(1, k + 1))


def summary(k: int) -> bytes:
    return json.dumps({"status": "preempted", "steps_done": k, "stopped_at_step": k,
                       "privacy": {"private": True, "steps_done": k}}, indent=2, sort_keys=True).encode()


def wandb_log(k: int, config_bytes: int = 10) -> bytes:
    """A W&B transaction log of a run that logged steps 1..k (its config record `config_bytes` long:
    a long one spans blocks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    run = pb.Record()
    run.run.run_id = "abc"
    item = run.run.config.update.add()
    item.key, item.value_json = "note", json.dumps("x" * config_bytes)
    history = []
    for t in range(1, k + 1):
        record = pb.Record()
        record.history.step.num = t
        for key, value in (("_step", t), ("step", t), ("epsilon", t / 100)):
            entry = record.history.item.add()
            entry.key, entry.value_json = key, json.dumps(value)
        history.append(record)
    return wandb_log_bytes([run, *history])


def csv_rows(k: int) -> bytes:
    return b"step,epoch,epsilon\n" + b"".join(f"{t},{t / 7},{t / 100}\n".encode() for t in range(1, k + 1))


def tensorboard_events(k: int) -> bytes:
    """A TensorBoard event file of a run that logged steps 1..k, as torch's SummaryWriter writes it."""
    from torch.utils.tensorboard import SummaryWriter

    with tempfile.TemporaryDirectory() as folder:
        writer = SummaryWriter(log_dir=folder)
        for t in range(1, k + 1):
            writer.add_scalar("epsilon", t / 100, global_step=t)
        writer.close()
        return next(Path(folder).glob("events.out.tfevents.*")).read_bytes()


def console(k: int) -> bytes:
    return "".join(f"{STAMP}progress: step {t}/{k + 5} ({t / (k + 5):.0%}), epoch 0.1, epsilon 0.100, 0.01 s/iter, "
                   f"about 1 s left\n" for t in range(1, k + 1)).encode()


#: by the end of the file's name (W&B's summary before pazo's)
WRITERS = {"wandb-summary.json": lambda k: json.dumps({"_step": k, "steps_done": k}).encode(),
           "metrics.jsonl": rows, "summary.json": summary, ".wandb": wandb_log, "output.log": console,
           "train.log": console, "stdout.log": console, "metrics.csv": csv_rows, ".0": tensorboard_events,
           "released_steps": lambda k: "".join(f"{t}\n" for t in range(1, k + 1)).encode()}


def write_outlet(run_dir: Path, name: str, k: int) -> Path:
    path = run_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = next(w for suffix, w in WRITERS.items() if name.endswith(suffix))
    path.write_bytes(writer(k))
    return path


@CHECKS
@given(k=st.integers(1, 40), shown=st.sets(st.sampled_from(OUTLETS), min_size=1))
def test_the_highest_step_any_outlet_shows_is_what_was_released(k, shown):
    with tempfile.TemporaryDirectory() as tmp:
        for name in shown:
            write_outlet(Path(tmp), name, k)
        released = earlier_releases(Path(tmp))
        assert released.step == k and released.shown_by in shown
        assert f"through step {k}, as {released.shown_by} shows" == released.said()


@CHECKS
@given(k=st.integers(1, 40), shown=st.lists(st.sampled_from(OUTLETS), min_size=2, max_size=4, unique=True),
       how=st.sampled_from(DAMAGE), at=st.floats(0, 1), junk=st.binary(min_size=1, max_size=64))
@example(k=12, shown=["metrics.jsonl", "wandb/offline-run-20260101_000000-abc/run-abc.wandb"], how="delete", at=0.0,
         junk=b"x")   # the reported case: metrics.jsonl deleted, the W&B log kept
def test_damage_to_one_outlet_hides_no_release_another_still_shows(k, shown, how, at, junk):
    with tempfile.TemporaryDirectory() as tmp:
        paths = [write_outlet(Path(tmp), name, k) for name in shown]
        damage(paths[0], how, at, junk)
        assert earlier_releases(Path(tmp)).step >= k


@CHECKS
@given(k=st.integers(1, 30), config_bytes=st.sampled_from([10, 40_000, 100_000]),
       at=st.floats(0, 1), junk=st.binary(min_size=1, max_size=200))
def test_a_damaged_wandb_log_still_shows_the_steps_of_its_undamaged_blocks(k, config_bytes, at, junk):
    """A W&B log whose records span blocks, edited at a random place: every history record wholly
    before the damage still counts, and the read ends (no error, no endless loop)."""
    data = wandb_log(k, config_bytes)
    cut = int(len(data) * at)
    intact = max((t for t in range(1, k + 1) if len(wandb_log(t, config_bytes)) <= cut), default=0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wandb" / "run-20260101_000000-abc" / "run-abc.wandb"
        path.parent.mkdir(parents=True)
        path.write_bytes(data[:cut] + junk + data[cut + len(junk):])
        assert earlier_releases(Path(tmp)).step >= intact


@CHECKS
@given(step=st.integers(1, 10**6), extra=st.integers(0, 10**6), epsilon=st.floats(0, 50), stamp=st.booleans(),
       earlier=st.one_of(st.none(), st.integers(1, 10**6)))
def test_the_console_lines_a_run_prints_name_the_steps_it_ran(step, extra, epsilon, stamp, earlier,
                                                              tmp_path_factory):
    """The progress line, the summary's epsilon line (with the steps earlier attempts released,
    `earlier`, where it counts them) and the resume line, as pazo prints them (and as train.log
    keeps them, timestamped), are read back as the highest step they name."""
    total, said = step + extra + 1, []
    progress = Progress(said.append, total, 17.3, 0, every_seconds=1, quiet=False, clock=iter([0, 5]).__next__)
    progress.update(step, epsilon)
    lines = [*said, resumed_line("/runs/a b", step, total), *summary_lines(step, epsilon, earlier)]
    prefix = STAMP if stamp else ""
    for line in lines:
        path = tmp_path_factory.mktemp("log") / "train.log"
        path.write_text(f"{prefix}{line}\n{prefix}  results: /runs/a b\n")
        expected = max(step, earlier or 0) if "released by" in line else step if "step" in line else 0
        assert console_step(path) == expected, line


def summary_lines(step: int, epsilon: float, earlier: int | None) -> list[str]:
    """The lines `print_summary` prints for a private run stopped after `step` steps (`earlier`:
    the steps earlier attempts released, where further)."""
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    logger = logging.getLogger("pazo.train")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO
    try:
        print_summary({"status": "preempted", "failure": None, "final_test_accuracy": None, "best_test_accuracy": 0.5,
                       "mean_s_per_iter": 0.01, "median_s_per_iter": 0.01, "run_dir": "/runs/a b",
                       "privacy": {"private": True, "epsilon_spent": epsilon, "target_epsilon": 50, "delta": 1e-5,
                                   "sigma": 1.2, "steps_done": step, "within_budget": True,
                                   "guarantee": "(epsilon, delta)-DP",
                                   **({"steps_released": earlier} if earlier else {})}})
    finally:
        logger.removeHandler(handler)
        logger.level = level
    assert any(f"{step} steps" in line for line in said)
    return said


@CHECKS
@given(k=st.integers(1, 30), kept=st.sets(st.sampled_from(["train.log", "summary.json", "wandb"])))
@example(k=12, kept={"summary.json", "wandb"})   # the reported case: SIGKILL after 12 rows, metrics.jsonl deleted
def test_a_killed_runs_rows_are_counted_when_metrics_jsonl_is_deleted(k, kept, tmp_path_factory):
    """A run killed (SIGKILL: no summary after its first, W&B's local log holding its header alone, as
    W&B leaves it until a 32 KiB block fills) after `k` rows, its metrics.jsonl deleted: the next
    launch still sees the `k` rows released, from the run's ledger, whichever of its other files stay."""
    run_dir = tmp_path_factory.mktemp("run")
    recorder = Recorder(run_dir, OmegaConf.create({"seed": 3}), LoggerSchema(mode="disabled"))
    recorder.write_summary({"status": "running"})
    for t in range(1, k + 1):
        recorder.log({"step": t, "epsilon": t / 100})
    (run_dir / "metrics.jsonl").unlink()
    if "wandb" in kept:
        log = run_dir / "wandb" / "offline-run-20260101_000000-abc" / "run-abc.wandb"
        log.parent.mkdir(parents=True)
        log.write_bytes(wandb_log_bytes([])[:7])
    if "train.log" in kept:
        (run_dir / "train.log").write_text(f"{STAMP}pazo: dpzero on digits\n")
    if "summary.json" not in kept:
        (run_dir / "summary.json").unlink()
    assert earlier_releases(run_dir).step == k


def test_an_outlet_that_cannot_be_read_is_refused_in_one_line(tmp_path):
    """Whether it shows a release cannot be told: the launch is refused, naming the file."""
    (tmp_path / "metrics.jsonl").mkdir()
    with pytest.raises(ConfigError, match=r"metrics.jsonl cannot be read \(not a regular file\), so what an earlier "
                                          r"attempt released cannot be told") as caught:
        earlier_releases(tmp_path)
    assert "\n" not in str(caught.value)


def test_a_directory_without_outlets_released_nothing(tmp_path):
    (tmp_path / "wandb" / "latest-run").mkdir(parents=True)
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "attempts" / "1").mkdir(parents=True)
    assert not earlier_releases(tmp_path) and earlier_releases(tmp_path / "absent").step == 0
