"""The Recorder is the one writer of a run's files, the audit's included: a record other than the
summary (`write_record`) reads back as the JSON of what was given (non-finite numbers as null), a
run that logs no rows (`rows=False`, the audit) has no metrics.jsonl, and a resumed attempt goes on
after the whole rows of metrics.jsonl, however the file was cut or edited."""
from __future__ import annotations

import json
import math

from hypothesis import example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from outlet_damage import damage
from pazo.config_schema import LoggerSchema
from pazo.run.recorder import Recorder, _whole_rows_kept

DISABLED = LoggerSchema(mode="disabled")
values = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats() | st.text(max_size=8),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                   max_size=3), max_leaves=12)


def finite(value):
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


@settings(max_examples=30, deadline=None)
@given(record=st.dictionaries(st.text(min_size=1, max_size=6), values, max_size=4), rows=st.booleans())
def test_a_record_reads_back_as_written_and_rows_only_when_asked(tmp_path_factory, record, rows):
    run_dir = tmp_path_factory.mktemp("run")
    recorder = Recorder(run_dir, OmegaConf.create({"seed": 3}), DISABLED, rows=rows)
    recorder.write_record("audit.json", record)
    recorder.write_summary({"status": "finished", "audit": record})
    recorder.close(failed=False)
    assert json.loads((run_dir / "audit.json").read_text()) == finite(record)
    assert json.loads((run_dir / "summary.json").read_text())["audit"] == finite(record)
    assert (run_dir / "metrics.jsonl").exists() == rows
    assert "seed: 3" in (run_dir / "config.yaml").read_text()
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp") or ".tmp." in p.name]


def last_row_step(data: bytes) -> int:
    for line in reversed(data.splitlines()):
        try:
            step = json.loads(line).get("step")
        except (ValueError, AttributeError):
            continue
        if type(step) is int:
            return step
    return 0


@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 12), at_checkpoint=st.integers(0, 12), how=st.sampled_from(["as written", "truncate", "edit"]),
       at=st.floats(0, 1), junk=st.binary(min_size=1, max_size=40))
@example(n=6, at_checkpoint=4, how="truncate", at=0.5, junk=b"x")   # cut mid-row before the checkpoint's offset
def test_a_resume_goes_on_after_the_whole_rows_of_a_damaged_metrics_file(tmp_path_factory, n, at_checkpoint, how,
                                                                         at, junk):
    """What is kept is the file up to a row's end (a row cut short goes, nothing else), never an
    error, and the step returned is that of the last line kept that reads as a row (0: none)."""
    rows = [json.dumps({"step": t, "epsilon": t / 10}).encode() + b"\n" for t in range(1, n + 1)]
    path = tmp_path_factory.mktemp("run") / "metrics.jsonl"
    path.write_bytes(b"".join(rows))
    if how != "as written":
        damage(path, how, at, junk)
    before, offset = path.read_bytes(), len(b"".join(rows[:at_checkpoint]))
    step = _whole_rows_kept(path, offset)
    kept = path.read_bytes()
    assert before.startswith(kept) and (kept.endswith(b"\n") or kept == b"")
    assert len(kept) >= before.rfind(b"\n", 0, min(offset, len(before))) + 1   # the rows before the offset stay
    assert step == last_row_step(kept)
    if how == "as written":
        assert kept == before and step == n


class LedgerCheckingLogger:
    """A logger (and W&B) that, on each row it gets, reads the run's ledger: the row's step must be there."""

    def __init__(self, run_dir):
        self.ledger, self.seen = run_dir / "private" / "released_steps", []

    def write(self, row: dict) -> None:
        self.seen.append(row["step"] in map(int, self.ledger.read_text().split()))

    def log(self, row: dict, step: int) -> None:
        self.write({**row, "step": step})

    def close(self) -> None:
        pass


@settings(max_examples=30, deadline=None)
@given(steps=st.lists(st.integers(1, 10**9), min_size=1, max_size=8, unique=True).map(sorted))
def test_every_row_is_in_the_ledger_before_any_outlet_gets_it(tmp_path_factory, steps):
    """The rule the relaunch counts on (`pazo.run.releases`): the step of every row the recorder lets out is
    in the run's owner-only ledger before metrics.jsonl, a logger or W&B gets the row."""
    run_dir = tmp_path_factory.mktemp("run")
    recorder = Recorder(run_dir, OmegaConf.create({"seed": 3}), DISABLED)
    outlet = LedgerCheckingLogger(run_dir)
    recorder.loggers, recorder.wandb = [outlet], outlet
    real_append = recorder._append
    recorder._append = lambda data: (outlet.write(json.loads(data)), real_append(data))
    for step in steps:
        recorder.log({"step": step, "epsilon": 0.1})
    recorder.wandb = None
    recorder.close(failed=False)
    assert outlet.seen == [True] * 3 * len(steps)
    assert (run_dir / "private" / "released_steps").stat().st_mode & 0o777 == 0o600


@settings(max_examples=20, deadline=None)
@given(report_to=st.lists(st.sampled_from(["csv", "tensorboard"]), unique=True), diagnostics=st.booleans())
@example(report_to=["csv"], diagnostics=True)
def test_the_recorder_follows_the_runs_typed_logger_section(tmp_path_factory, report_to, diagnostics):
    """The recorder reads the typed `logger` section the launch hands it (issue 57: the run's
    config typed once, at the door): its loggers and whether rows carry the private diagnostics."""
    logger = LoggerSchema(mode="disabled", report_to=["wandb", *report_to], private_diagnostics=diagnostics)
    recorder = Recorder(tmp_path_factory.mktemp("run"), OmegaConf.create({"seed": 3}), logger)
    try:
        assert [type(w).__name__ for w in recorder.loggers] == \
            [{"csv": "CsvLogger", "tensorboard": "TensorBoardLogger"}[name] for name in report_to]
        assert recorder.private_diagnostics is diagnostics and recorder.wandb is None
    finally:
        recorder.close(failed=False)
