"""One rule for a line of metrics.jsonl that is not a row, for every reader (`pazo.run.metrics_file`): a
torn LAST line (what a kill leaves) is left out and counted; a bad line before it is corruption,
refused with the file's line number; the recorder resuming an attempt keeps whole rows only, and a
relaunch that would carry a corrupt file on is refused before any compute."""
from __future__ import annotations

import json
import signal

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from pazo.config_schema import LoggerSchema
from pazo.errors import ConfigError
from pazo.run.metrics_file import CorruptMetrics, MetricRows, read_metric_rows
from pazo.run.recorder import Recorder

DISABLED = LoggerSchema(mode="disabled")

row = st.fixed_dictionaries({"step": st.integers(0, 60)},
                            optional={"epsilon": st.floats(0, 10), "test_accuracy": st.floats(0, 1),
                                      "note": st.text(max_size=6)})


def line_of(r: dict) -> bytes:
    return json.dumps(r).encode() + b"\n"


@st.composite
def not_a_row(draw) -> bytes:
    """A line (without its newline) that no reader may take for a row: a row cut short, another
    JSON value, an object without an integer step, bytes that are not text."""
    whole = json.dumps(draw(row))
    return draw(st.sampled_from([
        whole[:draw(st.integers(1, len(whole) - 1))].encode(),          # cut short (never blank: it opens with "{")
        b"[1, 2]", b'"step"', b"12", b"null", b'{"epoch": 1}', b'{"step": "3"}', b'{"step": 2.5}',
        b'{"step": true}', b"\xff\xfe{", b"{}{", b'{"step": 1}}']))


@st.composite
def damaged_file(draw):
    """(rows, lines): whole rows with some lines replaced by lines that are not rows, at random
    places; the last line maybe without its newline."""
    rows = draw(st.lists(row, min_size=1, max_size=12))
    lines = [line_of(r) for r in rows]
    for i in draw(st.lists(st.integers(0, len(lines) - 1), max_size=3, unique=True)):
        lines[i] = draw(not_a_row()) + b"\n"
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), b"  \n")              # a blank line holds nothing
    if draw(st.booleans()):
        lines[-1] = lines[-1][:draw(st.integers(1, len(lines[-1]) - 1))]      # cut short: no newline
    return lines


def as_rows(line: bytes) -> dict | None:
    """The test's own oracle: the row a whole line holds, built from how the file was made."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    ok = line.endswith(b"\n") and isinstance(value, dict) and type(value.get("step")) is int
    return value if ok else None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=damaged_file())
@example(lines=[b'{"step": 1}\n', b'{"step": 2}\n', b'{"step": 3, "te\n', b'{"step": 4}\n'])   # the report
@example(lines=[b'{"step": 1}\n', b'{"step": 2}\n', b'{"step": 3, "te'])                      # a kill's
def test_a_torn_last_line_is_left_out_and_any_other_bad_line_refuses_the_file(tmp_path, lines):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"".join(lines))
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    bad = [n for n, line in numbered[:-1] if as_rows(line) is None]
    if bad:
        with pytest.raises(CorruptMetrics, match=rf"^{path} line {bad[0]} is not a metrics row \("):
            read_metric_rows(path)
        return
    read = read_metric_rows(path)
    kept = [as_rows(line) for _, line in numbered]
    assert read.torn == (kept[-1] is None)
    last = {r["step"]: r for r in kept if r is not None}                  # a repeated step: its last row
    assert read.rows == [last[s] for s in sorted(last)]


def test_an_empty_or_blank_file_has_no_rows_and_nothing_torn(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for text in (b"", b"\n", b"  \n\n", b"\n "):
        path.write_bytes(text)
        assert read_metric_rows(path) == MetricRows([], torn=False)


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(row.map(line_of) | st.just(b"\n"), min_size=1, max_size=10), data=st.data())
def test_a_resumed_recorder_keeps_whole_rows_only_wherever_the_file_was_cut(tmp_path_factory, rows, data):
    """The recorder continuing an attempt from a checkpoint taken after some rows: the file cut at any
    byte (above or below the checkpoint's offset) keeps its whole rows (a blank line is passed over,
    as by the reader), and the next row starts a line of its own: the file then reads whole."""
    run_dir = tmp_path_factory.mktemp("run")
    whole = b"".join(rows)
    ends = [len(b"".join(rows[:i + 1])) for i in range(len(rows))]      # where each row's line ends
    offset = data.draw(st.sampled_from([0, *ends]))
    cut = data.draw(st.integers(0, len(whole)))
    (run_dir / "metrics.jsonl").write_bytes(whole[:cut])
    recorder = Recorder(run_dir, OmegaConf.create({"seed": 3}), DISABLED, resume_bytes=offset)
    kept = [json.loads(r) for r, end in zip(rows, ends) if end <= cut and r.strip()]
    assert recorder.released_through == (kept[-1]["step"] if kept else 0)
    recorder.log({"step": 99})
    recorder.close(failed=False)
    read = read_metric_rows(run_dir / "metrics.jsonl")
    assert not read.torn and read.rows == sorted({r["step"]: r for r in [*kept, {"step": 99}]}.values(),
                                                 key=lambda r: r["step"])


@pytest.mark.parametrize("damage,refused", [("garble line 2", True), ("a row torn after the last", False)])
def test_a_relaunch_that_would_carry_a_corrupt_metrics_file_on_is_refused(hydra_cfg, tmp_path, monkeypatch,
                                                                          damage, refused):
    """A run stopped with a checkpoint, its metrics.jsonl then damaged: a bad line before the last
    refuses the resume before any compute (one line naming the file's line, nothing moved); a torn
    last line is what a kill leaves: the resume goes on."""
    from pazo.methods.two_point import TwoPointMethod
    from pazo.train import run

    cfg = hydra_cfg("method=dpzero", "train.steps=8", "train.log_every=1", "train.checkpoint_every=2")
    original = TwoPointMethod.step

    def step(self, x, y, t):
        out = original(self, x, y, t)
        if t == 5:
            signal.raise_signal(signal.SIGTERM)   # honoured after this step: stopped with a checkpoint
        return out
    monkeypatch.setattr(TwoPointMethod, "step", step)
    run_dir = tmp_path / "run"
    assert run(cfg, run_dir)["status"] == "preempted"
    monkeypatch.setattr(TwoPointMethod, "step", original)
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_bytes().splitlines(keepends=True)
    if damage == "garble line 2":
        lines[1] = lines[1][:9] + b"\n"
    else:
        lines.append(b'{"step": 6, "te')      # what a kill while writing the next row leaves
    metrics.write_bytes(b"".join(lines))
    before = sorted(p.name for p in run_dir.iterdir())
    if not refused:
        assert run(cfg, run_dir)["status"] == "finished"
        assert [r["step"] for r in read_metric_rows(metrics).rows] == list(range(1, 9))
        return
    monkeypatch.setattr("pazo.run.launch.build_run", lambda *a, **k: pytest.fail("compute started"))
    with pytest.raises(ConfigError, match=rf"{metrics} line 2 is not a metrics row .*nothing was moved"):
        run(cfg, run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == before
